// Request data nested far past what any parser should recurse through (issue 34): a regex, an EBNF grammar, a JSON
// schema's pattern or its JSON text, tool-call arguments (JSON text inside a string, which the server's check of
// the body's nesting does not see) and, through `tern gateway`, a prompt of nested lists. Each overflowed the
// 8 MiB stack of the thread reading it and killed the process; now each is a 400 that names the field (the
// gateway forwards the prompt to a replica, which refuses it), at the size that crashed and at ten times it, and
// the same server then serves a normal request.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, spawnTern, post, waitFor } from './server.mjs';

const LIMIT_MESSAGE = /nesting deeper than 512 levels/;
const SCALES = [1, 10];

let server;
let gateway;

before(async () => {
  server = await startServer();
  gateway = await spawnTern(['gateway', '--host', '127.0.0.1', '--port', '0', '--replica', server.url,
    '--health-interval', '0.2'], { what: 'tern gateway', timeoutMs: 30_000 });
  await waitFor(async () => (await post(gateway.url, '/v1/completions', normalCompletion())).status === 200, 30_000,
    'the gateway forwarding to its replica');
});

after(async () => {
  for (const process of [gateway, server]) {
    if (process) assert.equal((await process.stop()).code, 0, process.stderr);
  }
});

const nested = (depth, inner) => '('.repeat(depth) + inner + ')'.repeat(depth);
const nestedArrays = (depth) => '['.repeat(depth) + ']'.repeat(depth);
const user = { role: 'user', content: 'hi' };
const chat = (extra) => ({ model: 'tiny', messages: [user], max_tokens: 2, ...extra });
const normalCompletion = () => ({ model: 'tiny', prompt: 'Once upon a time', max_tokens: 2 });

// A 400 in OpenAI's shape whose message names the limit and whose param is `param`.
async function expectNestingError(response, param) {
  const text = await response.text();
  assert.equal(response.status, 400, text.slice(0, 500));
  const { error } = JSON.parse(text);
  assert.equal(error.type, 'invalid_request_error');
  assert.equal(error.param, param, error.message);
  assert.match(error.message, LIMIT_MESSAGE);
}

// The process is still up and serves an ordinary request.
async function expectServing(target) {
  assert.equal(target.exited, null, target.stderr);
  const response = await post(target.url, '/v1/completions', normalCompletion());
  assert.equal(response.status, 200, await response.text());
}

const SERVER_CASES = [
  // Regex groups (crashed at ~11,000) through each field that takes a regex.
  { name: 'guided_regex', depth: 12_000, param: 'guided_regex', body: (d) => chat({ guided_regex: nested(d, 'a') }) },
  { name: 'structured_outputs.regex', depth: 12_000, param: 'structured_outputs.regex',
    body: (d) => chat({ structured_outputs: { regex: nested(d, 'a') } }) },
  { name: 'a JSON schema pattern', depth: 12_000, param: 'response_format.json_schema.schema',
    body: (d) => chat({ response_format: { type: 'json_schema',
      json_schema: { name: 's', schema: { type: 'string', pattern: nested(d, 'a') } } } }) },
  // EBNF parentheses (crashed at ~11,000).
  { name: 'guided_grammar', depth: 11_000, param: 'guided_grammar',
    body: (d) => chat({ guided_grammar: `root ::= ${nested(d, '"a"')}` }) },
  // A JSON schema as text (crashed at ~74,000 in dump()), in both fields that take one.
  { name: 'a json_schema given as text', depth: 74_000, param: 'response_format.json_schema.schema',
    body: (d) => chat({ response_format: { type: 'json_schema',
      json_schema: { name: 's', schema: `{"type": "object", "x": ${nestedArrays(d)}}` } } }) },
  { name: 'guided_json given as text', depth: 74_000, param: 'guided_json',
    body: (d) => chat({ guided_json: `{"type": "object", "x": ${nestedArrays(d)}}` }) },
];

// Tool-call arguments nested ~27,000 deep crashed the template render, through chat completions and /tokenize.
function withToolCall(depth) {
  const call = { id: 'c1', type: 'function', function: { name: 'f', arguments: `{"x": ${nestedArrays(depth)}}` } };
  return { model: 'tiny', max_tokens: 2,
    messages: [user, { role: 'assistant', content: '', tool_calls: [call] }, { role: 'tool', tool_call_id: 'c1', content: 'ok' }] };
}
const ARGUMENTS_PARAM = 'messages[1].tool_calls[0].function.arguments';

for (const { name, depth, param, body } of SERVER_CASES) {
  test(`${name} nested ${depth} and ${10 * depth} deep is a 400 and the server keeps serving`, async () => {
    for (const scale of SCALES) {
      await expectNestingError(await post(server.url, '/v1/chat/completions', body(depth * scale)), param);
      await expectServing(server);
    }
  });
}

test('tool-call arguments nested 27000 and 270000 deep are a 400 on chat and /tokenize', async () => {
  for (const scale of SCALES) {
    const body = withToolCall(27_000 * scale);
    await expectNestingError(await post(server.url, '/v1/chat/completions', body), ARGUMENTS_PARAM);
    await expectNestingError(await post(server.url, '/tokenize', body), ARGUMENTS_PARAM);
    await expectServing(server);
  }
});

test('the same requests at ordinary depth still work', async () => {
  const regex = await post(server.url, '/v1/chat/completions', chat({ guided_regex: nested(500, 'a') }));
  assert.equal(regex.status, 200, await regex.text());
  const grammar = await post(server.url, '/v1/chat/completions', chat({ guided_grammar: `root ::= ${nested(100, '"a"')}` }));
  assert.equal(grammar.status, 200, await grammar.text());
  const tokenized = await post(server.url, '/tokenize', withToolCall(100));
  assert.equal(tokenized.status, 200, await tokenized.text());
});

test('the gateway survives a completions prompt nested 65000 and 650000 deep', async () => {
  for (const scale of SCALES) {
    const depth = 65_000 * scale;
    // Raw text: JSON.stringify would recurse as deep on this side.
    const body = `{"model": "tiny", "max_tokens": 2, "prompt": ${'['.repeat(depth)}1${']'.repeat(depth)}}`;
    const response = await post(gateway.url, '/v1/completions', body);
    const text = await response.text();
    assert.equal(response.status, 400, text.slice(0, 500));  // the replica's check of the body's nesting
    assert.match(JSON.parse(text).error.message, /nests arrays and objects deeper than/);
    await expectServing(gateway);
    await expectServing(server);
  }
});
