// `tern serve` on the DeepSeek-V4 fixture, which like the real checkpoints has no chat template: prompts come from
// the built-in DeepSeek encoder, checked here against the reference encoder's goldens (tests/chat/data), and chats
// with tools answer through the openai client. The fixture has no tokenizer, so the test writes a byte-level one
// (each byte a token, plus DeepSeek's special tokens) into a model directory of symlinks. The weights are random:
// what the model says is noise, but the request path, the prompt and the response's shape are not.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { spawnTern, waitForHealth, modelDir, post, readSse } from './server.mjs';

const goldens = JSON.parse(fs.readFileSync(new URL('../chat/data/deepseek_encoder_goldens.json', import.meta.url), 'utf8'));
const v4Request = (name) => goldens.request.find((g) => g.version === 'v4' && g.name === name);

const BOS = '<｜begin▁of▁sentence｜>';
const EOS = '<｜end▁of▁sentence｜>';

// GPT-2's byte-to-unicode table, which ByteLevel tokenizers spell their vocabulary in.
function byteLevelAlphabet() {
  const printable = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const chars = new Array(256);
  for (const b of printable) chars[b] = String.fromCodePoint(b);
  let next = 256;
  for (let b = 0; b < 256; b++) if (chars[b] === undefined) chars[b] = String.fromCodePoint(next++);
  return chars;
}

// Ids 0 and 1 are BOS and EOS as the fixture's config.json says; every id of the model's 512 has a token.
function deepseekTokenizer(vocabSize) {
  const addedToken = (id, content, special) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
    normalized: false, special });
  const vocab = {};
  byteLevelAlphabet().forEach((char, byte) => { vocab[char] = 2 + byte; });
  const added = [addedToken(0, BOS, true), addedToken(1, EOS, true)];
  let id = 258;
  for (const content of ['<｜User｜>', '<｜Assistant｜>', '<think>', '</think>', '｜DSML｜', '<｜latest_reminder｜>']) {
    added.push(addedToken(id++, content, false));
  }
  while (id < vocabSize) added.push(addedToken(id, `<｜place▁holder▁no▁${id++}｜>`, true));
  return {
    version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, vocab, merges: [] },
  };
}

const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
};

let dir;
let server;
let client;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-deepseek-v4-'));
  const fixture = modelDir('deepseek_v4');
  fs.symlinkSync(path.join(fixture, 'model.safetensors'), path.join(dir, 'model.safetensors'));
  const config = JSON.parse(fs.readFileSync(path.join(fixture, 'config.json'), 'utf8'));
  // One token per byte makes prompts with tools longer than the fixture's 512 positions.
  config.max_position_embeddings = 8192;
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(deepseekTokenizer(config.vocab_size)));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({ bos_token: BOS, eos_token: EOS }));
  server = await spawnTern(['serve', '--model', dir, '--host', '127.0.0.1', '--port', '0', '--served-model-name', 'tiny',
    '--kv-cache-memory', '64MiB', '--threads', '1', '--max-model-len', '8192'], { what: 'tern serve' });
  await waitForHealth(server.url);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  if (server) assert.equal((await server.stop()).code, 0, server.stderr);
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

// The prompt the server renders for `request`, read back through /tokenize and /detokenize.
async function renderedPrompt(request) {
  const tokenized = await (await post(server.url, '/tokenize', { model: 'tiny', ...request })).json();
  assert.ok(Array.isArray(tokenized.tokens), JSON.stringify(tokenized));
  const detokenized = await (await post(server.url, '/detokenize', { model: 'tiny', tokens: tokenized.tokens })).json();
  return { prompt: detokenized.prompt, count: tokenized.count };
}

test('the server renders chat requests as DeepSeek-V4\'s reference encoder does', async () => {
  for (const name of ['plain', 'thinking_key', 'tools_no_system', 'tools_thinking_history', 'response_format_schema',
    'reasoning_effort_max']) {
    const golden = v4Request(name);
    const { prompt } = await renderedPrompt(golden.request);
    assert.equal(prompt, golden.prompt, name);
  }
});

test('chat with tools answers through the openai client, thinking on and off', async () => {
  for (const thinking of [false, true]) {
    const request = {
      model: 'tiny',
      messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Weather in Paris?' }],
      tools: [WEATHER_TOOL],
      chat_template_kwargs: { thinking },
    };
    const { count, prompt } = await renderedPrompt(request);
    assert.ok(prompt.endsWith(thinking ? '<｜Assistant｜><think>' : '<｜Assistant｜></think>'), prompt.slice(-40));
    assert.ok(prompt.includes('## Tools') && prompt.includes('"name": "get_weather"'));
    const completion = await client.chat.completions.create({ ...request, max_tokens: 12, temperature: 0 });
    assert.equal(completion.object, 'chat.completion');
    assert.equal(completion.choices.length, 1);
    const { message, finish_reason: finishReason } = completion.choices[0];
    assert.equal(message.role, 'assistant');
    assert.ok(['stop', 'length', 'tool_calls'].includes(finishReason), finishReason);
    assert.ok(typeof message.content === 'string' || (message.content === null && message.tool_calls.length > 0));
    assert.equal(completion.usage.prompt_tokens, count);
    assert.ok(completion.usage.completion_tokens >= 1);
  }
});

