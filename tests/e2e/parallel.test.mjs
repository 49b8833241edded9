// `tern serve --tensor-parallel-size 2` on CPU ranks (threads of one process, as CI has no GPUs): the same greedy
// chat completions, streamed and not, as one rank; and the combinations it refuses.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, post, readSse, ternBinary, modelDir } from './server.mjs';

let one;
let two;

before(async () => {
  [one, two] = await Promise.all([startServer(), startServer({ args: ['--tensor-parallel-size', '2'] })]);
});

after(async () => {
  await Promise.all([one, two].filter(Boolean).map((s) => s.stop()));
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
