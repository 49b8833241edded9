// Seeded random requests to `tern serve` and to `tern gateway` in front of it (issue 34): deep nesting, shallow,
// around the limit of 512 levels and ten times past it, inside every field that is parsed again (regexes, grammars,
// JSON schemas as objects and as text, schema patterns, tool parameters, tool-call arguments, nested prompts,
// logit_bias, stop, content parts), and random mutations of valid requests (wrong types, random keys, truncation,
// flipped bytes). Every request gets an HTTP answer before a deadline and never a 5xx; after each group the process
// is alive and /health answers 200. The seed is printed; TERN_FUZZ_SEED=<seed> runs another (or replays one).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, spawnTern, post, waitFor } from './server.mjs';

// A fixed seed by default, so that CI runs the same requests every time; any other seed explores further.
const SEED = process.env.TERN_FUZZ_SEED ? Number(process.env.TERN_FUZZ_SEED) : 20261203;
const NUM_NESTING_REQUESTS = 700;  // per target
const NUM_MUTATED_REQUESTS = 700;  // per target
const CONCURRENCY = 4;
const DEADLINE_MS = 30_000;
const LIMIT = 512;  // kMaxNestingDepth

let server;
let gateway;

before(async () => {
  console.log(`fuzz_nesting seed: ${SEED} (replay with TERN_FUZZ_SEED=${SEED})`);
  // A short context: a mutation that drops max_tokens generates up to the context's end.
  server = await startServer({ args: ['--disable-log-requests'], maxModelLen: 256 });
  gateway = await spawnTern(['gateway', '--host', '127.0.0.1', '--port', '0', '--replica', server.url,
    '--health-interval', '0.2'], { what: 'tern gateway', timeoutMs: 30_000 });
  await waitFor(async () => (await post(gateway.url, '/v1/completions', { model: 'tiny', prompt: 'x', max_tokens: 1 }))
    .status === 200, 30_000, 'the gateway forwarding to its replica');
});

after(async () => {
  for (const process of [gateway, server]) {
    if (process) assert.equal((await process.stop()).code, 0, process.stderr);
  }
});

// mulberry32: a small seeded generator.
function random(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function generator(seed) {
  const next = random(seed);
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  const pick = (list) => list[Math.floor(next() * list.length)];
  // Shallow, around the limit, and ten times past it.
  const depth = () => pick([() => int(1, 20), () => int(LIMIT - 8, LIMIT + 8), () => int(10 * LIMIT, 10 * LIMIT + 100)])();
  return { next, int, pick, depth };
}

// A JSON body with raw JSON text in place of the values given as raw(text): nesting that JSON.stringify would
// recurse through, or that no JavaScript value can hold.
const RAW = '\u0000raw:';
const raw = (text) => `${RAW}${text}`;
function bodyText(value) {
  return JSON.stringify(value).replace(/"\\u0000raw:((?:[^"\\]|\\.)*)"/g, (m, text) => JSON.parse(`"${text}"`));
}

const nestedGroups = (d, inner = 'a') => '('.repeat(d) + inner + ')'.repeat(d);
const nestedArrays = (d, inner = '') => '['.repeat(d) + inner + ']'.repeat(d);
const nestedObjects = (d, inner = '1') => '{"a":'.repeat(d) + inner + '}'.repeat(d);
// A schema whose properties nest d levels (2d levels of JSON).
const nestedSchema = (d) => '{"type":"object","properties":{"a":'.repeat(d) + '{"type":"string"}' + '}}'.repeat(d);

function nestedRegex(g, d) {
  return g.pick([
    () => nestedGroups(d),
    () => '(?:'.repeat(d) + 'b' + ')'.repeat(d),
    () => '(a|'.repeat(d) + 'b' + ')'.repeat(d),
    () => nestedGroups(d, '[a-z]{1,3}') + '*',
    () => 'a' + '*'.repeat(Math.min(d, 4)),
  ])();
}
const nestedEbnf = (g, d) => g.pick([
  () => `root ::= ${nestedGroups(d, '"a"')}`,
  () => `root ::= ${'("x" '.repeat(d)}"a"${')?'.repeat(d)}`,
  () => `root ::= /${nestedGroups(d)}/`,
])();
const nestedJsonText = (g, d) => g.pick([() => nestedArrays(d, '1'), () => nestedObjects(d), () => nestedSchema(Math.ceil(d / 2))])();
const user = { role: 'user', content: 'hi' };
const chat = (extra) => ({ model: 'tiny', messages: [user], max_tokens: 1, ...extra });

