// Readiness while loading, cancellation when the client goes away (KV freed), and graceful shutdown on SIGTERM.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, waitForHealth, metrics, waitFor, post, rawExchange } from './server.mjs';

test('the port is bound before loading: /health is 503 until the model is loaded, then 200', async () => {
  const server = await startServer({ waitReady: false });
  try {
    // A raw socket probes at once (fetch's first call spends tens of ms on its own set-up, a race with loading).
    const first = await rawExchange(server.port, ['GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
    assert.match(first.text, /^HTTP\/1\.1 503 /, 'the first probe should find the model still loading');
    assert.equal(JSON.parse(first.text.slice(first.text.indexOf('\r\n\r\n') + 4)).error.code, 'model_loading');
    const models = await fetch(`${server.url}/v1/models`);
    assert.ok(models.status === 503 || models.status === 200);
    await waitForHealth(server.url);
    assert.equal((await fetch(`${server.url}/v1/models`)).status, 200);
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});

async function idle(url) {
  const m = await metrics(url);
  return m['tern:num_requests_running'] === 0 && m['tern:num_requests_waiting'] === 0 && m['tern:kv_cache_usage_perc'] === 0;
}

test('a client that disconnects cancels its request at once and its KV is freed', async () => {
  const server = await startServer();
  try {
    // Streaming: read two chunks of a very long generation, then drop the connection.
    const response = await post(server.url, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Count forever.' }], max_tokens: 1900, ignore_eos: true, stream: true,
    });
    const reader = response.body.getReader();
    await reader.read();
    await reader.read();
    const running = await metrics(server.url);
    assert.equal(running['tern:num_requests_running'], 1);
    assert.ok(running['tern:kv_cache_usage_perc'] > 0);
    const cancelledAt = Date.now();
    await reader.cancel();
    await waitFor(() => idle(server.url), 5_000, 'the engine to drop the cancelled stream');
    const afterStream = await metrics(server.url);
    assert.equal(afterStream['tern:request_cancelled_total'], 1);
    assert.ok(Date.now() - cancelledAt < 5_000);

    // Non-streaming: the client gives up while the server is still generating (a raw socket makes the
    // disconnect explicit: nothing is written to it before the generation ends).
    const body = '{"prompt": "x", "max_tokens": 1900, "ignore_eos": true}';
    const socket = net.connect(server.port, '127.0.0.1');
    await new Promise((r) => socket.on('connect', r));
    socket.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    await waitFor(async () => (await metrics(server.url))['tern:num_requests_running'] === 1, 5_000, 'the request to run');
    socket.destroy();
    await waitFor(() => idle(server.url), 5_000, 'the engine to drop the cancelled request');
    assert.equal((await metrics(server.url))['tern:request_cancelled_total'], 2);
    // The server keeps serving.
    assert.equal((await post(server.url, '/v1/completions', { prompt: 'x', max_tokens: 2 })).status, 200);
  } finally {
    assert.equal((await server.stop()).code, 0, server.stderr);
  }
});

test('SIGTERM drains: the running stream completes, new connections are refused, exit code 0', async () => {
  const server = await startServer();
  const response = await post(server.url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'Tell a story.' }], max_tokens: 300, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = decoder.decode((await reader.read()).value);
  server.proc.kill('SIGTERM');
  await waitFor(() => server.stderr.includes('draining'), 5_000, 'the server to start draining');
  // The listening socket is closed while the stream still runs.
  const refused = await new Promise((resolve) => {
    const socket = net.connect(server.port, '127.0.0.1');
    socket.on('connect', () => { socket.destroy(); resolve(false); });
    socket.on('error', () => resolve(true));
  });
  assert.equal(refused, true, 'new connections should be refused while draining');
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value);
  }
  const events = text.split('\n\n').filter(Boolean).map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]');
  const usage = JSON.parse(events.at(-2)).usage;
  assert.equal(usage.completion_tokens, 300);
  const exit = await server.exitPromise;
  assert.equal(exit.code, 0, server.stderr);
  assert.match(server.stderr, /stopped/);
});

test('SIGINT on an idle server exits 0 at once', async () => {
  const server = await startServer();
  // An idle keep-alive connection must not hold the shutdown up.
  const socket = net.connect(server.port, '127.0.0.1');
  await new Promise((r) => socket.on('connect', r));
  const started = Date.now();
  const exit = await server.stop('SIGINT');
  assert.equal(exit.code, 0, server.stderr);
  assert.ok(Date.now() - started < 5_000);
  socket.destroy();
});

test('one log line per request: its id, tokens and latency', async () => {
  const server = await startServer();
  try {
    const response = await post(server.url, '/v1/completions', { prompt: 'hello', max_tokens: 3, ignore_eos: true },
      { 'x-request-id': 'log-line-1' });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('x-request-id'), 'log-line-1');
    const usage = (await response.json()).usage;
    const line = new RegExp(`^tern: request log-line-1 POST /v1/completions 200 prompt_tokens=${usage.prompt_tokens} ` +
      'cached_tokens=\\d+ completion_tokens=3 latency_ms=[\\d.]+ engine_ms=[\\d.]+ overhead_ms=[\\d.]+$', 'm');
    await waitFor(() => line.test(server.stderr), 5_000, `a log line for log-line-1 in:\n${server.stderr}`);
    assert.equal(server.stderr.split('\n').filter((l) => l.includes('log-line-1')).length, 1, server.stderr);
    await fetch(`${server.url}/v1/models`, { headers: { 'x-request-id': 'log-line-2' } });
    await waitFor(() => /^tern: request log-line-2 GET \/v1\/models 200 latency_ms=[\d.]+$/m.test(server.stderr), 5_000,
      'a log line for log-line-2');
  } finally {
    assert.equal((await server.stop()).code, 0, server.stderr);
  }
});

test('while draining, a request that arrives behind a running stream is refused with 503', async () => {
  const server = await startServer();
  const stream = JSON.stringify({ messages: [{ role: 'user', content: 'Go on.' }], max_tokens: 200, ignore_eos: true,
    stream: true });
  // Two pipelined requests on one connection: the second is read only once the stream has ended.
  const exchange = rawExchange(server.port, [
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(stream)}\r\n\r\n${stream}` +
    'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n',
  ], { timeoutMs: 60_000 });
  await waitFor(async () => (await metrics(server.url))['tern:num_requests_running'] === 1, 5_000, 'the stream to run');
  server.proc.kill('SIGTERM');
  const { text, how } = await exchange;
  assert.equal(how, 'closed');
  assert.match(text, /^HTTP\/1\.1 200 OK\r\n/);
  assert.ok(text.includes('data: [DONE]\n\n'), 'the running stream should complete');
  const second = text.slice(text.indexOf('\r\n0\r\n\r\n') + 7);
  assert.match(second, /^HTTP\/1\.1 503 /);
  assert.match(second, /connection: close/i);
  assert.match(second, /shutting down/);
  assert.equal((await server.exitPromise).code, 0, server.stderr);
});
