// HTTP protocol hardening of `tern serve`: request framing that a proxy in front could read differently (request
// smuggling) is refused with 400 and a close, broken bodies get an answer, HTTP/1.1 needs a Host, GET /v1/models/{id}
// answers as OpenAI's does, engine-side validation errors name their field, and a drain that runs out of time ends
// its streams properly.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import OpenAI from 'openai';
import {
  startServer, spawnTern, waitForHealth, modelDir, CHAT_MODEL, post, rawExchange, waitFor, metrics,
} from './server.mjs';

let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  assert.equal((await server.stop()).code, 0, server.stderr);
});

// Not anchored to line starts: a response that follows a body without a newline counts too.
const statusLines = (text) => text.match(/HTTP\/1\.1 \d{3} /g) ?? [];
const bodyOf = (text) => JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));

// A request with `headers` and `body`, then a second request on the same connection that must never be answered.
async function expectRefusedAndClosed(headers, body, what) {
  const smuggled = 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n';
  const result = await rawExchange(server.port,
    [`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${headers}\r\n${body}${smuggled}`],
    { timeoutMs: 5_000 });
  assert.equal(result.how, 'closed', `${what}: the connection should close after the 400:\n${result.text}`);
  assert.deepEqual(statusLines(result.text), ['HTTP/1.1 400 '], `${what}: one 400, nothing more:\n${result.text}`);
  assert.match(result.text, /\r\nconnection: close\r\n/i, what);
  assert.equal(bodyOf(result.text).error.type, 'invalid_request_error', what);
  return bodyOf(result.text).error.message;
}

test('a Transfer-Encoding other than chunked is 400 and closes the connection', async () => {
  const body = '5\r\nhello\r\n0\r\n\r\n';
  for (const coding of ['xchunked', 'chunked, identity', 'gzip', 'identity']) {
    const message = await expectRefusedAndClosed(`Transfer-Encoding: ${coding}\r\n`, body, coding);
    assert.match(message, /Transfer-Encoding/, coding);
  }
  // Two Transfer-Encoding fields, even when the last one is chunked.
  await expectRefusedAndClosed('Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n', body, 'two fields');
});

test('Content-Length with Transfer-Encoding, and repeated or conflicting Content-Length, are 400 and close', async () => {
  const body = '{"prompt": "x", "max_tokens": 1}';
  const length = Buffer.byteLength(body);
  await expectRefusedAndClosed(`Transfer-Encoding: gzip\r\nContent-Length: ${length}\r\n`, body, 'TE gzip + CL');
  await expectRefusedAndClosed(`Content-Length: ${length}\r\nTransfer-Encoding: chunked\r\n`, body, 'CL + TE chunked');
  await expectRefusedAndClosed(`Transfer-Encoding: chunked\r\nContent-Length: ${length}\r\n`, body, 'TE chunked + CL');
  await expectRefusedAndClosed(`Content-Length: ${length}\r\nContent-Length: ${length}\r\n`, body, 'duplicate CL');
  await expectRefusedAndClosed(`Content-Length: ${length}, ${length}\r\n`, body, 'CL list');
  await expectRefusedAndClosed(`Content-Length: ${length}\r\nContent-Length: 2\r\n`, body, 'conflicting CL');
  // A well-framed chunked request still works, and so does the request pipelined behind it.
  const chunked = `${length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
  const ok = await rawExchange(server.port, [
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n' +
    `${chunked}GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
  ]);
  assert.deepEqual(statusLines(ok.text), ['HTTP/1.1 200 ', 'HTTP/1.1 200 '], ok.text);
});

test('a malformed chunked body is answered 400', async () => {
  const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
  for (const body of ['zz\r\n', '5\r\nhelloXX0\r\n\r\n', '5;\x01\r\nhello\r\n0\r\n\r\n']) {
    const result = await rawExchange(server.port, [head + body], { timeoutMs: 5_000 });
    assert.equal(result.how, 'closed', JSON.stringify(body));
    assert.deepEqual(statusLines(result.text), ['HTTP/1.1 400 '], `${JSON.stringify(body)}:\n${result.text}`);
    assert.match(bodyOf(result.text).error.message, /body/);
  }
});

