// Gateway overhead: the latency `tern gateway` adds to a request, and the requests/s it sustains, against the
// same replica reached directly (the baseline, measured in the same run).
//   node bench/gateway_overhead.mjs --tern build/tern [--model DIR] [--requests 300] [--seconds 5]
//                                   [--concurrency 16] [--upstreams null,tern]
// Two upstreams: `tern serve` on the model (max_tokens 1, a 6-word prompt), and a null replica (a Node HTTP
// server answering a fixed completion at once), which isolates the gateway's own cost. Latency: requests one at a
// time, alternating direct and through the gateway; throughput: `concurrency` requests in flight for `seconds`.
import { spawn } from 'node:child_process';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values: opts } = parseArgs({
  options: {
    tern: { type: 'string' },
    model: { type: 'string', default: path.resolve('../shared/fixtures/models/qwen3-chat-tiny') },
    requests: { type: 'string', default: '300' },
    seconds: { type: 'string', default: '5' },
    concurrency: { type: 'string', default: '16' },
    upstreams: { type: 'string', default: 'null,tern' },
  },
});
if (!opts.tern) throw new Error('--tern PATH (the tern binary) is required');
const numRequests = Number(opts.requests);
const seconds = Number(opts.seconds);
const concurrency = Number(opts.concurrency);

function spawnListening(argv) {
  const proc = spawn(opts.tern, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  return new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      stderr += d.toString();
      const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(stderr);
      if (match) resolve({ proc, url: match[1] });
    });
    proc.on('exit', (code) => reject(new Error(`${argv[0]} exited with ${code}: ${stderr}`)));
  });
}

async function waitHealthy(url) {
  for (;;) {
    try {
      if ((await fetch(`${url}/health`)).status === 200) return;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
}

const body = JSON.stringify({ model: 'tiny', prompt: 'The quick brown fox jumps over', max_tokens: 1, temperature: 0 });

async function once(url) {
  const response = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  await response.arrayBuffer();
  if (response.status !== 200) throw new Error(`${url}: status ${response.status}`);
}

async function latencies(directUrl, gatewayUrl) {
  const direct = [];
  const gateway = [];
  for (let i = 0; i < 20; ++i) { await once(directUrl); await once(gatewayUrl); }  // warm up
  for (let i = 0; i < numRequests; ++i) {
    let t = performance.now();
    await once(directUrl);
    direct.push(performance.now() - t);
    t = performance.now();
    await once(gatewayUrl);
    gateway.push(performance.now() - t);
  }
  return { direct, gateway };
}

async function throughput(url) {
  const deadline = performance.now() + seconds * 1e3;
  let count = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < deadline) {
      await once(url);
      ++count;
    }
  }));
  return count / seconds;
}

const quantile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

async function measure(name, directUrl) {
  const gateway = await spawnListening(['gateway', '--host', '127.0.0.1', '--port', '0', '--replica', directUrl,
    '--policy', 'cache_aware']);
  await waitHealthy(gateway.url);
  const { direct, gateway: through } = await latencies(directUrl, gateway.url);
  const directRps = await throughput(directUrl);
  const gatewayRps = await throughput(gateway.url);
  gateway.proc.kill('SIGTERM');
  console.log(`| ${name} | ${quantile(direct, 0.5).toFixed(3)} | ${quantile(through, 0.5).toFixed(3)} | ` +
    `${(quantile(through, 0.5) - quantile(direct, 0.5)).toFixed(3)} | ${(mean(through) - mean(direct)).toFixed(3)} | ` +
    `${quantile(through, 0.99).toFixed(3)} | ${directRps.toFixed(0)} | ${gatewayRps.toFixed(0)} |`);
}

console.log(`machine: ${os.cpus().length} x ${os.cpus()[0].model}, node ${process.version}; ${numRequests} sequential ` +
  `requests each way, throughput at concurrency ${concurrency} for ${seconds} s`);
console.log('| upstream | direct p50 ms | via gateway p50 ms | added p50 ms | added mean ms | via gateway p99 ms | direct req/s | via gateway req/s |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');

const completion = JSON.stringify({ id: 'cmpl-null', object: 'text_completion', created: 0, model: 'tiny',
  choices: [{ index: 0, text: ' the', finish_reason: 'length' }] });
const nullReplica = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(completion) });
    res.end(completion);
  });
});
const upstreams = opts.upstreams.split(',');
if (upstreams.includes('null')) {
  await new Promise((r) => nullReplica.listen(0, '127.0.0.1', r));
  await measure('null replica (Node HTTP)', `http://127.0.0.1:${nullReplica.address().port}`);
  nullReplica.close();
}
if (upstreams.includes('tern')) {
  const replica = await spawnListening(['serve', '--model', opts.model, '--host', '127.0.0.1', '--port', '0',
    '--served-model-name', 'tiny', '--kv-cache-memory', '64MiB', '--threads', '1', '--disable-log-requests']);
  await waitHealthy(replica.url);
  await measure(`tern serve ${path.basename(opts.model)}, max_tokens 1`, replica.url);
  replica.proc.kill('SIGTERM');
}
process.exit(0);