test('a conversation with a tool call and its result streams', async () => {
  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris", "days": 2}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'Sunny, 24°C' },
    ],
    tools: [WEATHER_TOOL],
    max_tokens: 12,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  let finishReason = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) finishReason = choice.finish_reason ?? finishReason;
  }
  assert.ok(['stop', 'length', 'tool_calls'].includes(finishReason), String(finishReason));
  assert.ok(usage && usage.prompt_tokens > 0 && usage.completion_tokens >= 1, JSON.stringify(usage));
});

test('the tool call and its result reach the prompt as DSML and a <tool_result> block', async () => {
  const { prompt } = await renderedPrompt({
    messages: [
      { role: 'user', content: 'Weather?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'c', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris", "days": 2}' } }] },
      { role: 'tool', tool_call_id: 'c', content: 'Sunny' },
    ],
  });
  assert.ok(prompt.includes('<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
    + '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>'), prompt);
  assert.ok(prompt.endsWith(`${EOS}<｜User｜><tool_result>Sunny</tool_result><｜Assistant｜></think>`), prompt.slice(-80));
});

test('forced tool choice writes DSML parameters that the parser reads back as arguments following the schema, '
  + 'thinking on and off', async () => {
    const tool = { type: 'function', function: { name: 'get_weather', description: 'Get the weather in a city.',
      parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Lima'] },
        days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'days'] } } };
    for (const [toolChoice, thinking] of [['required', false], [{ type: 'function', function: { name: 'get_weather' } },
      false], ['required', true]]) {
      // Thinking on: the prompt ends inside <think>, and the forced calls are still calls, not reasoning.
      const completion = await client.chat.completions.create({ model: 'tiny', tools: [tool], tool_choice: toolChoice,
        messages: [{ role: 'user', content: 'Weather in Paris?' }], max_tokens: 400, seed: 5,
        chat_template_kwargs: { thinking } });
      const { message, finish_reason: finishReason } = completion.choices[0];
      assert.equal(finishReason, 'tool_calls', JSON.stringify(message));
      assert.equal(message.content, null);
      assert.ok(message.tool_calls.length >= 1);
      for (const call of message.tool_calls) {
        assert.equal(call.function.name, 'get_weather');
        const args = JSON.parse(call.function.arguments);
        assert.deepEqual(Object.keys(args), ['city', 'days']);
        assert.ok(['Paris', 'Lima'].includes(args.city) && Number.isInteger(args.days) && args.days >= 1
          && args.days <= 7, call.function.arguments);
      }
    }
  });

// The fixture tokenizer's </think> (an added token, see deepseekTokenizer).
const THINK_END = 261;

test('a constrained output reaches the client intact: a <think> inside its JSON stays content, thinking on and off',
  async () => {
    // Thinking on, the JSON follows the reasoning's </think> (which the bias makes likely after a few random
    // tokens); thinking off, the prompt closed the reasoning and the JSON is the whole output.
    for (const thinking of [true, false]) {
      for (const stream of [false, true]) {
        const request = { model: 'tiny', max_tokens: 100, seed: 3, messages: [{ role: 'user', content: 'hi' }],
          chat_template_kwargs: { thinking }, logit_bias: { [THINK_END]: 4 },
          response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { enum: ['a<think>b</think>c'] } } } };
        const message = { content: '', reasoning_content: '' };
        let finish = null;
        if (stream) {
          for await (const chunk of await client.chat.completions.create({ ...request, stream: true })) {
            message.content += chunk.choices[0]?.delta?.content ?? '';
            message.reasoning_content += chunk.choices[0]?.delta?.reasoning_content ?? '';
            finish = chunk.choices[0]?.finish_reason ?? finish;
          }
        } else {
          const choice = (await client.chat.completions.create(request)).choices[0];
          Object.assign(message, choice.message);
          finish = choice.finish_reason;
        }
        const what = JSON.stringify({ thinking, stream, message });
        assert.equal(finish, 'stop', what);
        assert.equal(message.content, '"a<think>b</think>c"', what);
        if (thinking) assert.ok(message.reasoning_content, what);
        else assert.ok(!message.reasoning_content, what);
      }
    }
  });

test('a chat_template_kwargs of the wrong type is a 400 naming it', async () => {
  const response = await post(server.url, '/v1/chat/completions', {
    model: 'tiny', messages: [{ role: 'user', content: 'hi' }], chat_template_kwargs: { thinking: 'yes' },
  });
  assert.equal(response.status, 400);
  const body = await response.json();
  assert.match(body.error.message, /chat_template_kwargs\.thinking/);
});

test('raw SSE from a thinking request ends with [DONE]', async () => {
  const response = await post(server.url, '/v1/chat/completions', {
    model: 'tiny', messages: [{ role: 'user', content: 'hi' }], chat_template_kwargs: { thinking: true },
    max_tokens: 8, stream: true,
  });
  assert.equal(response.status, 200);
  const events = await readSse(response);
  assert.equal(events.at(-1), '[DONE]');
});
