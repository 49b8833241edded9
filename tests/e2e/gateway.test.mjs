// `tern gateway` in front of three CPU replicas of the chat fixture model, all on 127.0.0.1:
// (a) cache-aware routing lands prefix-sharing requests where their prefix is cached (replicas' prefix-cache hit
//     rate far above round-robin's on the same workload); (b) killing a replica mid-run loses no request that had
//     not started streaming; (c) streaming through the gateway equals the replica's own output; plus the admin API,
// keep-alive connections to the replicas (reused; a replica closing an idle one fails no request) and the drain on
// SIGTERM.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, spawnTern, metrics, post, readSse, waitFor } from './server.mjs';

const NUM_REPLICAS = 3;
// 64 blocks of 16 tokens (a whole 1,024-token context: REPLICA_LEN) hold about five of the workload's ~200-token prefixes: enough for the two or three a
// cache-aware gateway sends to each replica, too few for all eight that round-robin sends to every replica.
const REPLICA_LEN = 1024;
const REPLICA_ARGS = ['--num-kv-blocks', '64', '--max-num-seqs', '8', '--disable-log-requests'];
const API_KEY = 'gateway-admin-key';
const ADMIN_AUTH = { authorization: `Bearer ${API_KEY}` };  // /admin/replicas and /metrics need it

let replicas = [];

async function startGateway(replicaUrls, { policy = 'cache_aware', args = [] } = {}) {
  const argv = ['gateway', '--host', '127.0.0.1', '--port', '0', '--policy', policy, '--health-interval', '0.2',
    '--admin-api-key', API_KEY, ...replicaUrls.flatMap((url) => ['--replica', url]), ...args];
  const gateway = await spawnTern(argv, { what: 'tern gateway', timeoutMs: 30_000 });
  try {
    await waitFor(async () => (await listReplicas(gateway)).every((r) => r.healthy), 30_000, 'replicas healthy');
  } catch (error) {
    gateway.proc.kill('SIGKILL');  // a gateway left running would keep the test process alive
    throw error;
  }
  return gateway;
}

async function listReplicas(gateway) {
  const response = await fetch(`${gateway.url}/admin/replicas`, { headers: ADMIN_AUTH });
  assert.equal(response.status, 200);
  return (await response.json()).replicas;
}

const WORDS = ['river', 'lantern', 'quartz', 'meadow', 'copper', 'violet', 'harbor', 'ember', 'saddle', 'orbit',
  'thistle', 'marble', 'falcon', 'juniper', 'canyon', 'velvet', 'anchor', 'pebble', 'summit', 'willow'];

// A long system prompt per conversation (about 200 tokens), different for every (salt, index).
function systemPrompt(salt, index) {
  let seed = [...`${salt}:${index}`].reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 17);
  const words = [];
  for (let i = 0; i < 150; ++i) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    words.push(WORDS[seed % WORDS.length]);
  }
  return `Conversation ${salt} ${index}. ${words.join(' ')}.`;
}

function chatRequest(salt, prefix, turn, extra = {}) {
  return {
    model: 'tiny',
    messages: [{ role: 'system', content: systemPrompt(salt, prefix) }, { role: 'user', content: `Question ${turn}?` }],
    max_tokens: 1,
    temperature: 0,
    ...extra,
  };
}

