// Load test: N concurrent streaming chat requests (default 500) against `tern serve` on loopback with the tiny
// fixture model. Checks that every stream completes with the same greedy text as a request served alone, with no
// errors, and that the server's memory stays bounded; reports throughput and the latency the server adds
// (end-to-end minus engine time, from tern:server_overhead_seconds).
//   node load.mjs [--requests 500] [--max-tokens 16] [--prompts 10]
// Exits non-zero on any failure. TERN_BINARY and TERN_FIXTURES as for the tests.
import fs from 'node:fs';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { startServer, metrics, post } from './server.mjs';

const { values: options } = parseArgs({
  options: {
    requests: { type: 'string', default: '500' },
    'max-tokens': { type: 'string', default: '16' },
    prompts: { type: 'string', default: '10' },
    'max-rss-growth-mib': { type: 'string', default: '512' },
  },
});
const numRequests = Number(options.requests);
const maxTokens = Number(options['max-tokens']);
const numPrompts = Number(options.prompts);

const rssMib = (pid) => {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) / 1024;
};

const messagesFor = (i) => [{ role: 'user', content: `Request topic ${i}: write something about number ${i * 7}.` }];
const requestBody = (i, stream) => ({ model: 'tiny', messages: messagesFor(i), max_tokens: maxTokens, temperature: 0,
  ignore_eos: true, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });

async function streamChat(url, promptIndex) {
  const started = performance.now();
  const response = await post(url, '/v1/chat/completions', requestBody(promptIndex, true));
  if (response.status !== 200) throw new Error(`status ${response.status}: ${await response.text()}`);
  const decoder = new TextDecoder();
  let buffer = '';
  let content = '';
  let reasoning = '';
  let usage = null;
  let done = false;
  let firstTokenMs = null;
  for await (const bytes of response.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith('data: ')) throw new Error(`bad SSE event ${event}`);
      const data = event.slice(6);
      if (data === '[DONE]') { done = true; continue; }
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(`stream error ${JSON.stringify(chunk.error)}`);
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        const delta = (choice.delta.content ?? '') + (choice.delta.reasoning_content ?? '');
        if (delta && firstTokenMs === null) firstTokenMs = performance.now() - started;
        content += choice.delta.content ?? '';
        reasoning += choice.delta.reasoning_content ?? '';
      }
    }
  }
  if (!done) throw new Error('stream ended without [DONE]');
  return { text: JSON.stringify([content, reasoning]), usage, latencyMs: performance.now() - started, firstTokenMs };
}

const quantile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

async function main() {
  const server = await startServer({ args: ['--disable-log-requests', '--max-num-seqs', '256'] });
  let failures = 0;
  try {
    // References: each prompt alone, not streamed.
    const references = [];
    for (let i = 0; i < numPrompts; ++i) {
      const response = await post(server.url, '/v1/chat/completions', requestBody(i, false));
      const json = await response.json();
      if (response.status !== 200) throw new Error(`reference ${i}: ${JSON.stringify(json)}`);
      const message = json.choices[0].message;
      references.push(JSON.stringify([message.content ?? '', message.reasoning_content ?? '']));
    }
    const rssBefore = rssMib(server.proc.pid);
    const before = await metrics(server.url);
    let peakRss = rssBefore;
    const sampler = setInterval(() => { peakRss = Math.max(peakRss, rssMib(server.proc.pid)); }, 50);

    const started = performance.now();
    const results = await Promise.allSettled(
      Array.from({ length: numRequests }, (_, i) => streamChat(server.url, i % numPrompts)));
    const wallS = (performance.now() - started) / 1e3;
    clearInterval(sampler);
    const after = await metrics(server.url);

    const latencies = [];
    const ttfts = [];
    results.forEach((result, i) => {
      if (result.status === 'rejected') {
        ++failures;
        if (failures <= 5) console.error(`request ${i} failed: ${result.reason}`);
        return;
      }
      const { text, usage, latencyMs, firstTokenMs } = result.value;
      // [content, reasoning_content] streamed must equal the message of the same prompt served alone.
      if (text !== references[i % numPrompts] || usage?.completion_tokens !== maxTokens) {
        ++failures;
        if (failures <= 5) console.error(`request ${i}: got ${text} (${usage?.completion_tokens} tokens), want ${references[i % numPrompts]}`);
        return;
      }
      latencies.push(latencyMs);
      ttfts.push(firstTokenMs);
    });
    latencies.sort((a, b) => a - b);
    ttfts.sort((a, b) => a - b);
    const delta = (name) => after[name] - before[name];
    const overheadMs = (delta('tern:server_overhead_seconds_sum') / delta('tern:server_overhead_seconds_count')) * 1e3;
    const e2eMs = (delta('tern:e2e_request_latency_seconds_sum') / delta('tern:e2e_request_latency_seconds_count')) * 1e3;
    const rssGrowth = peakRss - rssBefore;
    const report = {
      machine: `${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}`,
      requests: numRequests, concurrent: numRequests, max_tokens: maxTokens, distinct_prompts: numPrompts,
      failures,
      wall_s: Number(wallS.toFixed(2)),
      requests_per_s: Number((numRequests / wallS).toFixed(1)),
      generated_tokens_per_s: Number((delta('tern:generation_tokens_total') / wallS).toFixed(1)),
      client_latency_ms: { p50: quantile(latencies, 0.5), p90: quantile(latencies, 0.9), max: latencies.at(-1) },
      client_ttft_ms: { p50: quantile(ttfts, 0.5), p90: quantile(ttfts, 0.9) },
      server_e2e_mean_ms: Number(e2eMs.toFixed(1)),
      server_overhead_mean_ms: Number(overheadMs.toFixed(3)),
      rss_mib: { before: Math.round(rssBefore), peak: Math.round(peakRss), growth: Math.round(rssGrowth) },
      http_200: delta('tern:http_responses_total{status="200"}'),
    };
    for (const key of ['p50', 'p90', 'max']) report.client_latency_ms[key] = Math.round(report.client_latency_ms[key] ?? -1);
    for (const key of ['p50', 'p90']) report.client_ttft_ms[key] = Math.round(report.client_ttft_ms[key] ?? -1);
    console.log(JSON.stringify(report, null, 2));
    if (rssGrowth > Number(options['max-rss-growth-mib'])) {
      console.error(`memory grew by ${rssGrowth.toFixed(0)} MiB under load`);
      ++failures;
    }
    const idle = await metrics(server.url);
    if (idle['tern:num_requests_running'] !== 0 || idle['tern:kv_cache_usage_perc'] !== 0) {
      console.error('requests or KV blocks left behind after the load');
      ++failures;
    }
  } finally {
    const exit = await server.stop();
    if (exit.code !== 0) {
      console.error(`server exited with ${exit.code}:\n${server.stderr.slice(-2000)}`);
      ++failures;
    }
  }
  if (failures > 0) {
    console.error(`${failures} failures`);
    process.exit(1);
  }
}

await main();
