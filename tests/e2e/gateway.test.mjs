// `tern gateway` in front of three CPU replicas of the chat fixture model, all on 127.0.0.1:
// (a) cache-aware routing lands prefix-sharing requests where their prefix is cached (replicas' prefix-cache hit
//     rate far above round-robin's on the same workload); (b) killing a replica mid-run loses no request that had
//     not started streaming; (c) streaming through the gateway equals the replica's own output; plus the admin API.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, spawnTern, metrics, post, readSse, waitFor } from './server.mjs';

const NUM_REPLICAS = 3;
// 64 blocks of 16 tokens hold about five of the workload's ~200-token prefixes: enough for the two or three a
// cache-aware gateway sends to each replica, too few for all eight that round-robin sends to every replica.
const REPLICA_ARGS = ['--num-kv-blocks', '64', '--max-num-seqs', '8', '--disable-log-requests'];
const API_KEY = 'gateway-admin-key';

let replicas = [];

async function startGateway(replicaUrls, { policy = 'cache_aware', args = [] } = {}) {
  const argv = ['gateway', '--host', '127.0.0.1', '--port', '0', '--policy', policy, '--health-interval', '0.2',
    '--api-key', API_KEY, ...replicaUrls.flatMap((url) => ['--replica', url]), ...args];
  const gateway = await spawnTern(argv, { what: 'tern gateway', timeoutMs: 30_000 });
  await waitFor(async () => (await listReplicas(gateway)).every((r) => r.healthy), 30_000, 'replicas healthy');
  return gateway;
}

async function listReplicas(gateway) {
  const response = await fetch(`${gateway.url}/admin/replicas`, { headers: { authorization: `Bearer ${API_KEY}` } });
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
    const gatewayMetrics = await metrics(gateway.url);
    return { rate: (after.hits - before.hits) / (after.queries - before.queries), gatewayMetrics };
  } finally {
    await gateway.stop();
  }
}

before(async () => {
  replicas = await Promise.all(Array.from({ length: NUM_REPLICAS }, () => startServer({ args: REPLICA_ARGS })));
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
    const auth = { authorization: `Bearer ${API_KEY}` };
    const added = await post(gateway.url, '/admin/replicas', { url: replicas[1].url }, auth);
    assert.equal(added.status, 201);
    assert.equal((await post(gateway.url, '/admin/replicas', { url: replicas[1].url }, auth)).status, 409);
    assert.equal((await post(gateway.url, '/admin/replicas', { url: 'ftp://x' }, auth)).status, 400);
    await waitFor(async () => (await listReplicas(gateway)).every((r) => r.healthy), 10_000, 'added replica healthy');
    assert.deepEqual((await listReplicas(gateway)).map((r) => r.url), [replicas[0].url, replicas[1].url]);
    // Both serve: round-robin-like spreading is not promised, but every request succeeds.
    const results = await runWorkload(gateway.url, 8, 4, (i) => chatRequest('admin', i, i));
    assert.ok(results.every((r) => r.status === 200));
    const removed = await fetch(`${gateway.url}/admin/replicas`, {
      method: 'DELETE', headers: { 'content-type': 'application/json', ...auth }, body: JSON.stringify({ url: replicas[0].url }),
    });
    assert.equal(removed.status, 200);
    assert.deepEqual((await listReplicas(gateway)).map((r) => r.url), [replicas[1].url]);
    const m = await metrics(gateway.url);
    assert.ok(m['tern:gateway_added_latency_seconds_count'] >= 8);
  } finally {
    await gateway.stop();
  }
});

test('killing a replica mid-run loses no request that had not started streaming', async () => {
  const gateway = await startGateway(replicas.map((r) => r.url));
  const victim = replicas[0];
  try {
    let killed = false;
    const results = await runWorkload(gateway.url, 120, 8, (i) => chatRequest('kill', i % 8, i, { max_tokens: 2 }),
      (done) => {
        if (done === 30 && !killed) {
          killed = true;
          victim.proc.kill('SIGKILL');
        }
      });
    assert.ok(killed);
    for (const [i, r] of results.entries()) assert.equal(r.status, 200, `request ${i}: ${r.body}`);
    await waitFor(async () => {
      const listed = await listReplicas(gateway);
      return listed.find((r) => r.url === victim.url).healthy === false;
    }, 10_000, 'the killed replica marked unhealthy');
    const m = await metrics(gateway.url);
    assert.ok(m[`tern:gateway_replica_failures_total{replica="${victim.url}"}`] >= 1, 'the kill was noticed by requests');
    assert.equal(m['tern:gateway_unserved_requests_total'], 0);
  } finally {
    await gateway.stop();
  }
});