// Each makes a request (path, body text) with something nested `d` deep in one field.
const NESTING_CASES = {
  guided_regex: (g, d) => chat({ guided_regex: nestedRegex(g, d) }),
  'structured_outputs.regex': (g, d) => chat({ structured_outputs: { regex: nestedRegex(g, d) } }),
  'structured_outputs.grammar': (g, d) => chat({ structured_outputs: { grammar: nestedEbnf(g, d) } }),
  'structured_outputs.json': (g, d) => chat({ structured_outputs: { json: g.next() < 0.5 ? raw(nestedSchema(d)) : nestedJsonText(g, d) } }),
  guided_grammar: (g, d) => chat({ guided_grammar: nestedEbnf(g, d) }),
  'guided_json object': (g, d) => chat({ guided_json: raw(nestedSchema(Math.ceil(d / 2))) }),
  'guided_json text': (g, d) => chat({ guided_json: nestedJsonText(g, d) }),
  'response_format schema': (g, d) => chat({ response_format: { type: 'json_schema',
    json_schema: { name: 's', schema: g.next() < 0.5 ? raw(nestedSchema(Math.ceil(d / 2))) : nestedJsonText(g, d) } } }),
  'response_format pattern': (g, d) => chat({ response_format: { type: 'json_schema',
    json_schema: { name: 's', schema: { type: 'string', pattern: nestedRegex(g, d) } } } }),
  'tools parameters': (g, d) => chat({ tools: [{ type: 'function', function: { name: 'f',
    parameters: g.next() < 0.5 ? raw(nestedSchema(Math.ceil(d / 2))) : { type: 'object', properties: { q: { type: 'string', pattern: nestedRegex(g, d) } } } } }],
  tool_choice: g.pick(['auto', 'required', { type: 'function', function: { name: 'f' } }]) }),
  'tool_calls arguments': (g, d) => ({ model: 'tiny', max_tokens: 1, messages: [user, { role: 'assistant', content: '',
    tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: nestedJsonText(g, d) } }] },
  { role: 'tool', tool_call_id: 'c1', content: 'ok' }] }),
  'completions prompt': (g, d) => ({ path: '/v1/completions', body: { model: 'tiny', max_tokens: 1,
    prompt: raw(g.pick([() => nestedArrays(d, '1'), () => `[${nestedArrays(d, '1')}]`, () => `[[1,2],${nestedArrays(d)}]`])()) } }),
  logit_bias: (g, d) => chat({ logit_bias: raw(g.pick([() => `{"5": ${nestedArrays(d, '1')}}`, () => nestedObjects(d)])()) }),
  stop: (g, d) => chat({ stop: g.next() < 0.5 ? raw(nestedArrays(d, '"x"')) : [nestedGroups(d), nestedArrays(d)] }),
  'content parts': (g, d) => chat({ messages: [{ role: 'user', content: g.pick([
    () => raw(nestedArrays(d, '{"type":"text","text":"hi"}')),
    () => [{ type: 'text', text: nestedArrays(d) }, { type: 'text', text: raw(nestedObjects(d, '"x"')) }],
    () => [{ type: 'text', text: 'hi' }, raw(nestedArrays(d))],
  ])() }] }),
  tokenize: (g, d) => ({ path: '/tokenize', body: { model: 'tiny', messages: [user, { role: 'assistant', content: '',
    tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: nestedJsonText(g, d) } }] }] } }),
};

function nestingRequest(g) {
  const name = g.pick(Object.keys(NESTING_CASES));
  const made = NESTING_CASES[name](g, g.depth());
  const { path, body } = made.path ? made : { path: '/v1/chat/completions', body: made };
  if (path !== '/tokenize' && g.next() < 0.2) body.stream = true;
  return { what: name, path, body: bodyText(body) };
}

// Valid requests, one of them mutated.
const VALID = [
  () => ({ path: '/v1/chat/completions', body: chat({ temperature: 0.7, stop: ['x'], logit_bias: { 5: 1 } }) }),
  () => ({ path: '/v1/chat/completions', body: chat({ response_format: { type: 'json_schema',
    json_schema: { name: 's', schema: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] } } } }) }),
  () => ({ path: '/v1/chat/completions', body: chat({ guided_regex: '[a-z]{1,3}', n: 2 }) }),
  () => ({ path: '/v1/chat/completions', body: chat({ tools: [{ type: 'function', function: { name: 'f',
    parameters: { type: 'object', properties: { q: { type: 'string' } } } } }], tool_choice: 'auto' }) }),
  () => ({ path: '/v1/chat/completions', body: chat({ messages: [{ role: 'system', content: 'be brief' },
    { role: 'user', content: [{ type: 'text', text: 'hi' }] }], stream: true, stream_options: { include_usage: true } }) }),
  () => ({ path: '/v1/completions', body: { model: 'tiny', prompt: ['Once upon', [1, 2, 3]], max_tokens: 1, logprobs: 2 } }),
  () => ({ path: '/v1/completions', body: { model: 'tiny', prompt: 'x', max_tokens: 1, echo: true, stop: 'y' } }),
  () => ({ path: '/tokenize', body: { model: 'tiny', prompt: 'hello there' } }),
];
const ODD_VALUES = [null, true, false, 0, -1, 1, 2.5, -1e308, 2 ** 53, '', 'x', '\u0000', '\ud83d\ude00', [], [1], ['a'],
  [[]], {}, { a: 1 }, { type: 'object' }, [null], [{}]];

