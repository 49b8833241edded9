// Every error case answers in OpenAI's shape {"error": {"message", "type", "param", "code"}} with the right
// status, through raw HTTP and through the openai client's typed errors; the API key guards the API.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, post } from './server.mjs';

let server;
let base;  // a server on a base model without a chat template

before(async () => {
  [server, base] = await Promise.all([
    startServer({ args: ['--max-body-size', '8'] }),
    startServer({ model: 'tern-py-13m', args: ['--api-key', 'sekrit'] }),
  ]);
});

after(async () => {
  for (const s of [server, base]) assert.equal((await s.stop()).code, 0, s.stderr);
});

async function expectError(response, status, { param, code } = {}) {
  const text = await response.text();
  assert.equal(response.status, status, text);
  assert.match(response.headers.get('content-type'), /application\/json/);
  const body = JSON.parse(text);
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0);
  assert.equal(body.error.type, status >= 500 ? 'server_error' : 'invalid_request_error');
  assert.ok('param' in body.error && 'code' in body.error);
  if (param !== undefined) assert.equal(body.error.param, param, text);
  if (code !== undefined) assert.equal(body.error.code, code, text);
  return body.error;
}

const chat = (extra) => ({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...extra });

test('malformed JSON is 400', async () => {
  await expectError(await post(server.url, '/v1/completions', '{"prompt": "x",'), 400);
  await expectError(await post(server.url, '/v1/chat/completions', 'not json at all'), 400);
  await expectError(await post(server.url, '/v1/chat/completions', ''), 400);
  await expectError(await post(server.url, '/v1/chat/completions', '[1, 2, 3]'), 400);
});

test('wrong types for known fields are 400 naming the field', async () => {
  await expectError(await post(server.url, '/v1/completions', { prompt: 'x', max_tokens: '5' }), 400, { param: 'max_tokens' });
  await expectError(await post(server.url, '/v1/completions', { prompt: 'x', temperature: 'warm' }), 400, { param: 'temperature' });
  await expectError(await post(server.url, '/v1/completions', { prompt: { text: 'x' } }), 400, { param: 'prompt' });
  await expectError(await post(server.url, '/v1/chat/completions', chat({ stream: 'yes' })), 400, { param: 'stream' });
  await expectError(await post(server.url, '/v1/chat/completions', { messages: 'hi' }), 400, { param: 'messages' });
  await expectError(await post(server.url, '/v1/chat/completions', chat({ logprobs: 3 })), 400, { param: 'logprobs' });
  await expectError(await post(server.url, '/v1/chat/completions', chat({ stop: 7 })), 400, { param: 'stop' });
});

test('unknown fields are ignored', async () => {
  const response = await post(server.url, '/v1/chat/completions', chat({ frobnicate: { deeply: [1, 2] }, user: 'u1' }));
  assert.equal(response.status, 200, await response.clone().text());
});

test('bad parameter ranges are 400', async () => {
  for (const [field, value] of [['temperature', 3], ['top_p', 0], ['top_p', 1.5], ['n', 0], ['max_tokens', 0],
    ['max_tokens', -5], ['presence_penalty', 9], ['frequency_penalty', -9], ['top_k', -7], ['min_p', 2],
    ['repetition_penalty', 0], ['top_logprobs', 50], ['logit_bias', { 5: 1000 }], ['seed', 1.5]]) {
    const body = chat({ [field]: value, ...(field === 'top_logprobs' ? { logprobs: true } : {}) });
    await expectError(await post(server.url, '/v1/chat/completions', body), 400, { param: field });
  }
  await expectError(await post(server.url, '/v1/completions', { prompt: 'x', logprobs: 99 }), 400, { param: 'logprobs' });
  // Outside the vocabulary: the engine's check, reported as a 400 too.
  await expectError(await post(server.url, '/v1/completions', { prompt: [1, 2, 99999999] }), 400);
  await expectError(await post(server.url, '/v1/completions', { prompt: 'x', logit_bias: { 999999999: 5 } }), 400);
});

test('unknown model is 404', async () => {
  await expectError(await post(server.url, '/v1/chat/completions', chat({ model: 'gpt-17' })), 404,
    { param: 'model', code: 'model_not_found' });
  const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'x', maxRetries: 0 });
  await assert.rejects(client.completions.create({ model: 'nope', prompt: 'x' }), (e) => e instanceof OpenAI.NotFoundError);
});