test('a client that shuts its side down mid-body still gets a 400', async () => {
  const socket = net.connect(server.port, '127.0.0.1');
  const received = [];
  socket.on('data', (d) => received.push(d));
  const closed = new Promise((resolve) => socket.on('close', resolve));
  await new Promise((resolve) => socket.on('connect', resolve));
  socket.end('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"pro');
  const timer = setTimeout(() => socket.destroy(), 5_000);
  await closed;
  clearTimeout(timer);
  const text = Buffer.concat(received).toString('latin1');
  assert.deepEqual(statusLines(text), ['HTTP/1.1 400 '], text);
  assert.match(bodyOf(text).error.message, /body/);
});

test('a body that stalls partway is answered 408 at the body timeout, then the connection closes', async () => {
  const impatient = await startServer({ args: ['--header-timeout', '1'] });
  try {
    const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n';
    const stalled = [
      ['Content-Length', `${head}Content-Length: 100\r\n\r\n{"pro`],
      ['chunked', `${head}Transfer-Encoding: chunked\r\n\r\n20\r\n{"prompt": "x"`],
      ['100-continue', `${head}Content-Length: 30\r\nExpect: 100-continue\r\n\r\n`],
    ];
    for (const [what, request] of stalled) {
      const result = await rawExchange(impatient.port, [request], { timeoutMs: 10_000 });
      assert.equal(result.how, 'closed', `${what}: ${result.text}`);
      assert.ok(result.elapsedMs >= 900 && result.elapsedMs < 5_000, `${what}: answered after ${result.elapsedMs} ms`);
      const answers = statusLines(result.text).filter((line) => line !== 'HTTP/1.1 100 ');
      assert.deepEqual(answers, ['HTTP/1.1 408 '], `${what}:\n${result.text}`);
      assert.match(result.text, /\r\nconnection: close\r\n/i, what);
      const { error } = JSON.parse(result.text.slice(result.text.lastIndexOf('\r\n\r\n') + 4));
      assert.equal(error.type, 'invalid_request_error', what);
      assert.match(error.message, /body did not arrive within 1 s/, what);
    }
    assert.equal((await fetch(`${impatient.url}/health`)).status, 200);
  } finally {
    assert.equal((await impatient.stop()).code, 0, impatient.stderr);
  }
});

test('an HTTP/1.1 request without exactly one Host header is 400; HTTP/1.0 needs none', async () => {
  const missing = await rawExchange(server.port, ['GET /health HTTP/1.1\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n'],
    { timeoutMs: 5_000 });
  assert.equal(missing.how, 'closed');
  assert.deepEqual(statusLines(missing.text), ['HTTP/1.1 400 '], missing.text);
  assert.match(bodyOf(missing.text).error.message, /Host/);
  const twice = await rawExchange(server.port, ['GET /health HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n'], { timeoutMs: 5_000 });
  assert.deepEqual(statusLines(twice.text), ['HTTP/1.1 400 '], twice.text);
  const old = await rawExchange(server.port, ['GET /health HTTP/1.0\r\n\r\n'], { timeoutMs: 5_000 });
  assert.match(old.text, /^HTTP\/1\.1 200 /, old.text);
});

test('GET /v1/models/{id} returns the served model, and 404 for another id', async () => {
  const list = await (await fetch(`${server.url}/v1/models`)).json();
  const response = await fetch(`${server.url}/v1/models/tiny`);
  assert.equal(response.status, 200);
  assert.deepEqual(await response.json(), list.data[0]);
  const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
  const model = await client.models.retrieve('tiny');
  assert.equal(model.id, 'tiny');
  assert.equal(model.object, 'model');
  await assert.rejects(client.models.retrieve('gpt-4'), (e) => e.status === 404 && e.code === 'model_not_found');
  const unknown = await fetch(`${server.url}/v1/models/tin%79x`);
  assert.equal(unknown.status, 404);
  const error = (await unknown.json()).error;
  assert.equal(error.param, 'model');
  assert.match(error.message, /'tinyx'/);
  assert.equal((await post(server.url, '/v1/models/tiny', {})).status, 405);
});