// Runs `count` requests through `url` with `concurrency` in flight; returns their statuses and bodies in order.
async function runWorkload(url, count, concurrency, makeBody, onDone = () => {}) {
  const results = new Array(count);
  let next = 0;
  let done = 0;
  async function worker() {
    while (next < count) {
      const i = next++;
      try {
        const response = await post(url, '/v1/chat/completions', makeBody(i));
        results[i] = { status: response.status, body: await response.text() };
      } catch (error) {
        results[i] = { status: 0, body: String(error) };
      }
      onDone(++done);
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  return results;
}

async function prefixCacheTotals() {
  let hits = 0;
  let queries = 0;
  for (const replica of replicas) {
    const m = await metrics(replica.url);
    hits += m['tern:prefix_cache_hits_total'];
    queries += m['tern:prefix_cache_queries_total'];
  }
  return { hits, queries };
}

// The replicas' prefix-cache hit rate over 8 conversations x 50 requests sent through a gateway with `policy`.
async function hitRateThrough(policy) {
  const gateway = await startGateway(replicas.map((r) => r.url), { policy });
  try {
    const before = await prefixCacheTotals();
    const results = await runWorkload(gateway.url, 8 * 50, 8, (i) => chatRequest(policy, i % 8, i));
    for (const [i, r] of results.entries()) assert.equal(r.status, 200, `request ${i}: ${r.body}`);
    const after = await prefixCacheTotals();
    const gatewayMetrics = await metrics(gateway.url, ADMIN_AUTH);
    return { rate: (after.hits - before.hits) / (after.queries - before.queries), gatewayMetrics };
  } finally {
    await gateway.stop();
  }
}

before(async () => {
  replicas = await Promise.all(Array.from({ length: NUM_REPLICAS }, () => startServer({ args: REPLICA_ARGS, maxModelLen: REPLICA_LEN })));
});

after(async () => {
  await Promise.all(replicas.map((r) => r.stop()));
});

test('streaming through the gateway equals the replica\'s own stream', async () => {
  const gateway = await startGateway([replicas[0].url]);
  try {
    const body = chatRequest('stream', 0, 0, { max_tokens: 12, stream: true });
    const direct = await readSse(await post(replicas[0].url, '/v1/chat/completions', body));
    const response = await post(gateway.url, '/v1/chat/completions', body);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type'), /text\/event-stream/);
    const proxied = await readSse(response);
    const contents = (events) => events.filter((e) => e !== '[DONE]').map((e) => {
      const choice = JSON.parse(e).choices[0];
      return [choice?.delta?.content ?? null, choice?.finish_reason ?? null];
    });
    assert.equal(proxied.at(-1), '[DONE]');
    assert.deepEqual(contents(proxied), contents(direct));

    const plain = { ...body, stream: false };
    const directText = (await (await post(replicas[0].url, '/v1/chat/completions', plain)).json()).choices[0].message;
    const proxiedText = (await (await post(gateway.url, '/v1/chat/completions', plain)).json()).choices[0].message;
    assert.deepEqual(proxiedText, directText);

    const models = await (await fetch(`${gateway.url}/v1/models`)).json();
    assert.deepEqual(models.data.map((m) => m.id), ['tiny']);
  } finally {
    await gateway.stop();
  }
});

test('cache-aware routing: prefix-cache hit rate far above round-robin on 8 prefixes x 50 requests', async () => {
  const cacheAware = await hitRateThrough('cache_aware');
  const roundRobin = await hitRateThrough('round_robin');
  console.log(`prefix-cache hit rate: cache_aware ${cacheAware.rate.toFixed(3)}, round_robin ${roundRobin.rate.toFixed(3)}`);
  assert.ok(cacheAware.rate > 0.75, `cache_aware hit rate ${cacheAware.rate}`);
  assert.ok(cacheAware.rate > 2 * roundRobin.rate, `cache_aware ${cacheAware.rate} vs round_robin ${roundRobin.rate}`);
  const hits = cacheAware.gatewayMetrics['tern:gateway_routing_decisions_total{policy="cache_aware",reason="cache_hit"}'];
  assert.ok(hits >= 8 * 49 - 8, `cache_hit decisions: ${hits}`);
});

test('admin API adds, lists and removes replicas behind the API key', async () => {
  const gateway = await startGateway([replicas[0].url]);
  try {
    const unauthorized = await post(gateway.url, '/admin/replicas', { url: replicas[1].url });
    assert.equal(unauthorized.status, 401);
    const added = await post(gateway.url, '/admin/replicas', { url: replicas[1].url }, ADMIN_AUTH);
    assert.equal(added.status, 201);
    assert.equal((await post(gateway.url, '/admin/replicas', { url: replicas[1].url }, ADMIN_AUTH)).status, 409);
    assert.equal((await post(gateway.url, '/admin/replicas', { url: 'ftp://x' }, ADMIN_AUTH)).status, 400);
    await waitFor(async () => (await listReplicas(gateway)).every((r) => r.healthy), 10_000, 'added replica healthy');
    assert.deepEqual((await listReplicas(gateway)).map((r) => r.url), [replicas[0].url, replicas[1].url]);
    // Both serve: round-robin-like spreading is not promised, but every request succeeds.
    const results = await runWorkload(gateway.url, 8, 4, (i) => chatRequest('admin', i, i));
    assert.ok(results.every((r) => r.status === 200));
    const removed = await fetch(`${gateway.url}/admin/replicas`, {
      method: 'DELETE', headers: { 'content-type': 'application/json', ...ADMIN_AUTH },
      body: JSON.stringify({ url: replicas[0].url }),
    });
    assert.equal(removed.status, 200);
    assert.deepEqual((await listReplicas(gateway)).map((r) => r.url), [replicas[1].url]);
    const m = await metrics(gateway.url, ADMIN_AUTH);
    assert.ok(m['tern:gateway_added_latency_seconds_count'] >= 8);
  } finally {
    await gateway.stop();
  }
});

const OPENED = 'tern:gateway_upstream_connections_opened_total';
const REUSED = 'tern:gateway_upstream_connections_reused_total';
const STALE_RETRIES = 'tern:gateway_upstream_stale_connection_retries_total';

test('consecutive requests to a replica reuse one keep-alive connection', async () => {
  const gateway = await startGateway([replicas[0].url], { policy: 'round_robin' });
  try {
    const count = 20;
    for (let i = 0; i < count; ++i) {
      // Streams and plain responses alike go back to the pool once read to their end.
      const body = chatRequest('reuse', 0, i, { max_tokens: 3, stream: i % 2 === 1 });
      const response = await post(gateway.url, '/v1/chat/completions', body);
      assert.equal(response.status, 200);
      const text = await response.text();
      if (body.stream) assert.ok(text.endsWith('data: [DONE]\n\n'), text);
    }
    const m = await metrics(gateway.url, ADMIN_AUTH);
    console.log(`${count} sequential requests: ${m[OPENED]} upstream connections opened, ${m[REUSED]} reused`);
    // A client can see its response end a moment before the gateway has pooled the connection behind it, and its
    // next request then opens another: allow a few of those on a loaded machine.
    assert.equal(m[OPENED] + m[REUSED], count);
    assert.ok(m[REUSED] >= count - 4, `${m[REUSED]} of ${count} reused`);
    await waitFor(async () => (await metrics(gateway.url, ADMIN_AUTH))['tern:gateway_upstream_idle_connections'] >= 1,
      5_000, 'the last connection back in the pool');
  } finally {
    assert.equal((await gateway.stop()).code, 0, gateway.stderr);
  }
});

test('a client leaving mid-stream cancels the generation; its replica connection is not pooled', async () => {
  const gateway = await startGateway([replicas[0].url], { policy: 'round_robin' });
  try {
    const cancelledBefore = (await metrics(replicas[0].url))['tern:request_cancelled_total'];
    const response = await post(gateway.url, '/v1/chat/completions', {
      model: 'tiny', messages: [{ role: 'user', content: 'Count forever.' }], max_tokens: 900, ignore_eos: true,
      stream: true,
    });
    const reader = response.body.getReader();
    await reader.read();
    await reader.read();
    await reader.cancel();
    await waitFor(async () => (await metrics(replicas[0].url))['tern:request_cancelled_total'] === cancelledBefore + 1,
      5_000, 'the replica to cancel the abandoned stream');
    const m = await metrics(gateway.url, ADMIN_AUTH);
    assert.equal(m['tern:gateway_upstream_idle_connections'], 0);
    assert.equal(m[OPENED], 1);
  } finally {
    await gateway.stop();
  }
});

async function assertNoFailures(gateway, replicaUrl) {
  const m = await metrics(gateway.url, ADMIN_AUTH);
  assert.equal(m[`tern:gateway_replica_failures_total{replica="${replicaUrl}"}`] ?? 0, 0);
  assert.equal(m['tern:gateway_retries_total'], 0);
  assert.equal(m['tern:gateway_unserved_requests_total'], 0);
  return m;
}

test('a replica closing an idle keep-alive connection fails no request and is not marked unhealthy', async () => {
  // The replica closes connections idle for 1 s (its --header-timeout); the gateway keeps them for 20 s.
  const replica = await startServer({ args: [...REPLICA_ARGS, '--header-timeout', '1'], maxModelLen: REPLICA_LEN });
  const gateway = await startGateway([replica.url], { policy: 'round_robin' });
  try {
    for (let i = 0; i < 3; ++i) {
      if (i > 0) await new Promise((r) => setTimeout(r, 2_500));  // the replica closes the idle connection meanwhile
      const response = await post(gateway.url, '/v1/chat/completions', chatRequest('idle', 0, i, { max_tokens: 2 }));
      assert.equal(response.status, 200, await response.text());
    }
    const m = await assertNoFailures(gateway, replica.url);
    assert.equal(m[STALE_RETRIES], 3 - 1, 'each request after the first met a closed idle connection');
    assert.equal(m[`tern:gateway_replica_healthy{replica="${replica.url}"}`], 1);
  } finally {
    await gateway.stop();
    await replica.stop();
  }
});

test('a replica restarted on its port: the next request goes through on a fresh connection', async () => {
  let replica = await startServer({ args: REPLICA_ARGS, maxModelLen: REPLICA_LEN });
  const port = replica.port;
  const gateway = await startGateway([replica.url], { policy: 'round_robin' });
  try {
    const first = await post(gateway.url, '/v1/chat/completions', chatRequest('restart', 0, 0));
    assert.equal(first.status, 200, await first.text());
    await waitFor(async () => (await metrics(gateway.url, ADMIN_AUTH))['tern:gateway_upstream_idle_connections'] === 1,
      5_000, 'the connection in the pool');
    assert.equal((await replica.stop()).code, 0, replica.stderr);
    replica = await startServer({ args: REPLICA_ARGS, port, maxModelLen: REPLICA_LEN });
    await waitFor(async () => (await listReplicas(gateway))[0].healthy, 10_000, 'the restarted replica healthy');
    const second = await post(gateway.url, '/v1/chat/completions', chatRequest('restart', 0, 1));
    assert.equal(second.status, 200, await second.text());
    const m = await assertNoFailures(gateway, replica.url);
    assert.equal(m[STALE_RETRIES], 1);
    assert.equal(m[OPENED], 2);
  } finally {
    await gateway.stop();
    await replica.stop();
  }
});

test('removing a replica closes its idle connections', async () => {
  const gateway = await startGateway([replicas[0].url, replicas[1].url], { policy: 'round_robin' });
  try {
    // Until both replicas have served a request (round-robin alternates while both pass their health checks).
    const served = (m, replica) => m[`tern:gateway_requests_total{replica="${replica.url}"}`] ?? 0;
    let m = {};
    for (let i = 0; i < 10 && !(served(m, replicas[0]) && served(m, replicas[1])); ++i) {
      assert.equal((await post(gateway.url, '/v1/chat/completions', chatRequest('remove', i, i))).status, 200);
      m = await metrics(gateway.url, ADMIN_AUTH);
    }
    await waitFor(async () => (await metrics(gateway.url, ADMIN_AUTH))['tern:gateway_upstream_idle_connections'] === 2,
      5_000, 'both replicas\' connections in the pool');
    const removed = await fetch(`${gateway.url}/admin/replicas`, {
      method: 'DELETE', headers: { 'content-type': 'application/json', ...ADMIN_AUTH },
      body: JSON.stringify({ url: replicas[0].url }),
    });
    assert.equal(removed.status, 200);
    assert.equal((await metrics(gateway.url, ADMIN_AUTH))['tern:gateway_upstream_idle_connections'], 1);
  } finally {
    await gateway.stop();
  }
});

// A chunked body's content and what follows its last chunk.
function dechunk(text) {
  let body = '';
  let at = 0;
  for (;;) {
    const lineEnd = text.indexOf('\r\n', at);
    if (lineEnd < 0) throw new Error(`a chunked body cut off: ${JSON.stringify(text.slice(at, at + 200))}`);
    const size = parseInt(text.slice(at, lineEnd), 16);
    at = lineEnd + 2;
    if (size === 0) return { body, rest: text.slice(at + 2) };
    body += text.slice(at, at + size);
    at += size + 2;
  }
}

// Whether a new connection to `port` is refused.
function connectionRefused(port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('connect', () => { socket.destroy(); resolve(false); });
    socket.on('error', () => resolve(true));
  });
}

