// The KV cache's host and disk tiers over HTTP: a server whose device pool is too small for its prompts serves a
// repeated long prompt from the host tier (cached tokens in usage, tier hits in /metrics) with the same text; a
// restarted server finds it on disk; a corrupted disk file is detected and never served; flag mistakes stop the
// server at start with the flag named.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, spawnTern, modelDir, metrics, post } from './server.mjs';

const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-e2e-kv-tiers-'));
after(() => fs.rmSync(cacheDir, { recursive: true, force: true }));

// qwen3-chat-tiny caches 256 bytes a token: a block of 16 tokens is 4 KiB. The device pool holds 640 tokens, the
// host pool 48 blocks (768 tokens); each prompt below is a few hundred tokens, so four of them push the first out
// of both, onto the disk.
const TIERS = ['--num-kv-blocks', '40', '--host-kv-cache-memory', '192KiB', '--kv-cache-dir', cacheDir,
  '--overlap-schedule', 'on'];

function text(seed, words) {
  const vocabulary = ['alpha', 'beta', 'gamma', 'delta', 'river', 'stone', 'cloud', 'seven', 'green', 'paper'];
  let state = seed;
  const out = [];
  for (let i = 0; i < words; ++i) {
    state = (state * 1103515245 + 12345) % 2147483648;
    out.push(vocabulary[state % vocabulary.length]);
  }
  return out.join(' ');
}
const DOCUMENT = text(1, 360);
const OTHERS = [2, 3, 4, 5, 6].map((seed) => text(seed, 360));

async function complete(server, prompt) {
  const response = await post(server.baseURL, '/completions', { model: 'tiny', prompt, max_tokens: 8, temperature: 0 });
  assert.equal(response.status, 200, await response.clone().text());
  const body = await response.json();
  return { text: body.choices[0].text, cached: body.usage.prompt_tokens_details.cached_tokens };
}

let firstAnswer;

test('a prompt evicted from the device comes back from the host tier, then the disk tier, with the same text', async () => {
  const server = await startServer({ args: TIERS, maxModelLen: 512 });
  try {
    firstAnswer = await complete(server, DOCUMENT);
    assert.equal(firstAnswer.cached, 0);
    await complete(server, OTHERS[0]);
    await complete(server, OTHERS[1]);  // the document's blocks leave the device for the host tier
    const again = await complete(server, DOCUMENT);
    assert.equal(again.text, firstAnswer.text);
    assert.ok(again.cached >= 256, `cached ${again.cached}`);
    const values = await metrics(server.url);
    assert.ok(values['tern:prefix_cache_tier_hits_total{tier="host"}'] > 0, JSON.stringify(values));
    assert.ok(values['tern:kv_offload_bytes_total{direction="to_device"}'] > 0);
    assert.ok(values['tern:host_kv_cache_blocks'] === 48);
    for (const other of OTHERS) await complete(server, other);  // now through the host pool onto the disk
    assert.ok((await metrics(server.url))['tern:kv_disk_write_bytes_total'] > 0);
  } finally {
    await server.stop();
  }
});

test('a restarted server finds the prompt on disk', async () => {
  const server = await startServer({ args: TIERS, maxModelLen: 512 });
  try {
    assert.ok((await metrics(server.url))['tern:kv_disk_cache_blocks'] > 0);
    const again = await complete(server, DOCUMENT);
    assert.equal(again.text, firstAnswer.text);
    assert.ok(again.cached >= 256, `cached ${again.cached}`);
    assert.ok((await metrics(server.url))['tern:prefix_cache_tier_hits_total{tier="disk"}'] >= 256);
  } finally {
    await server.stop();
  }
});

test('a corrupted disk file is detected and skipped, and the answer stays the same', async () => {
  for (const file of fs.readdirSync(cacheDir, { recursive: true })) {
    const full = path.join(cacheDir, file);
    if (!fs.statSync(full).isFile()) continue;
    const bytes = fs.readFileSync(full);
    for (let at = 2048; at < bytes.length; at += 2048) bytes[at] ^= 0x5a;
    fs.writeFileSync(full, bytes);
  }
  const server = await startServer({ args: TIERS, maxModelLen: 512 });
  try {
    assert.ok((await metrics(server.url))['tern:kv_disk_corrupt_records_total'] > 0);
    const again = await complete(server, DOCUMENT);
    assert.equal(again.text, firstAnswer.text);
    assert.equal(again.cached, 0);
  } finally {
    await server.stop();
  }
});

test('tier flag mistakes stop the server at start, naming the flag', async () => {
  const cases = [
    [['--kv-cache-dir', cacheDir], /--kv-cache-dir: the disk tier lies under the host tier/],
    [['--host-kv-cache-memory', 'lots'], /--host-kv-cache-memory/],
    [['--kv-write-policy', 'writeback'], /--kv-write-policy/],
    [['--host-kv-cache-memory', '1MiB', '--no-prefix-cache'], /needs prefix caching/],
  ];
  for (const [args, message] of cases) {
    const argv = ['serve', '--model', modelDir('qwen3-chat-tiny'), '--port', '0', '--threads', '1', ...args];
    // A flag is refused before the server listens; the engine's checks come once it loads the model.
    let stderr;
    try {
      const server = await spawnTern(argv, { what: 'tern serve' });
      const exited = await server.exitPromise;
      assert.notEqual(exited.code, 0, server.stderr);
      stderr = server.stderr;
    } catch (error) {
      stderr = error.message;
    }
    assert.match(stderr, message);
  }
});
