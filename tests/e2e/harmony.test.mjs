// gpt-oss's harmony format end to end: `tern serve` on the gpt_oss fixture (random weights) with a byte-level
// tokenizer that has harmony's special tokens and gpt-oss's own chat template (tests/chat/data/gpt_oss), driven by
// the official openai client. The model's text is random, so the harmony output the parsers must read back is
// forced with guided_regex (the grammar spells the markers byte by byte; the text is the same). Also the serve
// flags: --tool-call-parser / --reasoning-parser names, --enable-auto-tool-choice, --chat-template.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { spawnTern, waitForHealth, modelDir, post } from './server.mjs';

const harmonyData = path.resolve('../chat/data/gpt_oss');
// tokenizer.json's ids (make_tokenizer.py): gpt-oss stops at <|return|>, <|call|> and <|endoftext|>.
const EOS_IDS = [258, 264, 257];

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const messages = [{ role: 'user', content: 'Weather in Paris?' }];

let server;
let client;
let dir;

// A model directory of links: the fixture's weights, the harmony tokenizer and template, and a config.json that
// names gpt-oss's EOS tokens (the fixture's names none) and a context long enough for prompts of one token a byte
// (the real model's; its YaRN RoPE covers it).
function makeModelDir() {
  const made = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-gpt-oss-'));
  const config = JSON.parse(fs.readFileSync(path.join(modelDir('gpt_oss'), 'config.json'), 'utf8'));
  fs.writeFileSync(path.join(made, 'config.json'), JSON.stringify({ ...config, eos_token_id: EOS_IDS, max_position_embeddings: 4096 }));
  fs.symlinkSync(path.join(modelDir('gpt_oss'), 'model.safetensors'), path.join(made, 'model.safetensors'));
  for (const file of ['tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja']) {
    fs.symlinkSync(path.join(harmonyData, file), path.join(made, file));
  }
  return made;
}

function serveArgs(model, extra = []) {
  return ['serve', '--model', model, '--host', '127.0.0.1', '--port', '0', '--served-model-name', 'tiny',
    '--kv-cache-memory', '64MiB', '--threads', '1', '--max-model-len', '4096', ...extra];
}

before(async () => {
  dir = makeModelDir();
  server = await spawnTern(serveArgs(dir, ['--tool-call-parser', 'openai', '--reasoning-parser', 'gpt_oss',
    '--enable-auto-tool-choice']), { what: 'tern serve' });
  await waitForHealth(server.url);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  const exit = await server.stop();
  fs.rmSync(dir, { recursive: true, force: true });
  assert.equal(exit.code, 0, server.stderr);
});

function assertWellFormed(message) {
  assert.equal(message.role, 'assistant');
  assert.ok(message.content === null || typeof message.content === 'string', JSON.stringify(message));
  for (const call of message.tool_calls ?? []) {
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_/);
    assert.equal(typeof call.function.name, 'string');
    assert.equal(typeof JSON.parse(call.function.arguments), 'object');
  }
}

test('the harmony template renders tools into the prompt', async () => {
  const plain = await (await post(server.url, '/tokenize', { messages })).json();
  const withTools = await (await post(server.url, '/tokenize', { messages, tools })).json();
  assert.ok(withTools.count > plain.count + 100, `${plain.count} -> ${withTools.count}`);
  const { prompt } = await (await post(server.url, '/detokenize', { tokens: withTools.tokens })).json();
  assert.match(prompt, /namespace functions \{\n\n\/\/ Weather of a city\ntype get_weather = /);
  assert.ok(prompt.endsWith('<|start|>assistant'), prompt.slice(-40));
});

test('a chat with tools answers 200 with a well-formed message, whole and streamed', async () => {
  const response = await client.chat.completions.create({ model: 'tiny', messages, tools, max_tokens: 24, seed: 1 });
  assertWellFormed(response.choices[0].message);
  const stream = await client.chat.completions.create({ model: 'tiny', messages, tools, max_tokens: 24, seed: 1,
    stream: true });
  let content = '';
  for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(typeof content, 'string');
});

test('analysis is reasoning and final is content', async () => {
  const regex = '<\\|channel\\|>analysis<\\|message\\|>The user greets\\.<\\|end\\|>'
    + '<\\|start\\|>assistant<\\|channel\\|>final<\\|message\\|>Hello there!';
  const response = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 200, guided_regex: regex });
  const message = response.choices[0].message;
  assert.equal(message.reasoning_content, 'The user greets.');
  assert.equal(message.content, 'Hello there!');
  assert.equal(message.tool_calls, undefined);
});

