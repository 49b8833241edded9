// Malformed and adversarial requests: every one gets an HTTP answer (or a timely close), never a 5xx or a crash,
// and the server keeps serving (/health after each group). Seeded, so a failure reproduces.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, post, rawExchange } from './server.mjs';

let server;

before(async () => {
  server = await startServer({ args: ['--header-timeout', '2', '--max-body-size', '12'] });
});

after(async () => {
  assert.equal((await server.stop()).code, 0, server.stderr);
});

async function healthy() {
  const response = await fetch(`${server.url}/health`);
  assert.equal(response.status, 200);
}

// A client error in OpenAI's shape.
async function expectClientError(response, context) {
  const text = await response.text();
  assert.ok(response.status >= 400 && response.status < 500, `${context}: ${response.status} ${text.slice(0, 300)}`);
  const body = JSON.parse(text);
  assert.equal(typeof body.error.message, 'string', context);
}

// mulberry32: a small seeded generator.
function random(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

test('huge and odd numbers', async () => {
  for (const literal of ['1e400', '-1e400', '99999999999999999999999999', '18446744073709551616', '-0', '1e-400',
    '9223372036854775807', '-9223372036854775808', '4294967297', '2147483648', 'NaN', 'Infinity']) {
    for (const field of ['max_tokens', 'temperature', 'n', 'seed', 'top_k', 'logprobs']) {
      const body = `{"prompt": "x", "max_tokens": 2, "${field}": ${literal}}`;
      const response = await post(server.url, '/v1/completions', body);
      if (response.status === 200) {
        await response.text();  // e.g. a seed that fits, or -0 for top_k
      } else {
        await expectClientError(response, body);
      }
    }
  }
  await healthy();
});

test('deep nesting, invalid UTF-8 and binary garbage', async () => {
  await expectClientError(await post(server.url, '/v1/chat/completions', '['.repeat(1_000_000)), 'deep arrays');
  await expectClientError(await post(server.url, '/v1/chat/completions',
    `{"messages": ${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}}`), 'deep objects');
  await expectClientError(await post(server.url, '/v1/chat/completions',
    '{"messages": [{"role": "user", "content": ' + '['.repeat(60) + ']'.repeat(60) + '}]}'), 'nested content');
  const invalidUtf8 = Buffer.concat([Buffer.from('{"prompt": "'), Buffer.from([0xff, 0xc0, 0x80, 0xed, 0xa0, 0x80]),
    Buffer.from('"}')]);
  await expectClientError(await post(server.url, '/v1/completions', new Uint8Array(invalidUtf8)), 'invalid UTF-8');
  await expectClientError(await post(server.url, '/v1/completions', '{"prompt": "\\ud800"}'), 'lone surrogate escape');
  const next = random(7);
  for (let i = 0; i < 50; ++i) {
    const bytes = new Uint8Array(1 + Math.floor(next() * 2000)).map(() => Math.floor(next() * 256));
    await expectClientError(await post(server.url, i % 2 ? '/v1/completions' : '/v1/chat/completions', bytes), `garbage ${i}`);
  }
  await healthy();
});

test('10 MB bodies', async () => {
  const tenMb = 10 << 20;
  await expectClientError(await post(server.url, '/v1/completions', 'x'.repeat(tenMb)), '10 MB of junk');
  await expectClientError(await post(server.url, '/v1/completions', JSON.stringify({ prompt: 'y'.repeat(tenMb) })),
    '10 MB prompt');
  await expectClientError(await post(server.url, '/v1/completions',
    JSON.stringify({ prompt: Array.from({ length: 2_000_000 }, (_, i) => i % 1000) })), '2M token ids');
  const padded = await post(server.url, '/v1/completions',
    JSON.stringify({ prompt: 'ok', max_tokens: 1, ignored: 'z'.repeat(tenMb) }));
  assert.equal(padded.status, 200, 'unknown fields are ignored, however large');
  await padded.text();
  await expectClientError(await post(server.url, '/v1/completions', 'q'.repeat(13 << 20)), 'over the 12 MiB limit');
  await healthy();
});

test('broken HTTP gets 4xx or a close, never a hang', async () => {
  const cases = [
    'GARBAGE\r\n\r\n',
    'GET / HTTP/9.9\r\n\r\n',
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n',
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n',
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
    `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(70_000)}\r\n\r\n`,
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n',
  ];
  for (const request of cases) {
    const result = await rawExchange(server.port, [request], { timeoutMs: 5_000 });
    assert.notEqual(result.how, 'timeout', `no answer or close for ${JSON.stringify(request.slice(0, 60))}`);
    if (result.text.length > 0) assert.match(result.text, /^HTTP\/1\.1 4\d\d /, JSON.stringify(request.slice(0, 60)));
  }
  const big = await rawExchange(server.port, [cases[5]]);
  assert.match(big.text, /^HTTP\/1\.1 431 /);
  await healthy();
});

test('slowloris: partial heads and bodies are dropped after the header timeout', async () => {
  const trickle = ['POST /v1/completions HTTP/1.1\r\n', 'Host: x\r\n', 'Content-Type: application/json\r\n',
    ...Array.from({ length: 40 }, (_, i) => `X-Slow-${i}: y\r\n`)];
  const slowHead = rawExchange(server.port, trickle, { delayMs: 200, timeoutMs: 10_000 });
  const slowBody = rawExchange(server.port,
    ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"pro'], { timeoutMs: 10_000 });
  // Many idle connections that never send a byte.
  const idle = Array.from({ length: 200 }, () => rawExchange(server.port, [], { timeoutMs: 10_000 }));
  // The server keeps answering others meanwhile.
  await healthy();
  const [head, body, ...rest] = await Promise.all([slowHead, slowBody, ...idle]);
  for (const result of [head, body, ...rest]) {
    assert.notEqual(result.how, 'timeout', 'the server should drop the connection');
    assert.ok(result.elapsedMs < 6_000, `closed after ${result.elapsedMs} ms`);
  }
  await healthy();
});

// Valid requests with one field replaced by an adversarial value: a 200 or a 4xx in OpenAI's shape, never a 5xx.
test('property: mutated requests never break the server', async () => {
  const next = random(2024);
  const pick = (list) => list[Math.floor(next() * list.length)];
  const values = [null, true, false, 0, -1, 1, 2, 0.5, -0.5, 1e308, -1e308, 2 ** 31, 2 ** 53, -(2 ** 63), '', 'x',
    '\u0000', '\ud83d\ude00', 'a'.repeat(5000), [], [1], ['a'], [[1, 2]], {}, { a: 1 }, { 5: 2 }, [null], [{}]];
  const chatFields = ['messages', 'model', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k',
    'min_p', 'n', 'stop', 'seed', 'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'logit_bias',
    'logprobs', 'top_logprobs', 'tools', 'tool_choice', 'chat_template_kwargs', 'stop_token_ids', 'ignore_eos',
    'response_format', 'add_generation_prompt', 'stream_options'];
  const completionFields = ['prompt', 'model', 'max_tokens', 'temperature', 'echo', 'logprobs', 'stop', 'n', 'seed',
    'suffix', 'best_of', 'logit_bias', 'stop_token_ids'];
  let ok = 0;
  for (let i = 0; i < 300; ++i) {
    const isChat = next() < 0.5;
    const body = isChat
      ? { model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }
      : { model: 'tiny', prompt: 'hi', max_tokens: 2 };
    const field = pick(isChat ? chatFields : completionFields);
    body[field] = pick(values);
    if (next() < 0.3) body.messages = [{ role: pick(['user', 'assistant', 'tool', 'x', 5]), content: pick(values) }];
    // Keep generations short: an accepted max_tokens of 2^31 would be refused as too long anyway.
    if (field === 'n' && typeof body.n === 'number' && body.n > 4) body.n = 4;
    if (isChat && field === 'max_tokens') body.max_completion_tokens = 2;
    const response = await post(server.url, isChat ? '/v1/chat/completions' : '/v1/completions', body);
    const text = await response.text();
    const context = `${JSON.stringify(body).slice(0, 300)} -> ${response.status} ${text.slice(0, 300)}`;
    assert.ok(response.status === 200 || (response.status >= 400 && response.status < 500), context);
    const json = JSON.parse(text);
    if (response.status === 200) {
      ++ok;
      assert.ok(Array.isArray(json.choices), context);
    } else {
      assert.equal(typeof json.error.message, 'string', context);
    }
  }
  assert.ok(ok > 20, `only ${ok} of 300 mutated requests were accepted: the mutations are too harsh to test much`);
  await healthy();
  const response = await post(server.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'still there?' }], max_tokens: 3 });
  assert.equal(response.status, 200);
});

test('pipelined requests on one connection are answered in order', async () => {
  const request = (id) => `GET /health HTTP/1.1\r\nHost: x\r\nx-request-id: r${id}\r\n\r\n`;
  const socket = net.connect(server.port, '127.0.0.1');
  await new Promise((r) => socket.on('connect', r));
  let text = '';
  socket.on('data', (d) => { text += d.toString(); });
  socket.write(request(1) + request(2) + request(3));
  const deadline = Date.now() + 5_000;
  while ((text.match(/HTTP\/1\.1 200/g) ?? []).length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  socket.destroy();
  const ids = [...text.matchAll(/x-request-id: (r\d)/gi)].map((m) => m[1]);
  assert.deepEqual(ids, ['r1', 'r2', 'r3']);
});
