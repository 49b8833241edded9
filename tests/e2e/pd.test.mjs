// Prefill/decode disaggregation end to end: one `tern serve --role prefill`, one `--role decode`, and
// `tern gateway --prefill ... --decode ...` in front. Greedy completions through the gateway equal a single
// instance's token for token; the decode instance's prefix cache shows the prompts' KV arrived, over TCP and
// through shared memory (--kv-transfer ipc); with the prefill instance killed, requests still succeed (the decode
// instance prefills itself).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, spawnTern, metrics, post, waitFor } from './server.mjs';

const MODEL = 'tern-py-13m';  // a real (small) model: wrong KV shows as different text
const API_KEY = 'pd-test-key';
const HITS = 'tern:prefix_cache_hits_total';

// Each well over a few 16-token blocks.
const PROMPTS = [
  'import os\nimport sys\nimport json\n\n\ndef read_config(path):\n    """Read a JSON config file and return a dict."""\n' +
    '    with open(path) as handle:\n        return json.load(handle)\n\n\ndef main():\n    config = read_config(',
  'class Stack:\n    """A simple stack."""\n\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n' +
    '        self.items.append(item)\n\n    def pop(self):\n        return self.items.pop()\n\n    def peek(self):\n',
  'def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\n' +
    'def factorial(n):\n    result = 1\n    for i in range(2, n + 1):\n        result *= i\n    return result\n\n\ndef primes(',
  '# Parse command line arguments\nimport argparse\n\nparser = argparse.ArgumentParser(description="Process files")\n' +
    'parser.add_argument("--input", help="the input file")\nparser.add_argument("--output", help="the output file")\n',
];

let single;
let prefill;
let decode;
let gateway;
let kvPort;

async function startGateway(args) {
  const argv = ['gateway', '--host', '127.0.0.1', '--port', '0', '--policy', 'round_robin', '--health-interval',
    '0.2', '--admin-api-key', API_KEY, ...args];
  const gw = await spawnTern(argv, { what: 'tern gateway', timeoutMs: 30_000 });
  await waitFor(async () => {
    const response = await fetch(`${gw.url}/admin/replicas`, { headers: { authorization: `Bearer ${API_KEY}` } });
    return (await response.json()).replicas.every((r) => r.healthy);
  }, 30_000, 'decode replica healthy');
  return gw;
}

async function complete(url, prompt) {
  const response = await post(url, '/v1/completions',
    { model: 'tiny', prompt, max_tokens: 24, temperature: 0, logprobs: 0 });
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  const choice = body.choices[0];
  // The sampled tokens themselves ("token_id:<id>" is not asked for; the tokens' strings and count pin them down).
  return { text: choice.text, tokens: choice.logprobs.tokens, completion_tokens: body.usage.completion_tokens };
}

before(async () => {
  [single, prefill, decode] = await Promise.all([
    startServer({ model: MODEL }),
    startServer({ model: MODEL, args: ['--role', 'prefill'] }),
    startServer({ model: MODEL, args: ['--role', 'decode', '--kv-transfer-port', '0'] }),
  ]);
  const match = /accepting KV transfers \(tcp\) on 127\.0\.0\.1:(\d+)/.exec(decode.stderr);
  assert.ok(match, `no KV transfer line:\n${decode.stderr}`);
  kvPort = Number(match[1]);
  gateway = await startGateway(['--prefill', prefill.url, '--decode', decode.url, '--decode-kv',
    `127.0.0.1:${kvPort}`]);
});

after(async () => {
  await Promise.all([gateway, single, prefill, decode].filter(Boolean).map((p) => p.stop()));
});

test('disaggregated greedy output equals a single instance token for token, with the KV sent over TCP', async () => {
  for (const prompt of PROMPTS) {
    const expected = await complete(single.url, prompt);
    const hitsBefore = (await metrics(decode.url))[HITS] ?? 0;
    const got = await complete(gateway.url, prompt);
    assert.deepEqual(got, expected);
    const hitsAfter = (await metrics(decode.url))[HITS];
    // The decode instance never saw this prompt: every hit is KV that came from the prefill instance.
    assert.ok(hitsAfter - hitsBefore >= 32, `decode prefix cache hits grew by ${hitsAfter - hitsBefore} tokens`);
  }
  assert.match(prefill.stderr,
    /KV of 1 prompt\(s\) sent to 127\.0\.0\.1:\d+ \(tcp\): \d+ blocks, \d+ of them during the prefill; [1-9]\d* newly cached there/);
  // Both hops of these sequential requests mostly reuse a keep-alive connection to the prefill and decode replicas
  // (one may open another when a request follows the previous answer before its connection is back in the pool).
  const gatewayMetrics = await metrics(gateway.url, { authorization: `Bearer ${API_KEY}` });
  const opened = gatewayMetrics['tern:gateway_upstream_connections_opened_total'];
  const reused = gatewayMetrics['tern:gateway_upstream_connections_reused_total'];
  assert.equal(opened + reused, 2 * PROMPTS.length);
  assert.ok(reused >= PROMPTS.length, `${reused} of ${2 * PROMPTS.length} hops reused a connection`);
});