test('SIGTERM drains: the stream in flight completes, a request behind it gets 503, new connections are refused, '
  + 'exit 0', async () => {
  const gateway = await startGateway([replicas[0].url], { policy: 'round_robin' });
  // A client connection with no request on it: closed by the drain, not waited for.
  const idleClient = net.connect(gateway.port, '127.0.0.1');
  await new Promise((r) => idleClient.on('connect', r));
  const idleClosed = new Promise((r) => idleClient.on('close', r));
  const stream = JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'Tell a story.' }],
    max_tokens: 300, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  // Two pipelined requests on one connection: the gateway reads the second only once the stream has ended.
  const client = net.connect(gateway.port, '127.0.0.1');
  let text = '';
  client.on('data', (data) => { text += data.toString('latin1'); });
  const clientClosed = new Promise((r) => client.on('close', r));
  await new Promise((r) => client.on('connect', r));
  client.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
    `Content-Length: ${Buffer.byteLength(stream)}\r\n\r\n${stream}` +
    'GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
  // The stream's head (which promised keep-alive) has reached the client.
  await waitFor(() => text.includes('\r\n\r\n'), 10_000, 'the stream to start');
  const signalledAt = Date.now();
  gateway.proc.kill('SIGTERM');
  await waitFor(() => gateway.stderr.includes('draining'), 5_000, 'the gateway to start draining');
  assert.equal(await connectionRefused(gateway.port), true, 'new connections should be refused while draining');
  await idleClosed;
  await clientClosed;
  assert.match(text, /^HTTP\/1\.1 200 OK\r\n/);
  const { body, rest: second } = dechunk(text.slice(text.indexOf('\r\n\r\n') + 4));
  const events = body.split('\n\n').filter(Boolean).map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]', 'the running stream should complete');
  assert.equal(JSON.parse(events.at(-2)).usage.completion_tokens, 300);
  assert.match(second, /^HTTP\/1\.1 503 /);
  assert.match(second, /connection: close/i);
  assert.match(second, /shutting down/);
  const exit = await gateway.exitPromise;
  assert.equal(exit.code, 0, gateway.stderr);
  assert.ok(Date.now() - signalledAt < 30_000);
  assert.match(gateway.stderr, /stopped/);
});

