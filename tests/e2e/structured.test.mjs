// Structured outputs through the official openai client on the random-weight Qwen3 chat fixture, whose text is
// garbage unless constrained: response_format json_schema / json_object (validated with ajv), vLLM's guided_regex,
// guided_choice, guided_grammar and structured_outputs, tool_choice required / named (parsed tool_calls whose
// arguments validate against the tool's schema), and the 400s for bad constraints. With thinking on (the Qwen3
// template's default) a JSON constraint applies after the model's </think>, as in vLLM; random weights write it when
// a logit_bias favours it. --structured-outputs-config '{"enable_in_reasoning": true}' applies it from the first token.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { createRequire } from 'node:module';
import OpenAI from 'openai';
import { spawnSync } from 'node:child_process';
import { startServer, post, metrics, ternBinary, modelDir, CHAT_MODEL } from './server.mjs';

// ajv comes with the grammar tests' validator (npm ci --prefix tests/grammar/validator).
const requireValidator = createRequire(path.resolve('../grammar/validator/package.json'));
const Ajv2020 = requireValidator('ajv/dist/2020');
const addFormats = requireValidator('ajv-formats');
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv);

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

const messages = [{ role: 'user', content: 'Describe a person.' }];
// Thinking off: the template closes the <think> block in the prompt and a JSON constraint applies from the first
// token. With thinking on it would wait for a </think> that random weights rarely write.
const noThinking = { chat_template_kwargs: { enable_thinking: false } };

const personSchema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 10 },
    age: { type: 'integer', minimum: 0, maximum: 130 },
    role: { enum: ['admin', 'user', 'guest'] },
    tags: { type: 'array', items: { type: 'string', pattern: '^[a-z]{1,5}$' }, maxItems: 3 },
  },
  required: ['name', 'age', 'role', 'tags'],
  additionalProperties: false,
};