test('the same through shared memory between two instances of one host (--kv-transfer ipc)', async () => {
  const [prefillIpc, decodeIpc] = await Promise.all([
    startServer({ model: MODEL, args: ['--role', 'prefill', '--kv-transfer', 'ipc', '--kv-transfer-chunk-blocks', '2'] }),
    startServer({ model: MODEL, args: ['--role', 'decode', '--kv-transfer', 'ipc', '--kv-transfer-port', '0'] }),
  ]);
  let gw;
  try {
    const match = /accepting KV transfers \(ipc\) on 127\.0\.0\.1:(\d+)/.exec(decodeIpc.stderr);
    assert.ok(match, `no KV transfer line:\n${decodeIpc.stderr}`);
    gw = await startGateway(['--prefill', prefillIpc.url, '--decode', decodeIpc.url, '--decode-kv',
      `127.0.0.1:${match[1]}`]);
    for (const prompt of PROMPTS) {
      const variant = `${prompt}\n# through shared memory\n`;
      const expected = await complete(single.url, variant);
      const hitsBefore = (await metrics(decodeIpc.url))[HITS] ?? 0;
      assert.deepEqual(await complete(gw.url, variant), expected);
      const hitsAfter = (await metrics(decodeIpc.url))[HITS];
      assert.ok(hitsAfter - hitsBefore >= 32, `decode prefix cache hits grew by ${hitsAfter - hitsBefore} tokens`);
    }
    assert.match(prefillIpc.stderr, /sent to 127\.0\.0\.1:\d+ \(ipc\): \d+ blocks, .* [1-9]\d* newly cached there/);
  } finally {
    await Promise.all([gw, prefillIpc, decodeIpc].filter(Boolean).map((p) => p.stop()));
  }
});

test('a kv_transfer_params request to the prefill instance is answered with one token', async () => {
  const response = await post(prefill.url, '/v1/completions', {
    model: 'tiny', prompt: PROMPTS[0] + ' # again', max_tokens: 50, temperature: 0,
    kv_transfer_params: { decode_url: `127.0.0.1:${kvPort}`, request_key: 'direct' },
  });
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  assert.equal(body.usage.completion_tokens, 1);
  const refused = await post(prefill.url, '/v1/completions', {
    model: 'tiny', prompt: PROMPTS[1] + ' # refused', max_tokens: 5,
    kv_transfer_params: { decode_url: '127.0.0.1:1', request_key: 'nowhere' },
  });
  assert.equal(refused.status, 502);
  assert.match((await refused.json()).error.message, /KV transfer to 127\.0\.0\.1:1/);
});

test('a prefill instance that never answers costs one --prefill-timeout, then the decode instance prefills', async () => {
  // Accepts connections and reads requests, never answers (a hung prefill instance).
  const sockets = [];
  const silent = net.createServer((socket) => { sockets.push(socket); socket.on('data', () => {}); });
  await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const hungUrl = `http://127.0.0.1:${silent.address().port}`;
  const gw = await startGateway(['--prefill', hungUrl, '--prefill-timeout', '1', '--decode', decode.url,
    '--decode-kv', `127.0.0.1:${kvPort}`]);
  try {
    const variant = `${PROMPTS[2]}\n# the prefill instance hangs\n`;
    const expected = await complete(single.url, variant);
    const start = Date.now();
    assert.deepEqual(await complete(gw.url, variant), expected);
    const elapsedMs = Date.now() - start;
    assert.ok(elapsedMs >= 900 && elapsedMs < 15_000, `took ${elapsedMs} ms`);
    assert.match(gw.stderr, /prefill on http:\/\/127\.0\.0\.1:\d+ failed \(no response: .*\)/);
  } finally {
    await gw.stop();
    sockets.forEach((socket) => socket.destroy());
    silent.close();
  }
});

test('with the prefill instance killed, requests still succeed and still match', async () => {
  await prefill.stop('SIGKILL');
  for (const prompt of PROMPTS) {
    const variant = `${prompt}\n# after the prefill instance died\n`;
    const expected = await complete(single.url, variant);
    assert.deepEqual(await complete(gateway.url, variant), expected);
  }
  assert.match(gateway.stderr, /prefill on http:\/\/127\.0\.0\.1:\d+ failed/);
});
