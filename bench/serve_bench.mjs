// Server benchmark: the latency `tern serve` adds to each request (end to end minus the engine's time, from the
// server's tern:server_overhead_seconds histogram) and the request rate it sustains. A closed loop of
// --concurrency clients sends chat requests for --duration seconds; the client runs on the same machine, so on a
// small box it competes with the server for the cores (as a co-located proxy would).
//   TERN_BINARY=build/tern TERN_FIXTURES=../shared/fixtures \
//     node bench/serve_bench.mjs [--concurrency 16] [--duration 15] [--max-tokens 1] [--stream]
// The server runs with one backend thread (tests/e2e/server.mjs's settings). Prints one JSON report. The model is the tiny fixture chat model, so the engine's share is small and the
// server's own costs (HTTP, JSON, chat template, tokenization, SSE) dominate.
import os from 'node:os';
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { startServer, metrics, post } from '../tests/e2e/server.mjs';

const { values: options } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '16' },
    duration: { type: 'string', default: '15' },
    'max-tokens': { type: 'string', default: '1' },
    stream: { type: 'boolean', default: false },
    model: { type: 'string', default: 'qwen3-chat-tiny' },
  },
});
const concurrency = Number(options.concurrency);
const durationMs = Number(options.duration) * 1e3;
const maxTokens = Number(options['max-tokens']);

const body = (i) => ({
  model: 'tiny', messages: [{ role: 'user', content: `Benchmark request ${i}: say something short.` }],
  max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: options.stream,
});

async function oneRequest(url, i) {
  const response = await post(url, '/v1/chat/completions', body(i));
  const text = await response.text();  // for a stream: every event up to [DONE]
  if (response.status !== 200) throw new Error(`status ${response.status}: ${text}`);
  if (options.stream && !text.endsWith('data: [DONE]\n\n')) throw new Error('stream ended without [DONE]');
}

// The upper bound of the bucket holding quantile q, from cumulative Prometheus buckets (before/after deltas).
function histogramQuantile(before, after, name, q) {
  const prefix = `${name}_bucket{le="`;
  const buckets = Object.keys(after).filter((k) => k.startsWith(prefix))
    .map((k) => ({ le: k.slice(prefix.length, -2), count: after[k] - (before[k] ?? 0) }))
    .sort((a, b) => (a.le === '+Inf' ? Infinity : Number(a.le)) - (b.le === '+Inf' ? Infinity : Number(b.le)));
  const total = buckets.at(-1).count;
  const bucket = buckets.find((b) => b.count >= q * total);
  return bucket.le === '+Inf' ? Infinity : Number(bucket.le);
}

const rssMib = (pid) => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;

const server = await startServer({
  model: options.model, args: ['--disable-log-requests', '--max-num-seqs', '256'],
});
try {
  for (let i = 0; i < 20; ++i) await oneRequest(server.url, i);  // warm-up: caches, allocator, connections
  const before = await metrics(server.url);
  const latencies = [];
  let errors = 0;
  let next = 0;
  const started = performance.now();
  const deadline = started + durationMs;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < deadline) {
      const sent = performance.now();
      try {
        await oneRequest(server.url, next++);
        latencies.push(performance.now() - sent);
      } catch (e) {
        if (++errors <= 3) console.error(String(e));
      }
    }
  }));
  const wallS = (performance.now() - started) / 1e3;
  const after = await metrics(server.url);
  const delta = (name) => after[name] - (before[name] ?? 0);
  const mean = (name) => delta(`${name}_sum`) / delta(`${name}_count`);
  latencies.sort((a, b) => a - b);
  const quantile = (q) => Number(latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))].toFixed(2));
  const overhead = 'tern:server_overhead_seconds';
  console.log(JSON.stringify({
    machine: `${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}`,
    concurrency, duration_s: Number(wallS.toFixed(1)), max_tokens: maxTokens, stream: options.stream,
    requests: latencies.length, errors,
    requests_per_s: Number((latencies.length / wallS).toFixed(1)),
    client_latency_ms: { p50: quantile(0.5), p99: quantile(0.99) },
    server_e2e_mean_ms: Number((mean('tern:e2e_request_latency_seconds') * 1e3).toFixed(3)),
    server_overhead_ms: {
      mean: Number((mean(overhead) * 1e3).toFixed(3)),
      p50_at_most: histogramQuantile(before, after, overhead, 0.5) * 1e3,
      p99_at_most: histogramQuantile(before, after, overhead, 0.99) * 1e3,
    },
    server_rss_mib: Math.round(rssMib(server.proc.pid)),
  }, null, 2));
  if (errors > 0) process.exitCode = 1;
} finally {
  await server.stop();
}