function paths(value, prefix = []) {
  if (value === null || typeof value !== 'object') return [prefix];
  const children = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  return [prefix, ...children.flatMap(([k, v]) => paths(v, [...prefix, k]))];
}

function mutatedRequest(g) {
  const { path, body: valid } = g.pick(VALID)();
  const body = structuredClone(valid);  // the valid requests share objects (user)
  const kind = g.pick(['wrong type', 'random key', 'delete', 'truncate', 'flip byte']);
  const targets = paths(body).filter((p) => p.length > 0);
  if (kind === 'wrong type' || kind === 'random key' || kind === 'delete') {
    const target = g.pick(targets);
    let parent = body;
    for (const key of target.slice(0, -1)) parent = parent[key];
    const key = target.at(-1);
    if (kind === 'wrong type') {
      parent[key] = g.pick(ODD_VALUES);
    } else if (kind === 'delete') {
      if (Array.isArray(parent)) parent.splice(key, 1); else delete parent[key];
    } else if (parent && typeof parent === 'object' && !Array.isArray(parent)) {
      const name = g.pick(['', 'constructor', 'x'.repeat(g.int(1, 300)), String(g.int(0, 200000)), '\u0000', 'type', 'max_tokens']);
      parent[name] = g.pick(ODD_VALUES);
    }
    // An accepted max_tokens or n that large would only be slow, never wrong.
    if (typeof body.max_tokens !== 'number' || body.max_tokens > 2) body.max_tokens = 1;
    if (typeof body.n === 'number' && body.n > 2) body.n = 2;
    return { what: `${kind} at ${target.join('.')}`, path, body: JSON.stringify(body) };
  }
  const text = JSON.stringify(body);
  if (kind === 'truncate') {
    return { what: kind, path, body: text.slice(0, g.int(0, text.length - 1)) };
  }
  const bytes = Buffer.from(text);
  for (let i = g.int(1, 4); i > 0; --i) bytes[g.int(0, bytes.length - 1)] = g.int(0, 255);
  return { what: kind, path, body: new Uint8Array(bytes) };
}

// Sends `count` generated requests to `target` with CONCURRENCY in flight; asserts each gets a timely non-5xx answer
// (a 200 read to its end), and that the process is alive and healthy at the end.
async function runGroup(target, name, seed, count, makeRequest) {
  const g = generator(seed);
  const requests = Array.from({ length: count }, () => makeRequest(g));
  const statuses = new Map();
  let nextIndex = 0;
  async function worker() {
    while (nextIndex < requests.length) {
      const index = nextIndex++;
      const { what, path, body } = requests[index];
      const context = `seed ${SEED}, ${name} request ${index} (${what}) to ${path}`;
      let status;
      let text;
      try {
        const response = await fetch(`${target.url}${path}`, { method: 'POST', body,
          headers: { 'content-type': 'application/json' }, signal: AbortSignal.timeout(DEADLINE_MS) });
        status = response.status;
        text = await response.text();
      } catch (error) {
        assert.fail(`${context}: no answer within ${DEADLINE_MS} ms: ${error}\nbody: ${Buffer.from(body).toString('latin1').slice(0, 400)}`);
      }
      assert.ok(status < 500, `${context}: ${status} ${text.slice(0, 300)}\nbody: ${Buffer.from(body).toString('latin1').slice(0, 400)}`);
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  assert.equal(target.exited, null, `seed ${SEED}, ${name}: the process died\n${target.stderr.slice(-2000)}`);
  const health = await fetch(`${target.url}/health`, { signal: AbortSignal.timeout(DEADLINE_MS) });
  assert.equal(health.status, 200, `seed ${SEED}, ${name}: /health`);
  console.log(`${name}: ${[...statuses].sort().map(([s, n]) => `${n} x ${s}`).join(', ')}`);
  return statuses;
}

for (const [targetName, getTarget, seedOffset] of [['serve', () => server, 0], ['gateway', () => gateway, 1000]]) {
  test(`${targetName}: deep nesting in every re-parsed field never hangs, 5xxs or crashes`, async () => {
    const statuses = await runGroup(getTarget(), `${targetName} nesting`, SEED + seedOffset, NUM_NESTING_REQUESTS,
      nestingRequest);
    assert.ok((statuses.get(200) ?? 0) > 0 && (statuses.get(400) ?? 0) > 0, `seed ${SEED}: both accepted and refused`);
  });

  test(`${targetName}: mutated valid requests never hang, 5xx or crash`, async () => {
    const statuses = await runGroup(getTarget(), `${targetName} mutations`, SEED + seedOffset + 1, NUM_MUTATED_REQUESTS,
      mutatedRequest);
    assert.ok((statuses.get(200) ?? 0) > NUM_MUTATED_REQUESTS / 10, `seed ${SEED}: too few mutations were accepted`);
  });
}
