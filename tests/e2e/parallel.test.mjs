// `tern serve --tensor-parallel-size 2` on CPU ranks (threads of one process, as CI has no GPUs): the same greedy
// chat completions, streamed and not, as one rank; and the combinations it refuses. `tern generate` with expert
// parallelism, redundant experts and expert placement every 2 steps gives one rank's greedy tokens, and so does
// decode context parallelism (each rank caching every other token), which refuses what it does not cover by name;
// and data-parallel attention (`--dp 2 --ep 2`: each rank its own requests, MoE tokens exchanged all-to-all).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, post, readSse, ternBinary, modelDir } from './server.mjs';

let one;
let two;
let contextParallel;
let dataParallel;

before(async () => {
  [one, two, contextParallel, dataParallel] = await Promise.all([startServer(),
    startServer({ args: ['--tensor-parallel-size', '2'] }),
    startServer({ args: ['--tp', '2', '--decode-context-parallel-size', '2'] }),
    startServer({ args: ['--data-parallel-size', '2', '--expert-parallel-size', '2'] })]);
});

after(async () => {
  await Promise.all([one, two, contextParallel, dataParallel].filter(Boolean).map((s) => s.stop()));
});

const QUESTIONS = ['What is the capital of France?', 'Write a haiku about the sea.', 'List three prime numbers.'];

async function chat(server, content, stream = false) {
  const response = await post(server.url, '/v1/chat/completions', {
    model: 'tiny', messages: [{ role: 'user', content }], max_tokens: 24, temperature: 0, stream,
  });
  assert.equal(response.status, 200);
  if (!stream) return (await response.json()).choices[0].message.content;
  let text = '';
  for (const event of await readSse(response)) {
    if (event !== '[DONE]') text += JSON.parse(event).choices[0]?.delta?.content ?? '';
  }
  return text;
}

test('two CPU ranks answer greedy chat completions exactly as one', async () => {
  for (const question of QUESTIONS) {
    const expected = await chat(one, question);
    assert.ok(expected.length > 0);
    assert.equal(await chat(two, question), expected);
    assert.equal(await chat(two, question, true), expected);
  }
  assert.match(two.stderr, /per tensor-parallel rank/);
});

test('two CPU ranks each caching every other token answer greedy chat completions exactly as one', async () => {
  for (const question of QUESTIONS) {
    const expected = await chat(one, question);
    assert.equal(await chat(contextParallel, question), expected);
    assert.equal(await chat(contextParallel, question, true), expected);
  }
  assert.match(contextParallel.stderr, /decode context parallelism over 2 ranks: each rank caches 1 token in 2/);
});

test('tensor parallelism refuses prefill/decode roles and heads that do not split', () => {
  const role = spawnSync(ternBinary, ['serve', '--model', modelDir('qwen3-chat-tiny'), '--tensor-parallel-size', '2',
    '--role', 'prefill', '--port', '0'], { encoding: 'utf8', timeout: 60_000 });
  assert.notEqual(role.status, 0);
  assert.match(role.stderr, /--role prefill needs --tensor-parallel-size 1/);
  const heads = spawnSync(ternBinary, ['generate', '--model', modelDir('llama'), '--prompt-ids', '1,2',
    '--max-tokens', '2', '--tensor-parallel-size', '3'], { encoding: 'utf8', timeout: 60_000 });
  assert.notEqual(heads.status, 0);
  assert.match(heads.stderr, /attention heads \(4\) does not split evenly over 3 ranks/);
});

function generate(model, extra) {
  return spawnSync(ternBinary, ['generate', '--model', modelDir(model), '--prompt-ids', '1,2,3,4', '--max-tokens', '8',
    '--threads', '2', ...extra], { encoding: 'utf8', timeout: 120_000 });
}

test('redundant experts placed by measured load generate what one rank generates', () => {
  const one = generate('qwen3_moe', []);
  assert.equal(one.status, 0, one.stderr);
  const balanced = generate('qwen3_moe', ['--tp', '2', '--ep', '2', '--num-redundant-experts', '2',
    '--eplb-interval', '2']);
  assert.equal(balanced.status, 0, balanced.stderr);
  assert.equal(balanced.stdout, one.stdout);
});

