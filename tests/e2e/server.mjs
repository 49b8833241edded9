// Starts `tern serve` on a fixture model at 127.0.0.1 on a free port (--port 0; the port is read from the
// "listening on" line) and stops it. TERN_BINARY and TERN_FIXTURES come from CTest.
import { spawn } from 'node:child_process';
import path from 'node:path';
import net from 'node:net';

export const ternBinary = process.env.TERN_BINARY ?? path.resolve('../../build/tern');
export const fixtures = process.env.TERN_FIXTURES ?? path.resolve('../../../shared/fixtures');
export const modelDir = (name) => path.join(fixtures, 'models', name);

export const CHAT_MODEL = 'qwen3-chat-tiny';

// Spawns `tern <argv>` and resolves once it prints its "listening on" line; `what` names it in errors.
// The handle: proc, stderr (all so far), exited, exitPromise, port, url, stop(signal).
export async function spawnTern(argv, { what = 'tern', env = {}, timeoutMs = 60_000 } = {}) {
  const proc = spawn(ternBinary, argv, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  const handle = { proc, stderr: '', exited: null };
  handle.exitPromise = new Promise((resolve) => {
    proc.on('exit', (code, signal) => {
      handle.exited = { code, signal };
      resolve(handle.exited);
    });
  });
  handle.port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "listening" line within ${timeoutMs / 1000} s:\n${handle.stderr}`)),
      timeoutMs);
    proc.stderr.on('data', (data) => {
      handle.stderr += data.toString();
      const match = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(handle.stderr);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code} before listening:\n${handle.stderr}`));
    });
  });
  handle.url = `http://127.0.0.1:${handle.port}`;
  handle.stop = async (signal = 'SIGTERM') => {
    if (!handle.exited) proc.kill(signal);
    return handle.exitPromise;
  };
  return handle;
}

// Options: model (fixture name), args (extra CLI arguments), waitReady (default true), env, port (default 0: any
// free one; a fixed one restarts a server where it was).
export async function startServer({ model = CHAT_MODEL, args = [], waitReady = true, env = {}, port = 0,
  maxModelLen = 2048 } = {}) {
  const argv = ['serve', '--model', modelDir(model), '--host', '127.0.0.1', '--port', String(port),
    '--served-model-name', 'tiny', '--kv-cache-memory', '64MiB', '--threads', '1', '--max-model-len', String(maxModelLen), ...args];
  const server = await spawnTern(argv, { what: 'tern serve', env });
  server.baseURL = `${server.url}/v1`;
  if (waitReady) await waitForHealth(server.url);
  return server;
}

export async function waitForHealth(url, timeoutMs = 120_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const response = await fetch(`${url}/health`);
      if (response.status === 200) return;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${url}/health did not answer 200 within ${timeoutMs} ms`);
}

// `headers`: e.g. the Authorization a server started with --api-key (or a gateway with --admin-api-key) needs.
export async function metrics(url, headers = {}) {
  const text = await (await fetch(`${url}/metrics`, { headers })).text();
  const values = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    values[line.slice(0, space)] = Number(line.slice(space + 1));
  }
  return values;
}

export async function waitFor(predicate, timeoutMs = 10_000, what = 'condition') {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await predicate()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

// Sends raw bytes on a fresh connection and collects everything the server sends until it closes (or timeout).
export function rawExchange(port, chunks, { timeoutMs = 10_000, delayMs = 0 } = {}) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    const received = [];
    let closed = false;
    const started = Date.now();
    const finish = (how) => {
      if (closed) return;
      closed = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ text: Buffer.concat(received).toString('latin1'), how, elapsedMs: Date.now() - started });
    };
    const timer = setTimeout(() => finish('timeout'), timeoutMs);
    socket.on('data', (d) => received.push(d));
    socket.on('end', () => finish('closed'));
    socket.on('close', () => finish('closed'));
    socket.on('error', () => finish('error'));
    socket.on('connect', async () => {
      for (const chunk of chunks) {
        if (closed) return;
        socket.write(chunk);
        if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
      }
    });
  });
}

// Reads an SSE response body into its data payloads.
export async function readSse(response) {
  const text = await response.text();
  return text.split('\n\n').filter((e) => e.length > 0).map((e) => {
    if (!e.startsWith('data: ')) throw new Error(`not an SSE data event: ${JSON.stringify(e)}`);
    return e.slice(6);
  });
}

export function post(url, path, body, headers = {}) {
  return fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
}