// A streamed chat completion far longer than any test waits for, once its first piece has arrived; readToEnd()
// returns everything received until the connection ended or was cut.
async function startLongStream(gateway) {
  const response = await post(gateway.url, '/v1/chat/completions', {
    model: 'tiny', messages: [{ role: 'user', content: 'Count forever.' }], max_tokens: 900, ignore_eos: true,
    stream: true,
  });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = decoder.decode((await reader.read()).value);
  return {
    async readToEnd() {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          text += decoder.decode(value);
        }
      } catch { /* the connection was cut */ }
      return text;
    },
  };
}

test('a stream longer than --drain-timeout is cut when it passes, and the gateway exits 0', async () => {
  const drainTimeoutS = 0.5;
  const gateway = await startGateway([replicas[0].url],
    { policy: 'round_robin', args: ['--drain-timeout', String(drainTimeoutS)] });
  const cancelledBefore = (await metrics(replicas[0].url))['tern:request_cancelled_total'];
  const stream = await startLongStream(gateway);
  const signalledAt = Date.now();
  gateway.proc.kill('SIGTERM');
  const text = await stream.readToEnd();
  const exit = await gateway.exitPromise;
  const elapsedMs = Date.now() - signalledAt;
  assert.equal(exit.code, 0, gateway.stderr);
  assert.ok(!text.includes('[DONE]'), 'the stream should have been cut');
  assert.ok(elapsedMs >= drainTimeoutS * 1000 - 50 && elapsedMs < drainTimeoutS * 1000 + 3_000,
    `exit after ${elapsedMs} ms`);
  assert.match(gateway.stderr, /1 requests still in flight/);
  // The replica saw its connection close and cancelled the generation.
  await waitFor(async () => (await metrics(replicas[0].url))['tern:request_cancelled_total'] === cancelledBefore + 1,
    5_000, 'the replica to cancel the cut stream');
});

