// Every endpoint, streamed and not, through the official openai client and raw HTTP. Token-level results are
// checked against the Hugging Face goldens in the fixtures (transformers' greedy tokens, tokenizers' encodings,
// apply_chat_template's renderings).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, fixtures, modelDir, metrics, readSse, post } from './server.mjs';

const readJson = (p) => JSON.parse(fs.readFileSync(p, 'utf8'));
const golden = readJson(path.join(modelDir('qwen3-chat-tiny'), 'golden.json'));
const encodeGolden = readJson(path.join(fixtures, 'tokenizers', 'qwen3', 'encode_golden.json'));
const chatGolden = readJson(path.join(fixtures, 'tokenizers', 'qwen3', 'chat_golden.json'));

let server;
let client;

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  const exit = await server.stop();
  assert.equal(exit.code, 0, server.stderr);
});

// Token ids from logprobs spelled "token_id:<id>" (vLLM's return_tokens_as_token_ids).
const idsOf = (logprobTokens) => logprobTokens.map((t) => Number(t.replace('token_id:', '')));

test('GET /v1/models lists the served model', async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, 'tiny');
  assert.equal(models.data[0].object, 'model');
  assert.equal(models.data[0].max_model_len, 2048);
});

test('POST /tokenize and /detokenize match Hugging Face tokenizers', async () => {
  for (const c of encodeGolden.cases.slice(0, 8)) {
    const tokenized = await (await post(server.url, '/tokenize', { prompt: c.text, add_special_tokens: false })).json();
    assert.deepEqual(tokenized.tokens, c.ids, c.text);
    assert.equal(tokenized.count, c.ids.length);
    assert.equal(tokenized.max_model_len, 2048);
    const detokenized = await (await post(server.url, '/detokenize', { tokens: c.ids })).json();
    assert.equal(detokenized.prompt, c.decoded);
  }
  const withStrs = await (await post(server.url, '/tokenize', { prompt: 'Hello world', return_token_strs: true })).json();
  assert.equal(withStrs.token_strs.length, withStrs.count);
});

test('POST /tokenize with messages renders like apply_chat_template', async () => {
  for (const [name, c] of Object.entries(chatGolden)) {
    const kwargs = c.kwargs ?? {};
    const { add_generation_prompt: addGenerationPrompt = false, tools, ...templateKwargs } = kwargs;
    const body = { messages: c.messages, add_generation_prompt: addGenerationPrompt, chat_template_kwargs: templateKwargs };
    if (tools) body.tools = tools;
    const response = await post(server.url, '/tokenize', body);
    const fromMessages = await response.json();
    assert.equal(response.status, 200, `${name}: ${JSON.stringify(fromMessages)}`);
    const fromText = await (await post(server.url, '/tokenize', { prompt: c.rendered, add_special_tokens: false })).json();
    assert.deepEqual(fromMessages.tokens, fromText.tokens, name);
  }
});

test('completions reproduce transformers greedy tokens (non-streaming and streaming)', async () => {
  for (let i = 0; i < golden.prompts.length; ++i) {
    const request = { model: 'tiny', prompt: golden.prompts[i], max_tokens: golden.greedy_24[i].length, temperature: 0,
      ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true };
    const whole = await client.completions.create(request);
    assert.equal(whole.object, 'text_completion');
    assert.match(whole.id, /^cmpl-/);
    assert.deepEqual(idsOf(whole.choices[0].logprobs.tokens), golden.greedy_24[i]);
    assert.equal(whole.choices[0].finish_reason, 'length');
    assert.equal(whole.usage.prompt_tokens, golden.prompts[i].length);
    assert.equal(whole.usage.completion_tokens, golden.greedy_24[i].length);
    assert.equal(whole.usage.total_tokens, golden.prompts[i].length + golden.greedy_24[i].length);

    const stream = await client.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
    let text = '';
    const tokens = [];
    let usage = null;
    let finish = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        text += choice.text;
        tokens.push(...choice.logprobs.tokens);
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
    assert.deepEqual(idsOf(tokens), golden.greedy_24[i]);
    assert.equal(text, whole.choices[0].text);
    assert.equal(finish, 'length');
    assert.equal(usage.completion_tokens, golden.greedy_24[i].length);
  }
});

test('chat completions: whole and streamed give the same message; usage counts the rendered prompt', async () => {
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name a color.' }];
  const request = { model: 'tiny', messages, max_completion_tokens: 12, temperature: 0, ignore_eos: true };
  const whole = await client.chat.completions.create(request);
  assert.equal(whole.object, 'chat.completion');
  assert.match(whole.id, /^chatcmpl-/);
  const message = whole.choices[0].message;
  assert.equal(message.role, 'assistant');
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 12);
  const prompt = await (await post(server.url, '/tokenize', { messages })).json();
  assert.equal(whole.usage.prompt_tokens, prompt.count);

  const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  let content = '';
  let reasoning = '';
  let role = null;
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) role = choice.delta.role;
      content += choice.delta.content ?? '';
      reasoning += choice.delta.reasoning_content ?? '';
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(content, message.content ?? '');
  assert.equal(reasoning, message.reasoning_content ?? '');
  assert.equal(finish, 'length');
  // The streamed request repeats the prompt, so the prefix cache may serve part of it.
  assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(usage.total_tokens, whole.usage.total_tokens);
  assert.ok(usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens, JSON.stringify(usage));
});