test('prompts longer than the context are 400', async () => {
  const long = Array.from({ length: 3000 }, (_, i) => 100 + (i % 1000));
  await expectError(await post(server.url, '/v1/completions', { prompt: long, max_tokens: 1 }), 400,
    { code: 'context_length_exceeded' });
  // Fits alone, but not with the completion asked for.
  await expectError(await post(server.url, '/v1/completions', { prompt: long.slice(0, 2000), max_tokens: 100 }), 400,
    { code: 'context_length_exceeded' });
  const huge = 'word '.repeat(400_000);  // 2 MB of text: refused before tokenizing
  await expectError(await post(server.url, '/v1/chat/completions', { messages: [{ role: 'user', content: huge }] }), 400,
    { code: 'context_length_exceeded' });
  const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'x', maxRetries: 0 });
  await assert.rejects(client.completions.create({ model: 'tiny', prompt: long }), (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
});

test('bodies over the limit are 413', async () => {
  const big = JSON.stringify({ prompt: 'x', padding: 'y'.repeat(9 << 20) });  // limit is 8 MiB here
  await expectError(await post(server.url, '/v1/completions', big), 413);
  assert.equal((await fetch(`${server.url}/health`)).status, 200);
});

test('unknown paths are 404 and wrong methods 405', async () => {
  await expectError(await fetch(`${server.url}/v1/nothing`), 404);
  await expectError(await fetch(`${server.url}/v1/chat/completions`), 405);
  await expectError(await post(server.url, '/health', {}), 405);
});

test('chat on a model without a chat template is 400; completions work', async () => {
  const headers = { authorization: 'Bearer sekrit' };
  await expectError(await post(base.url, '/v1/chat/completions', chat({}), headers), 400, { param: 'messages' });
  const response = await post(base.url, '/v1/completions', { prompt: 'def ', max_tokens: 4 }, headers);
  assert.equal(response.status, 200);
});

test('tern-py-13m writes what transformers writes (greedy text golden)', async () => {
  const fs = await import('node:fs');
  const path = await import('node:path');
  const { modelDir } = await import('./server.mjs');
  const golden = JSON.parse(fs.readFileSync(path.join(modelDir('tern-py-13m'), 'golden.json'), 'utf8'));
  const client = new OpenAI({ baseURL: base.baseURL, apiKey: 'sekrit', maxRetries: 0 });
  for (let i = 0; i < golden.prompts.length; ++i) {
    const result = await client.completions.create({ model: 'tiny', prompt: golden.prompts[i], temperature: 0,
      max_tokens: golden.greedy_32[i].length, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true });
    assert.deepEqual(result.choices[0].logprobs.tokens.map((t) => Number(t.slice(9))), golden.greedy_32[i]);
  }
});

test('API key: missing or wrong is 401; right one works; /health stays open, /metrics needs the key', async () => {
  await expectError(await post(base.url, '/v1/completions', { prompt: 'x', max_tokens: 1 }), 401, { code: 'invalid_api_key' });
  await expectError(await post(base.url, '/v1/completions', { prompt: 'x', max_tokens: 1 }, { authorization: 'Bearer wrong' }), 401);
  await expectError(await post(base.url, '/v1/completions', { prompt: 'x', max_tokens: 1 }, { authorization: 'sekrit' }), 401);
  await expectError(await fetch(`${base.url}/v1/models`), 401);
  await expectError(await post(base.url, '/tokenize', { prompt: 'x' }), 401);
  assert.equal((await fetch(`${base.url}/health`)).status, 200);
  await expectError(await fetch(`${base.url}/metrics`), 401, { code: 'invalid_api_key' });
  assert.equal((await fetch(`${base.url}/metrics`, { headers: { authorization: 'Bearer sekrit' } })).status, 200);
  const bad = new OpenAI({ baseURL: base.baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  const good = new OpenAI({ baseURL: base.baseURL, apiKey: 'sekrit', maxRetries: 0 });
  assert.equal((await good.models.list()).data[0].id, 'tiny');
});