test('expert load balancing refuses flag combinations by name', () => {
  const uneven = generate('qwen3_moe', ['--tp', '2', '--ep', '2', '--num-redundant-experts', '1']);
  assert.equal(uneven.status, 1);
  assert.match(uneven.stderr,
    /8 experts \+ 1 redundant \(--num-redundant-experts\) = 9 expert slots do not split evenly/);
  const without_ep = generate('qwen3_moe', ['--tp', '2', '--num-redundant-experts', '2']);
  assert.equal(without_ep.status, 1);
  assert.match(without_ep.stderr, /--num-redundant-experts 2: needs expert parallelism/);
  const interval = generate('qwen3_moe', ['--tp', '2', '--eplb-interval', '5']);
  assert.equal(interval.status, 1);
  assert.match(interval.stderr, /--eplb-interval 5: needs expert parallelism/);
});

test('decode context parallelism generates what one rank generates', () => {
  // Blocks of 2 token slots per rank: the 12 tokens span 3 scheduler blocks of 4 over the 2 ranks.
  for (const model of ['llama', 'qwen3', 'deepseek_v3']) {
    const one = generate(model, ['--block-size', '2']);
    assert.equal(one.status, 0, one.stderr);
    const split = generate(model, ['--tp', '2', '--dcp', '2', '--block-size', '2']);
    assert.equal(split.status, 0, split.stderr);
    assert.equal(split.stdout, one.stdout, model);
    assert.match(split.stderr, /decode context parallelism over 2 ranks/);
  }
});

test('decode context parallelism refuses flag combinations and layers by name', () => {
  const size = generate('llama', ['--tp', '2', '--decode-context-parallel-size', '4']);
  assert.equal(size.status, 1);
  assert.match(size.stderr, /--decode-context-parallel-size 4: must be 1 or the tensor-parallel size 2/);
  const sinks = generate('gpt_oss', ['--tp', '2', '--dcp', '2']);
  assert.equal(sinks.status, 1);
  assert.match(sinks.stderr, /decode context parallelism: .* has attention sinks/);
  const role = spawnSync(ternBinary, ['serve', '--model', modelDir('qwen3-chat-tiny'), '--tp', '2', '--dcp', '2',
    '--role', 'prefill', '--port', '0'], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(role.status, 1);
  assert.match(role.stderr, /--role prefill does not work with --decode-context-parallel-size 2/);
});

test('data-parallel ranks answer concurrent greedy chat completions exactly as one rank', async () => {
  const expected = [];
  for (const question of QUESTIONS) expected.push(await chat(one, question));
  // At once, so that the two ranks each run some of them.
  assert.deepEqual(await Promise.all(QUESTIONS.map((q) => chat(dataParallel, q))), expected);
  assert.deepEqual(await Promise.all(QUESTIONS.map((q) => chat(dataParallel, q, true))), expected);
  assert.match(dataParallel.stderr, /per data-parallel rank/);
});

test('data-parallel attention with expert parallelism generates what one rank generates', () => {
  const one = generate('qwen3_moe', []);
  assert.equal(one.status, 0, one.stderr);
  for (const model of ['qwen3_moe', 'deepseek_v3']) {
    const expected = model === 'qwen3_moe' ? one : generate(model, []);
    const dp = generate(model, ['--dp', '2', '--ep', '2']);
    assert.equal(dp.status, 0, dp.stderr);
    assert.equal(dp.stdout, expected.stdout, model);
  }
});

test('data parallelism refuses flag combinations by name', () => {
  const withTp = generate('qwen3_moe', ['--dp', '2', '--ep', '2', '--tp', '2']);
  assert.equal(withTp.status, 1);
  assert.match(withTp.stderr, /--data-parallel-size 2 with --tensor-parallel-size 2/);
  const withoutEp = generate('qwen3_moe', ['--dp', '2']);
  assert.equal(withoutEp.status, 1);
  assert.match(withoutEp.stderr, /--data-parallel-size 2: needs --expert-parallel-size 2/);
  const role = spawnSync(ternBinary, ['serve', '--model', modelDir('qwen3-chat-tiny'), '--dp', '2', '--ep', '2',
    '--role', 'prefill', '--port', '0'], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(role.status, 1);
  assert.match(role.stderr, /--role prefill needs --tensor-parallel-size 1 and --data-parallel-size 1/);
});