test('raw SSE framing ends with [DONE] and carries x-request-id', async () => {
  const response = await post(server.url, '/v1/chat/completions',
    { messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream: true }, { 'x-request-id': 'my-id-42' });
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type'), /text\/event-stream/);
  assert.equal(response.headers.get('x-request-id'), 'my-id-42');
  const events = await readSse(response);
  assert.equal(events.at(-1), '[DONE]');
  for (const event of events.slice(0, -1)) assert.equal(JSON.parse(event).id, 'chatcmpl-my-id-42');
  const generated = await post(server.url, '/v1/completions', { prompt: 'x', max_tokens: 1 });
  assert.match(generated.headers.get('x-request-id'), /^[0-9a-f]{32}$/);
});

test('n, seed, several prompts and echo', async () => {
  const seeded = { model: 'tiny', prompt: 'def main():', max_tokens: 8, temperature: 1.0, seed: 1234, n: 3, ignore_eos: true };
  const a = await client.completions.create(seeded);
  const b = await client.completions.create(seeded);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index).sort(), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.equal(a.usage.completion_tokens, 24);

  const multi = await client.completions.create({ prompt: ['one', 'two'], n: 2, max_tokens: 4, temperature: 0, ignore_eos: true, model: 'tiny' });
  assert.equal(multi.choices.length, 4);
  // Greedy choices of one prompt agree; choice index = prompt index * n + sequence index.
  assert.equal(multi.choices[0].text, multi.choices[1].text);
  assert.equal(multi.choices[2].text, multi.choices[3].text);
  const single = await client.completions.create({ prompt: 'two', max_tokens: 4, temperature: 0, ignore_eos: true, model: 'tiny' });
  assert.equal(multi.choices[2].text, single.choices[0].text);

  const echoed = await client.completions.create({ prompt: 'Echo me', echo: true, max_tokens: 3, temperature: 0, model: 'tiny' });
  assert.ok(echoed.choices[0].text.startsWith('Echo me'));
});

test('stop strings cut the text before the match', async () => {
  const base = { model: 'tiny', prompt: golden.prompts[2], max_tokens: 24, temperature: 0, ignore_eos: true };
  const full = (await client.completions.create(base)).choices[0].text;
  // A stop string from the middle of the greedy text, starting at its first occurrence.
  const middle = Math.floor(full.length / 2);
  const stop = full.slice(middle, middle + 3);
  assert.ok(stop.length > 0, `greedy text too short: ${JSON.stringify(full)}`);
  const cut = await client.completions.create({ ...base, stop: [stop] });
  assert.equal(cut.choices[0].text, full.slice(0, full.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
});

test('logprobs: completions top alternatives and chat top_logprobs', async () => {
  const completion = await client.completions.create({ model: 'tiny', prompt: 'a', max_tokens: 4, logprobs: 3, temperature: 0 });
  const lp = completion.choices[0].logprobs;
  assert.equal(lp.tokens.length, completion.usage.completion_tokens);
  for (let i = 0; i < lp.tokens.length; ++i) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const top = Object.values(lp.top_logprobs[i]);
    assert.ok(top.length >= 3 && top.length <= 4);
    // Greedy: the sampled token is the most likely one.
    assert.ok(Math.abs(Math.max(...top) - lp.token_logprobs[i]) < 1e-5);
  }
  const chat = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 4, logprobs: true, top_logprobs: 2, temperature: 0, ignore_eos: true });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const entry of content) {
    assert.equal(entry.top_logprobs.length, 2);
    assert.ok(Array.isArray(entry.bytes));
    assert.ok(entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob);
  }
});

test('prefix cache: a repeated prompt reports cached_tokens', async () => {
  const prompt = golden.prompts[2];  // 40 tokens: two full 16-token blocks
  await client.completions.create({ model: 'tiny', prompt, max_tokens: 1 });
  const second = await client.completions.create({ model: 'tiny', prompt, max_tokens: 1 });
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= 32, JSON.stringify(second.usage));
});

test('tools and chat_template_kwargs reach the template', async () => {
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const plain = await (await post(server.url, '/tokenize', { messages })).json();
  const withTools = await (await post(server.url, '/tokenize', { messages, tools })).json();
  assert.ok(withTools.count > plain.count + 20);
  const noThinking = await (await post(server.url, '/tokenize', { messages, chat_template_kwargs: { enable_thinking: false } })).json();
  assert.ok(noThinking.count > plain.count);  // Qwen3 adds an empty <think></think> block
  const response = await client.chat.completions.create({ model: 'tiny', messages, tools, max_tokens: 4 });
  assert.equal(response.usage.prompt_tokens, withTools.count);
});

test('GET /metrics exposes vLLM-like counters, gauges and histograms', async () => {
  const before = await metrics(server.url);
  await client.completions.create({ model: 'tiny', prompt: [1, 2, 3, 4], max_tokens: 5, ignore_eos: true });
  const values = await metrics(server.url);
  assert.equal(values['tern:prompt_tokens_total'] - before['tern:prompt_tokens_total'], 4);
  assert.equal(values['tern:generation_tokens_total'] - before['tern:generation_tokens_total'], 5);
  assert.equal(values['tern:e2e_request_latency_seconds_count'] - before['tern:e2e_request_latency_seconds_count'], 1);
  assert.equal(values['tern:inter_token_latency_seconds_count'] - before['tern:inter_token_latency_seconds_count'], 4);
  for (const name of ['tern:num_requests_running', 'tern:num_requests_waiting', 'tern:kv_cache_usage_perc',
    'tern:prefix_cache_hit_rate', 'tern:num_preemptions_total', 'tern:time_to_first_token_seconds_count',
    'tern:server_overhead_seconds_count']) {
    assert.ok(name in values, `missing ${name}`);
  }
  assert.equal(values['tern:num_requests_running'], 0);
  assert.equal(values['tern:kv_cache_usage_perc'], 0);
});

test('GET /health answers 200 once loaded', async () => {
  const response = await fetch(`${server.url}/health`);
  assert.equal(response.status, 200);
});
