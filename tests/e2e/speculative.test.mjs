// Speculative decoding over HTTP: servers of tern-py-13m with prompt lookup and with its draft model answer
// greedy requests (plain, streamed, with stop strings, logprobs, n = 2 and JSON schemas) exactly as a server without
// speculation, report each request's drafts in its usage and vLLM's spec-decode counters in /metrics, and a bad
// --speculative-config stops the server at start.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { createRequire } from 'node:module';
import { startServer, spawnTern, modelDir, metrics, post, readSse } from './server.mjs';

// ajv comes with the grammar tests' validator (npm ci --prefix tests/grammar/validator).
const requireValidator = createRequire(path.resolve('../grammar/validator/package.json'));
const Ajv2020 = requireValidator('ajv/dist/2020');
const ajv = new Ajv2020({ strict: false, allErrors: true });

const MODEL = 'tern-py-13m';
const NGRAM = JSON.stringify({ method: 'ngram', num_speculative_tokens: 3, prompt_lookup_max: 4, prompt_lookup_min: 2 });
const DRAFT = JSON.stringify({ model: modelDir('tern-py-draft-10m'), num_speculative_tokens: 4 });

let plain;
let speculative;  // by method
before(async () => {
  [plain, speculative] = await Promise.all([
    startServer({ model: MODEL }),
    Promise.all([NGRAM, DRAFT].map((config) => startServer({ model: MODEL, args: ['--speculative-config', config] })))
      .then(([ngram, draft]) => ({ ngram, draft })),
  ]);
});
after(async () => {
  await Promise.all([plain, speculative?.ngram, speculative?.draft].filter(Boolean).map((s) => s.stop()));
});

const PROMPTS = [
  'def add(a, b):\n    return a + b\n\n\ndef add(a, b):\n',
  'import os\nimport sys\n\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n',
  'for i in range(10):\n    print(i)\nfor i in range(10):\n',
];

async function complete(server, body) {
  const response = await post(server.baseURL, '/completions', { model: 'tiny', temperature: 0, ...body });
  assert.equal(response.status, 200, await response.clone().text());
  return response.json();
}

// What must not change with speculation: texts, finish reasons, token counts, logprobs.
function essentials(completion) {
  return {
    choices: completion.choices.map((c) => ({
      index: c.index,
      text: c.text,
      finish_reason: c.finish_reason,
      tokens: c.logprobs?.tokens,
      logprobs: c.logprobs?.token_logprobs?.map((v) => Math.round(v * 1e3)),
    })),
    completion_tokens: completion.usage.completion_tokens,
  };
}

test('greedy completions equal those of a server without speculation, for both proposers', async () => {
  const bodies = [];
  for (const prompt of PROMPTS) {
    bodies.push({ prompt, max_tokens: 40 });
    bodies.push({ prompt, max_tokens: 24, logprobs: 2 });
    bodies.push({ prompt, max_tokens: 40, stop: ['\n\n'] });
    bodies.push({ prompt, max_tokens: 16, n: 2 });
  }
  const expected = await Promise.all(bodies.map((body) => complete(plain, body)));
  for (const [method, server] of Object.entries(speculative)) {
    const actual = await Promise.all(bodies.map((body) => complete(server, body)));
    for (let i = 0; i < bodies.length; ++i) {
      assert.deepEqual(essentials(actual[i]), essentials(expected[i]), `${method}: ${JSON.stringify(bodies[i])}`);
    }
  }
});

// Drafts are checked against the grammar without advancing it: constrained outputs validate and equal the plain
// server's, while the drafts still find matches (the code repeats itself inside the JSON strings).
test('JSON-schema-constrained completions validate and equal those without speculation', async () => {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 40 },
      code: { type: 'string', maxLength: 120 },
      lines: { type: 'integer', minimum: 0, maximum: 99 },
    },
    required: ['name', 'code', 'lines'],
    additionalProperties: false,
  };
  const validate = ajv.compile(schema);
  const bodies = PROMPTS.map((prompt) => ({
    prompt, max_tokens: 120, response_format: { type: 'json_schema', json_schema: { name: 'snippet', schema } },
  }));
  const expected = await Promise.all(bodies.map((body) => complete(plain, body)));
  for (const [method, server] of Object.entries(speculative)) {
    const actual = await Promise.all(bodies.map((body) => complete(server, body)));
    for (let i = 0; i < bodies.length; ++i) {
      const text = actual[i].choices[0].text;
      assert.equal(actual[i].choices[0].finish_reason, 'stop', `${method}: ${text}`);
      assert.ok(validate(JSON.parse(text)), `${method}: ${ajv.errorsText(validate.errors)}: ${text}`);
      assert.deepEqual(essentials(actual[i]), essentials(expected[i]), `${method}: prompt ${i}`);
    }
    assert.ok(actual.some((c) => c.usage.speculative_decoding?.num_drafts > 0), `${method}: no drafts were verified`);
  }
});