test('GET /v1/models/{id} needs the API key as /v1/models does; a served name with a slash is found', async () => {
  const guarded = await spawnTern(['serve', '--model', modelDir(CHAT_MODEL), '--host', '127.0.0.1', '--port', '0',
    '--served-model-name', 'org/tiny-chat', '--api-key', 'sekrit', '--kv-cache-memory', '64MiB', '--threads', '1'],
  { what: 'tern serve' });
  guarded.baseURL = `${guarded.url}/v1`;
  try {
    await waitForHealth(guarded.url);
    assert.equal((await fetch(`${guarded.url}/v1/models/org%2Ftiny-chat`)).status, 401);
    const headers = { authorization: 'Bearer sekrit' };
    const encoded = await fetch(`${guarded.url}/v1/models/org%2Ftiny-chat`, { headers });
    assert.equal(encoded.status, 200);
    assert.equal((await encoded.json()).id, 'org/tiny-chat');
    const plain = await fetch(`${guarded.url}/v1/models/org/tiny-chat`, { headers });
    assert.equal(plain.status, 200);
    const client = new OpenAI({ baseURL: guarded.baseURL, apiKey: 'sekrit', maxRetries: 0 });
    assert.equal((await client.models.retrieve('org/tiny-chat')).id, 'org/tiny-chat');
  } finally {
    assert.equal((await guarded.stop()).code, 0, guarded.stderr);
  }
});

test('engine-side validation errors name their own field', async () => {
  const vocabSize = 151936;  // qwen3-chat-tiny's config.json
  const cases = [
    ['logit_bias', { logit_bias: { [vocabSize]: 1 } }],
    ['stop_token_ids', { stop_token_ids: [vocabSize] }],
    ['top_p', { top_p: 1e-50 }],  // rounds to 0 as a 32-bit float
  ];
  for (const [field, extra] of cases) {
    for (const path of ['/v1/completions', '/v1/chat/completions']) {
      const body = path === '/v1/completions' ? { prompt: 'x', max_tokens: 1, ...extra }
        : { messages: [{ role: 'user', content: 'x' }], max_tokens: 1, ...extra };
      const response = await post(server.url, path, body);
      const text = await response.text();
      assert.equal(response.status, 400, text);
      const error = JSON.parse(text).error;
      assert.equal(error.param, field, `${path} ${text}`);
      assert.ok(error.message.includes(field), `${path} ${text}`);
    }
  }
});

test('streams still running when the drain times out end with finish_reason "abort" and [DONE]', async () => {
  const draining = await startServer({ args: ['--drain-timeout', '1'] });
  try {
    const response = await post(draining.url, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Count forever.' }], max_tokens: 2000, ignore_eos: true, n: 2, stream: true,
      stream_options: { include_usage: true },
    });
    const whole = post(draining.url, '/v1/completions', { prompt: 'x', max_tokens: 2000, ignore_eos: true });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let text = decoder.decode((await reader.read()).value);
    // Running sequences: the stream's two choices and the whole response's one.
    await waitFor(async () => (await metrics(draining.url))['tern:num_requests_running'] >= 3, 5_000,
      'both requests to run');
    draining.proc.kill('SIGTERM');
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value);
    }
    const events = text.split('\n\n').filter(Boolean).map((e) => e.slice(6));
    assert.equal(events.at(-1), '[DONE]', text.slice(-500));
    const usage = JSON.parse(events.at(-2));
    assert.ok(usage.usage.completion_tokens > 0 && usage.usage.completion_tokens < 4000, events.at(-2));
    const reasons = new Map();
    for (const event of events.slice(0, -2)) {
      for (const choice of JSON.parse(event).choices) {
        if (choice.finish_reason !== null) reasons.set(choice.index, choice.finish_reason);
      }
    }
    assert.deepEqual([...reasons.entries()].sort(), [[0, 'abort'], [1, 'abort']], text.slice(-1000));
    // The whole (non-streaming) response that was cut is a 503 in OpenAI's shape.
    const cut = await whole;
    assert.equal(cut.status, 503);
    assert.equal((await cut.json()).error.code, 'server_shutting_down');
    assert.equal((await draining.exitPromise).code, 0, draining.stderr);
  } finally {
    await draining.stop();
  }
});
