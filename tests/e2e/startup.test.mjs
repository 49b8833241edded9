// `tern serve --model DIR` with no memory flag starts on every CPU kernel variant this machine can run (the KV
// cache sized from the host's available memory), prints the backend it chose, and a variant the processor lacks
// or an unknown one is refused at start with a clear message.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { spawnTern, waitForHealth, modelDir, CHAT_MODEL } from './server.mjs';
import { spawnSync } from 'node:child_process';
import { ternBinary } from './server.mjs';

const hasAvx512 = /\bavx512f\b/.test(readFileSync('/proc/cpuinfo', 'utf8')) &&
  /\bavx512bw\b/.test(readFileSync('/proc/cpuinfo', 'utf8'));

for (const isa of ['avx2', 'avx512']) {
  test(`serve starts with no memory flags under TERN_CPU_ISA=${isa}`, { skip: isa === 'avx512' && !hasAvx512 }, async () => {
    const server = await spawnTern(['serve', '--model', modelDir(CHAT_MODEL), '--host', '127.0.0.1', '--port', '0',
      '--threads', '1', '--backend', 'cpu'], { what: 'tern serve', env: { TERN_CPU_ISA: isa } });
    try {
      await waitForHealth(server.url);
      assert.match(server.stderr, new RegExp(`tern: backend cpu-${isa}, 1 thread`));
      const response = await fetch(`${server.url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: modelDir(CHAT_MODEL), prompt: 'hello', max_tokens: 4 }),
      });
      assert.equal(response.status, 200, await response.text());
    } finally {
      await server.stop();
    }
  });
}

test('a kernel variant the processor lacks, or an unknown one, is refused at start', () => {
  for (const isa of hasAvx512 ? ['avx-512'] : ['avx512', 'avx-512']) {
    const run = spawnSync(ternBinary, ['generate', '--model', modelDir(CHAT_MODEL), '--prompt-ids', '1'],
      { env: { ...process.env, TERN_CPU_ISA: isa }, encoding: 'utf8' });
    assert.equal(run.status, 1);
    assert.match(run.stderr, /TERN_CPU_ISA/);
  }
});
