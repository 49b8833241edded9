// Structured outputs through the official openai client on the random-weight Qwen3 chat fixture, whose text is
// garbage unless constrained: response_format json_schema / json_object (validated with ajv), vLLM's guided_regex,
// guided_choice, guided_grammar and structured_outputs, tool_choice required / named (parsed tool_calls whose
// arguments validate against the tool's schema), and the 400s for bad constraints.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { createRequire } from 'node:module';
import OpenAI from 'openai';
import { startServer, post, metrics } from './server.mjs';

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
    model: 'tiny', messages, n: 3, seed: 1, max_tokens: 300,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: personSchema, strict: true } },
  });
  assert.equal(completion.choices.length, 3);
  for (const choice of completion.choices) {
    assert.equal(choice.finish_reason, 'stop');
    expectValid(personSchema, choice.message.content);
  }
  const stream = await client.chat.completions.create({
    model: 'tiny', messages, seed: 2, max_tokens: 300, stream: true,
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
    model: 'tiny', messages, temperature: 0, max_tokens: 400,
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
    model: 'tiny', messages, n: 3, seed: 3, max_tokens: 300,
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