test('a second signal stops a draining gateway at once', async () => {
  const gateway = await startGateway([replicas[0].url], { policy: 'round_robin' });  // --drain-timeout 30
  const stream = await startLongStream(gateway);
  gateway.proc.kill('SIGTERM');
  await waitFor(() => gateway.stderr.includes('draining'), 5_000, 'the gateway to start draining');
  const secondAt = Date.now();
  gateway.proc.kill('SIGINT');
  const text = await stream.readToEnd();
  const exit = await gateway.exitPromise;
  assert.equal(exit.code, 0, gateway.stderr);
  assert.ok(Date.now() - secondAt < 3_000, `exit ${Date.now() - secondAt} ms after the second signal`);
  assert.ok(!text.includes('[DONE]'), 'the stream should have been cut');
  assert.match(gateway.stderr, /received SIGINT again, stopping now/);
});

// Last: it kills replicas[0].
test('killing a replica mid-run loses no request that had not started streaming', async () => {
  const gateway = await startGateway(replicas.map((r) => r.url));
  const victim = replicas[0];
  try {
    let killed = false;
    let atKill;  // the gateway's metrics just after the kill
    const results = await runWorkload(gateway.url, 120, 8, (i) => chatRequest('kill', i % 8, i, { max_tokens: 2 }),
      (done) => {
        if (done === 30 && !killed) {
          killed = true;
          victim.proc.kill('SIGKILL');
          atKill = metrics(gateway.url, ADMIN_AUTH);
        }
      });
    assert.ok(killed);
    for (const [i, r] of results.entries()) assert.equal(r.status, 200, `request ${i}: ${r.body}`);
    await waitFor(async () => {
      const listed = await listReplicas(gateway);
      return listed.find((r) => r.url === victim.url).healthy === false;
    }, 10_000, 'the killed replica marked unhealthy');
    const m = await metrics(gateway.url, ADMIN_AUTH);
    // Requests sent to the dead replica fail over; on a loaded machine the health check may mark it down before any
    // request goes there, and then none has to.
    const sentToVictim = `tern:gateway_requests_total{replica="${victim.url}"}`;
    if (m[sentToVictim] > ((await atKill)[sentToVictim] ?? 0)) {
      assert.ok(m[`tern:gateway_replica_failures_total{replica="${victim.url}"}`] >= 1, 'the kill was noticed by requests');
    }
    assert.equal(m['tern:gateway_unserved_requests_total'], 0);
  } finally {
    await gateway.stop();
  }
});