function expectValid(schema, text) {
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(text); }, `not JSON: ${text}`);
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${ajv.errorsText(validate.errors)}: ${text}`);
  return value;
}

test('response_format json_schema: every choice validates, streamed or not', async () => {
  const completion = await client.chat.completions.create({
    model: 'tiny', messages, n: 3, seed: 1, max_tokens: 300, ...noThinking,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: personSchema, strict: true } },
  });
  assert.equal(completion.choices.length, 3);
  for (const choice of completion.choices) {
    assert.equal(choice.finish_reason, 'stop');
    expectValid(personSchema, choice.message.content);
  }
  const stream = await client.chat.completions.create({
    model: 'tiny', messages, seed: 2, max_tokens: 300, stream: true, ...noThinking,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: personSchema } },
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'stop');
  expectValid(personSchema, text);
});

test('response_format json_object gives a JSON object', async () => {
  const completion = await client.chat.completions.create({
    model: 'tiny', messages, temperature: 0, max_tokens: 400, ...noThinking,
    response_format: { type: 'json_object' },
  });
  const choice = completion.choices[0];
  if (choice.finish_reason === 'stop') {
    const value = JSON.parse(choice.message.content);
    assert.equal(typeof value, 'object');
    assert.ok(!Array.isArray(value) && value !== null);
  } else {
    // Free-form strings may run to max_tokens; the text is still an object's prefix.
    assert.equal(choice.finish_reason, 'length');
    assert.match(choice.message.content, /^\s*\{/);
  }
});

test('completions with guided_regex, guided_choice, guided_grammar and structured_outputs', async () => {
  const regex = '[A-Z][a-z]{2,8} [0-9]{1,3}';
  const regexOut = await client.completions.create({ model: 'tiny', prompt: 'Name and number:', max_tokens: 50, n: 2, seed: 3, guided_regex: regex });
  for (const choice of regexOut.choices) {
    assert.equal(choice.finish_reason, 'stop');
    assert.match(choice.text, new RegExp(`^(?:${regex})$`));
  }
  const choices = ['positive', 'negative', 'neutral ✓'];
  const choiceOut = await client.completions.create({ model: 'tiny', prompt: 'Sentiment:', max_tokens: 20, n: 4, seed: 4, guided_choice: choices });
  for (const choice of choiceOut.choices) assert.ok(choices.includes(choice.text), choice.text);
  const grammar = 'root ::= "(" num (" + " num)* ")"\nnum ::= [1-9] [0-9]?';
  const grammarOut = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 60, seed: 5, guided_grammar: grammar });
  const grammarText = grammarOut.choices[0].message.content;
  if (grammarOut.choices[0].finish_reason === 'stop') assert.match(grammarText, /^\([1-9][0-9]?( \+ [1-9][0-9]?)*\)$/);
  else assert.match(grammarText, /^\([1-9][0-9]?( \+ [1-9][0-9]?)*/);
  const structured = await client.completions.create({
    model: 'tiny', prompt: 'JSON:', max_tokens: 300, seed: 6, structured_outputs: { json: personSchema },
  });
  expectValid(personSchema, structured.choices[0].text);
  const structuredChoice = await client.chat.completions.create({
    model: 'tiny', messages, max_tokens: 20, seed: 7, structured_outputs: { choice: ['left', 'right'] },
  });
  assert.ok(['left', 'right'].includes(structuredChoice.choices[0].message.content));
});

// Qwen3's </think> is one token. A schema without free strings, which a favoured </think> would fill.
const THINK_END = 151668;
const answerSchema = {
  type: 'object',
  properties: { n: { type: 'integer', minimum: 0, maximum: 99 }, side: { enum: ['left', 'right'] } },
  required: ['n', 'side'],
  additionalProperties: false,
};
const answerFormat = { type: 'json_schema', json_schema: { name: 'answer', schema: answerSchema } };

async function streamedMessage(request) {
  const stream = await client.chat.completions.create({ ...request, stream: true });
  const message = { reasoning_content: '', content: '' };
  let finish = null;
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta ?? {};
    message.reasoning_content += delta.reasoning_content ?? '';
    message.content += delta.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  return { message, finish_reason: finish };
}

test('thinking on: the model reasons unconstrained, then the JSON follows </think>, streamed or not', async () => {
  // The bias makes </think> likely, not certain: a few tokens of (random) reasoning come first.
  const request = { model: 'tiny', messages, seed: 11, max_tokens: 300, logit_bias: { [THINK_END]: 10 },
    response_format: answerFormat };
  const completion = await client.chat.completions.create({ ...request, n: 3, logprobs: true, top_logprobs: 2 });
  const choices = [...completion.choices, await streamedMessage(request)];
  for (const choice of choices) {
    assert.equal(choice.finish_reason, 'stop', JSON.stringify(choice.message));
    expectValid(answerSchema, choice.message.content);
    assert.ok(!choice.message.content.includes('</think>'), choice.message.content);
  }
  // The reasoning is text the grammar would never have allowed first (it must start with '{' or a space).
  const reasoned = choices.filter((c) => c.message.reasoning_content);
  assert.ok(reasoned.length >= 2, JSON.stringify(choices.map((c) => c.message)));
  for (const choice of reasoned) assert.match(choice.message.reasoning_content, /[^\s{]/);
  // Logprobs cover the reasoning and the answer alike: every token, and no masked (-inf) alternative in the answer.
  for (const choice of completion.choices) {
    assert.ok(choice.logprobs.content.length > 0);
    for (const entry of choice.logprobs.content) assert.ok(Number.isFinite(entry.logprob), JSON.stringify(entry));
  }
});

test('thinking off: the prompt closed the reasoning, the JSON starts at the first token', async () => {
  const completion = await client.chat.completions.create({ model: 'tiny', messages, seed: 12, max_tokens: 300, n: 2,
    logit_bias: { [THINK_END]: 10 }, response_format: answerFormat, ...noThinking });
  for (const choice of completion.choices) {
    assert.equal(choice.finish_reason, 'stop');
    assert.ok(!choice.message.reasoning_content, JSON.stringify(choice.message));
    expectValid(answerSchema, choice.message.content);
  }
});

test('--structured-outputs-config enable_in_reasoning: the JSON starts at the first token, thinking on', async () => {
  const constrained = await startServer({ args: ['--structured-outputs-config', '{"enable_in_reasoning": true}'] });
  try {
    const inReasoning = new OpenAI({ baseURL: constrained.baseURL, apiKey: 'unused', maxRetries: 0 });
    const completion = await inReasoning.chat.completions.create({ model: 'tiny', messages, seed: 11, max_tokens: 300,
      n: 2, logit_bias: { [THINK_END]: 10 }, response_format: answerFormat });
    for (const choice of completion.choices) {
      assert.equal(choice.finish_reason, 'stop');
      assert.ok(!choice.message.reasoning_content, JSON.stringify(choice.message));
      expectValid(answerSchema, choice.message.content);
    }
  } finally {
    const exit = await constrained.stop();
    assert.equal(exit.code, 0, constrained.stderr);
  }
});

test('a bad --structured-outputs-config is refused at start, naming the flag', () => {
  for (const [value, pattern] of [['{"enable_in_reasoning": tru', /not a JSON object/],
    ['{"backend": "xgrammar"}', /unknown key 'backend'/], ['{"enable_in_reasoning": 1}', /true or false/],
    ['[]', /not a JSON object/]]) {
    const run = spawnSync(ternBinary, ['serve', '--model', modelDir(CHAT_MODEL), '--port', '0',
      '--structured-outputs-config', value], { encoding: 'utf8' });
    assert.equal(run.status, 1, run.stderr);
    assert.match(run.stderr, /--structured-outputs-config/);
    assert.match(run.stderr, pattern);
  }
});

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather of a city',
      parameters: {
        type: 'object',
        properties: { city: { enum: ['Paris', 'Tokyo', 'Lima'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
        required: ['city', 'days'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'add',
      parameters: {
        type: 'object',
        properties: { a: { type: 'integer', minimum: -100, maximum: 100 }, b: { type: 'integer', minimum: -100, maximum: 100 } },
        required: ['a', 'b'],
        additionalProperties: false,
      },
    },
  },
];
const schemaOf = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));

test('tool_choice required and named give parsed tool calls that follow the schemas', async () => {
  const required = await client.chat.completions.create({
    model: 'tiny', messages, tools, tool_choice: 'required', max_tokens: 300, n: 3, seed: 8,
  });
  for (const choice of required.choices) {
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice.message));
    assert.ok(choice.message.tool_calls.length >= 1);
    for (const call of choice.message.tool_calls) {
      assert.ok(call.function.name in schemaOf, call.function.name);
      expectValid(schemaOf[call.function.name], call.function.arguments);
    }
  }
  const named = await client.chat.completions.create({
    model: 'tiny', messages, tools, tool_choice: { type: 'function', function: { name: 'add' } }, max_tokens: 100, seed: 9,
  });
  const calls = named.choices[0].message.tool_calls;
  assert.equal(named.choices[0].finish_reason, 'tool_calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, 'add');
  expectValid(schemaOf.add, calls[0].function.arguments);
});

async function expect400(endpoint, body, param, messagePattern) {
  const response = await post(server.url, endpoint, { model: 'tiny', max_tokens: 5, ...body });
  const json = await response.json();
  assert.equal(response.status, 400, JSON.stringify(json));
  assert.equal(json.error.type, 'invalid_request_error');
  assert.equal(json.error.param, param);
  assert.match(json.error.message, messagePattern);
}

test('keywords beside enum/const and $ref, oneOf and formats hold in the output; empty intersections are 400s', async () => {
  const schema = {
    $defs: { word: { type: 'string' } },
    type: 'object',
    properties: {
      kind: { enum: [{ a: 1 }, 'log', 7], type: 'object' },
      short: { enum: ['abcdef', 'ab'], maxLength: 3 },
      either: { oneOf: [{ type: 'integer' }, { type: 'number' }] },
      word: { $ref: '#/$defs/word', maxLength: 3 },
      small: { type: 'integer', format: 'int32' },
      day: { type: 'string', format: 'date' },
    },
    required: ['kind', 'short', 'either', 'word', 'small', 'day'],
    additionalProperties: false,
  };
  const completion = await client.chat.completions.create({
    model: 'tiny', messages, n: 3, seed: 3, max_tokens: 300, ...noThinking,
    response_format: { type: 'json_schema', json_schema: { name: 'keywords', schema } },
  });
  for (const choice of completion.choices) {
    assert.equal(choice.finish_reason, 'stop');
    expectValid(schema, choice.message.content);
  }
  const field = 'response_format.json_schema.schema';
  const format = (s) => ({ messages, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: s } } });
  await expect400('/v1/chat/completions', format({ const: 'x', type: 'integer' }), field, /no value of 'enum'\/'const'/);
  await expect400('/v1/chat/completions', format({ properties: { p: { oneOf: [{ type: 'string' }, { type: 'string', maxLength: 2 }] } } }),
    field, /\/properties\/p\/oneOf.*exactly one/);
});

test('the compiled-grammar cache reports its memory under the --grammar-cache-memory budget', async () => {
  const values = await metrics(server.url);
  const held = values['tern:grammar_cache_memory_bytes'];
  assert.ok(held > 0, JSON.stringify(values));
  assert.equal(values['tern:grammar_cache_max_memory_bytes'], 1024 * 1024 * 1024);
  assert.ok(held <= values['tern:grammar_cache_max_memory_bytes']);
  assert.ok(values['tern:grammar_cache_entries'] >= 1);
  assert.ok('tern:grammar_cache_evictions_total' in values);
});

test('invalid constraints are 400s naming the field and the error position', async () => {
  await expect400('/v1/completions', { prompt: 'x', guided_regex: 'ab(c' }, 'guided_regex', /position|column|offset|at /);
  await expect400('/v1/completions', { prompt: 'x', guided_grammar: 'root ::= "a" (' }, 'guided_grammar', /line 1, column/);
  await expect400('/v1/chat/completions', {
    messages, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'strin' } } } } },
  }, 'response_format.json_schema.schema', /\/properties\/a/);
  await expect400('/v1/completions', { prompt: 'x', guided_json: '{"type": ' }, 'guided_json', /JSON schema/);
  await expect400('/v1/completions', { prompt: 'x', guided_regex: 'a', guided_choice: ['a'] }, 'guided_choice', /only one/);
  await expect400('/v1/chat/completions', { messages, response_format: { type: 'json_object' }, guided_regex: 'a' }, 'guided_regex', /only one/);
  await expect400('/v1/chat/completions', { messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } } },
    'tool_choice.function.name', /nope/);
  await expect400('/v1/chat/completions', { messages, tool_choice: 'required' }, 'tool_choice', /tools/);
  await expect400('/v1/chat/completions', { messages, response_format: { type: 'yaml' } }, 'response_format.type', /yaml/);
  // The server still serves after the errors.
  const ok = await client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 5, guided_choice: ['ok'] });
  assert.equal(ok.choices[0].text, 'ok');
});