test('usage reports each request\'s drafts, with OpenAI\'s prediction token counts', async () => {
  for (const [method, server] of Object.entries(speculative)) {
    const completions = await Promise.all(PROMPTS.map((prompt) => complete(server, { prompt, max_tokens: 40 })));
    const withDrafts = completions.filter((c) => c.usage.speculative_decoding);
    assert.ok(withDrafts.length > 0, `${method}: no request verified drafts`);
    for (const { usage } of withDrafts) {
      const spec = usage.speculative_decoding;
      assert.ok(spec.num_drafts > 0 && spec.num_draft_tokens >= spec.num_drafts, `${method}: ${JSON.stringify(usage)}`);
      assert.equal(usage.completion_tokens_details.accepted_prediction_tokens, spec.num_accepted_tokens, method);
      assert.equal(usage.completion_tokens_details.rejected_prediction_tokens,
        spec.num_draft_tokens - spec.num_accepted_tokens, method);
      assert.ok(Math.abs(spec.acceptance_rate - spec.num_accepted_tokens / spec.num_draft_tokens) < 1e-9, method);
      assert.ok(Math.abs(spec.mean_acceptance_length - (1 + spec.num_accepted_tokens / spec.num_drafts)) < 1e-9, method);
    }
  }
  const plainUsage = (await complete(plain, { prompt: PROMPTS[0], max_tokens: 16 })).usage;
  assert.equal(plainUsage.speculative_decoding, undefined);
  assert.equal(plainUsage.completion_tokens_details, undefined);
});

test('streamed text equals the plain server\'s', async () => {
  const body = { model: 'tiny', prompt: PROMPTS[0], max_tokens: 32, temperature: 0, stream: true };
  const text = async (server) => {
    const events = await readSse(await post(server.baseURL, '/completions', body));
    return events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e).choices[0]?.text ?? '').join('');
  };
  const expected = await text(plain);
  for (const server of Object.values(speculative)) assert.equal(await text(server), expected);
});

test('/metrics reports the spec-decode counters, and only with speculation', async () => {
  for (const [method, server] of Object.entries(speculative)) {
    const values = await metrics(server.url);
    const drafts = values['tern:spec_decode_num_drafts_total'];
    const draftTokens = values['tern:spec_decode_num_draft_tokens_total'];
    const accepted = values['tern:spec_decode_num_accepted_tokens_total'];
    assert.ok(drafts > 0, `${method}: ${drafts} drafts`);
    assert.ok(draftTokens >= drafts, method);
    assert.ok(accepted >= 0 && accepted <= draftTokens, method);
    const k = method === 'ngram' ? 3 : 4;
    let perPosition = 0;
    for (let pos = 0; pos < k; ++pos) {
      const value = values[`tern:spec_decode_num_accepted_tokens_per_pos_total{position="${pos}"}`];
      assert.ok(value !== undefined, `${method}: position ${pos}`);
      perPosition += value;
    }
    assert.equal(perPosition, accepted, method);
    assert.ok(values['tern:request_spec_decode_mean_acceptance_length_count'] > 0, method);
  }
  const plainValues = await metrics(plain.url);
  assert.equal(plainValues['tern:spec_decode_num_drafts_total'], undefined);
  assert.equal(plainValues['tern:request_spec_decode_mean_acceptance_length_count'], undefined);
});

test('a bad --speculative-config stops the server at start, naming the problem', async () => {
  const cases = [
    ['{"method": "ngram"', 'not a JSON object'],
    ['{"method": "ngram", "num_speculative_tokens": 3, "typo": 1}', "unknown key 'typo'"],
    ['{"method": "ngram", "num_speculative_tokens": 40}', 'num_speculative_tokens'],
    [JSON.stringify({ model: modelDir('llama'), num_speculative_tokens: 2 }), 'vocabulary'],
  ];
  for (const [config, message] of cases) {
    // A config error is found before the server listens; a draft model's, once it loads (after listening).
    let exit;
    try {
      const server = await spawnTern(['serve', '--model', modelDir(MODEL), '--host', '127.0.0.1', '--port', '0',
        '--kv-cache-memory', '64MiB', '--threads', '1', '--speculative-config', config], { what: 'tern serve' });
      exit = { code: (await server.exitPromise).code, stderr: server.stderr };
    } catch (error) {
      exit = { code: Number(/exited with (\d+)/.exec(error.message)?.[1]), stderr: error.message };
    }
    assert.equal(exit.code, 1, `${config}: ${exit.stderr}`);
    assert.ok(exit.stderr.includes(message), `${config}: ${exit.stderr}`);
  }
});