test('a commentary message to=functions.NAME is a tool call, whole and streamed', async () => {
  const regex = '<\\|channel\\|>analysis<\\|message\\|>Need the weather\\.<\\|end\\|><\\|start\\|>assistant'
    + '<\\|channel\\|>commentary to=functions\\.get_weather <\\|constrain\\|>json<\\|message\\|>\\{"city": "Paris"\\}';
  const request = { model: 'tiny', messages, tools, max_tokens: 300, guided_regex: regex };
  const response = await client.chat.completions.create(request);
  const choice = response.choices[0];
  assertWellFormed(choice.message);
  assert.equal(choice.message.reasoning_content, 'Need the weather.');
  assert.equal(choice.message.content, null);
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.tool_calls.length, 1);
  assert.equal(choice.message.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(choice.message.tool_calls[0].function.arguments), { city: 'Paris' });

  const stream = await client.chat.completions.create({ ...request, stream: true });
  let reasoning = '';
  let content = '';
  const calls = [];
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta ?? {};
    reasoning += delta.reasoning_content ?? '';
    content += delta.content ?? '';
    for (const call of delta.tool_calls ?? []) calls.push(call);
  }
  assert.equal(reasoning, 'Need the weather.');
  assert.equal(content, '');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: 'Paris' });
});

test('forced tool choice writes one harmony call that ends at the <|call|> EOS, whole and streamed', async () => {
  // The grammar spells the header's markers byte by byte (special tokens are outside grammars) and ends at the
  // arguments, where only the EOS tokens, <|call|> among them, are allowed.
  const forcedTools = [
    { type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: {
      type: 'object', properties: { city: { enum: ['Paris', 'Lima'] } }, required: ['city'],
      additionalProperties: false } } },
    { type: 'function', function: { name: 'add', description: 'Sum', parameters: { type: 'object',
      properties: { a: { enum: [1, 2, 3] }, b: { enum: [4, 5] } }, required: ['a', 'b'],
      additionalProperties: false } } }];
  for (const [toolChoice, name] of [['required', null], [{ type: 'function', function: { name: 'add' } }, 'add']]) {
    const request = { model: 'tiny', messages, tools: forcedTools, tool_choice: toolChoice, max_tokens: 200, seed: 3 };
    const choice = (await client.chat.completions.create(request)).choices[0];
    assertWellFormed(choice.message);
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice.message));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0].function;
    if (name) assert.equal(call.name, name);
    const args = JSON.parse(call.arguments);
    if (call.name === 'add') {
      assert.ok([1, 2, 3].includes(args.a) && [4, 5].includes(args.b), call.arguments);
    } else {
      assert.equal(call.name, 'get_weather');
      assert.ok(['Paris', 'Lima'].includes(args.city), call.arguments);
    }

    const stream = await client.chat.completions.create({ ...request, stream: true });
    const calls = [];
    let finish = null;
    for await (const chunk of stream) {
      for (const delta of chunk.choices[0]?.delta?.tool_calls ?? []) calls.push(delta);
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, call.name);
    assert.deepEqual(JSON.parse(calls[0].function.arguments), args);
  }
});

test('unknown parser names stop serve with the valid names', async () => {
  for (const [flag, listed] of [['--tool-call-parser', /hermes/], ['--reasoning-parser', /gpt_oss/]]) {
    const started = spawnTern(serveArgs(dir, [flag, 'no_such_parser']), { what: 'tern serve' });
    await assert.rejects(started, (error) => {
      assert.match(error.message, /exited with [1-9]/);
      assert.match(error.message, /no_such_parser/);
      assert.match(error.message, listed);
      return true;
    });
  }
});

test('--enable-auto-tool-choice refuses a model without a known tool-call syntax', async () => {
  // This Llama 3 template writes no tool calls; naming a parser makes it start.
  // The server listens while it loads the model, so the refusal comes as its exit.
  const refused = await spawnTern(serveArgs(modelDir('llama3-chat-tiny'), ['--enable-auto-tool-choice']),
    { what: 'tern serve' });
  const exit = await refused.exitPromise;
  assert.notEqual(exit.code, 0);
  assert.match(refused.stderr, /--enable-auto-tool-choice: .* name the format with --tool-call-parser \(.*hermes/s);
  const named = await spawnTern(serveArgs(modelDir('llama3-chat-tiny'),
    ['--enable-auto-tool-choice', '--tool-call-parser', 'llama3_json']), { what: 'tern serve' });
  await waitForHealth(named.url);
  assert.equal((await named.stop()).code, 0, named.stderr);
});

test('--chat-template replaces the model template', async () => {
  const file = path.join(dir, 'override.jinja');
  fs.writeFileSync(file, '{% for m in messages %}[{{ m.role }}: {{ m.content }}]{% endfor %}');
  const overridden = await spawnTern(serveArgs(dir, ['--chat-template', file]), { what: 'tern serve' });
  try {
    await waitForHealth(overridden.url);
    const { tokens } = await (await post(overridden.url, '/tokenize', { messages })).json();
    const { prompt } = await (await post(overridden.url, '/detokenize', { tokens })).json();
    assert.equal(prompt, '[user: Weather in Paris?]');
  } finally {
    assert.equal((await overridden.stop()).code, 0, overridden.stderr);
  }
  const missing = spawnTern(serveArgs(dir, ['--chat-template', path.join(dir, 'missing.jinja')]), { what: 'tern serve' });
  await assert.rejects(missing, /--chat-template .*missing\.jinja: cannot open the file/);
});
