// Authentication hardening of `tern serve` and `tern gateway`: /metrics behind the API key unless
// --metrics-without-auth, the Bearer scheme in any case, empty keys refused at start, and the gateway's
// /admin/replicas disabled without --admin-api-key and refusing replica URLs that would send clients' requests
// (and their API keys) somewhere they should not go.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import dns from 'node:dns/promises';
import os from 'node:os';
import { startServer, spawnTern, ternBinary, modelDir, CHAT_MODEL, post } from './server.mjs';

const KEY = 'serve-key-1234';
const ADMIN_KEY = 'gateway-admin-key-5678';
const bearer = (key, scheme = 'Bearer') => ({ authorization: `${scheme} ${key}` });

let server;  // tern serve --api-key KEY

before(async () => {
  server = await startServer({ args: ['--api-key', KEY] });
});

after(async () => {
  assert.equal((await server.stop()).code, 0, server.stderr);
});

// Runs `tern <argv>` to its end; resolves to its exit code and stderr.
function runTern(argv, env = {}, timeoutMs = 30_000) {
  return new Promise((resolve, reject) => {
    const proc = spawn(ternBinary, argv, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
    let stderr = '';
    proc.stderr.on('data', (data) => { stderr += data.toString(); });
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`tern ${argv.join(' ')} still running after ${timeoutMs} ms:\n${stderr}`));
    }, timeoutMs);
    proc.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

async function errorOf(response, status) {
  const text = await response.text();
  assert.equal(response.status, status, text);
  return JSON.parse(text).error;
}

const get = (url, path, headers = {}) => fetch(`${url}${path}`, { headers });
const adminRequest = (gateway, method, url, headers = {}) => fetch(`${gateway.url}/admin/replicas`, {
  method, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ url }),
});

async function listReplicas(gateway) {
  const response = await get(gateway.url, '/admin/replicas', bearer(ADMIN_KEY));
  assert.equal(response.status, 200);
  return (await response.json()).replicas.map((r) => r.url);
}

async function withGateway(args, body) {
  const gateway = await spawnTern(['gateway', '--host', '127.0.0.1', '--port', '0', '--health-interval', '0.2',
    '--replica', server.url, ...args], { what: 'tern gateway', timeoutMs: 30_000 });
  try {
    await body(gateway);
  } finally {
    assert.equal((await gateway.stop()).code, 0, gateway.stderr);
  }
}

test('serve --api-key: /metrics needs the key, /health does not', async () => {
  assert.equal((await errorOf(await get(server.url, '/metrics'), 401)).code, 'invalid_api_key');
  await errorOf(await get(server.url, '/metrics', bearer('wrong')), 401);
  await errorOf(await get(server.url, '/metrics', bearer(`${KEY}x`)), 401);
  const response = await get(server.url, '/metrics', bearer(KEY));
  assert.equal(response.status, 200);
  assert.match(await response.text(), /^tern:/m);
  assert.equal((await get(server.url, '/health')).status, 200);
});

test('serve: the Bearer scheme is matched in any case (RFC 7235)', async () => {
  for (const scheme of ['Bearer', 'bearer', 'BEARER', 'bEaReR']) {
    assert.equal((await get(server.url, '/v1/models', bearer(KEY, scheme))).status, 200, scheme);
    assert.equal((await get(server.url, '/metrics', bearer(KEY, scheme))).status, 200, scheme);
  }
  await errorOf(await get(server.url, '/v1/models', bearer(KEY, 'Basic')), 401);
  await errorOf(await get(server.url, '/v1/models', { authorization: KEY }), 401);
});

test('serve --metrics-without-auth opens /metrics and nothing else', async () => {
  const open = await startServer({ args: ['--api-key', KEY, '--metrics-without-auth'] });
  try {
    assert.equal((await get(open.url, '/metrics')).status, 200);
    await errorOf(await get(open.url, '/v1/models'), 401);
    await errorOf(await post(open.url, '/v1/completions', { prompt: 'x', max_tokens: 1 }), 401);
  } finally {
    assert.equal((await open.stop()).code, 0, open.stderr);
  }
});

test('an empty API key is refused at start, from the option or the environment', async () => {
  const serve = ['serve', '--model', modelDir(CHAT_MODEL), '--host', '127.0.0.1', '--port', '0'];
  const gateway = ['gateway', '--host', '127.0.0.1', '--port', '0', '--replica', 'http://127.0.0.1:9'];
  const cases = [
    { argv: [...serve, '--api-key', ''], names: /--api-key: the key is empty/ },
    { argv: serve, env: { TERN_API_KEY: '' }, names: /\$TERN_API_KEY .*the key is empty/ },
    { argv: [...serve, '--api-key', ' '], names: /--api-key: the key holds whitespace/ },
    { argv: [...gateway, '--admin-api-key', ''], names: /--admin-api-key: the key is empty/ },
    { argv: gateway, env: { TERN_GATEWAY_ADMIN_API_KEY: '' }, names: /\$TERN_GATEWAY_ADMIN_API_KEY .*the key is empty/ },
  ];
  for (const { argv, env, names } of cases) {
    const { code, stderr } = await runTern(argv, env);
    const what = `tern ${argv.slice(0, 1).join(' ')} ${JSON.stringify(argv.slice(-2))} ${JSON.stringify(env ?? {})}`;
    assert.notEqual(code, 0, `${what} should refuse to start:\n${stderr}`);
    assert.match(stderr, names, what);
    assert.doesNotMatch(stderr, /listening on/, what);
  }
});

test('gateway without --admin-api-key: /admin/replicas and /metrics answer 403 and change nothing', async () => {
  await withGateway([], async (gateway) => {
    for (const method of ['GET', 'POST', 'DELETE']) {
      const response = method === 'GET' ? await get(gateway.url, '/admin/replicas')
        : await adminRequest(gateway, method, method === 'POST' ? 'http://127.0.0.1:9' : server.url);
      const error = await errorOf(response, 403);
      assert.equal(error.code, 'admin_api_disabled');
      assert.match(error.message, /--admin-api-key/);
    }
    // Sending some key changes nothing: there is none to match.
    await errorOf(await adminRequest(gateway, 'DELETE', server.url, bearer('anything')), 403);
    assert.match((await errorOf(await get(gateway.url, '/metrics'), 403)).message, /--metrics-without-auth/);
    // The replica is still there and serves.
    const deadline = Date.now() + 10_000;
    while ((await get(gateway.url, '/health')).status !== 200 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const health = await get(gateway.url, '/health');
    assert.equal(health.status, 200);
    assert.doesNotMatch(await health.text(), /127\.0\.0\.1|http:/, '/health names no replica');
    assert.equal((await get(gateway.url, '/v1/models', bearer(KEY))).status, 200);
  });
});

test('gateway --admin-api-key: admin routes and /metrics need that key exactly, in any scheme case', async () => {
  await withGateway(['--admin-api-key', ADMIN_KEY], async (gateway) => {
    for (const path of ['/admin/replicas', '/metrics']) {
      assert.equal((await errorOf(await get(gateway.url, path), 401)).code, 'invalid_api_key', path);
      for (const wrong of [`${ADMIN_KEY}x`, ADMIN_KEY.slice(0, -1), KEY, '']) {
        await errorOf(await get(gateway.url, path, bearer(wrong)), 401);
      }
      await errorOf(await get(gateway.url, path, { authorization: ADMIN_KEY }), 401);
      for (const scheme of ['Bearer', 'bearer', 'BEARER']) {
        assert.equal((await get(gateway.url, path, bearer(ADMIN_KEY, scheme))).status, 200, `${scheme} on ${path}`);
      }
    }
    await errorOf(await adminRequest(gateway, 'DELETE', server.url), 401);
    await errorOf(await adminRequest(gateway, 'POST', 'http://127.0.0.1:9', bearer('wrong')), 401);
    assert.deepEqual(await listReplicas(gateway), [server.url]);
  });
});

test('gateway --metrics-without-auth opens /metrics, not /admin/replicas', async () => {
  await withGateway(['--admin-api-key', ADMIN_KEY, '--metrics-without-auth'], async (gateway) => {
    assert.equal((await get(gateway.url, '/metrics')).status, 200);
    await errorOf(await get(gateway.url, '/admin/replicas'), 401);
  });
  await withGateway(['--metrics-without-auth'], async (gateway) => {
    assert.equal((await get(gateway.url, '/metrics')).status, 200);
    await errorOf(await get(gateway.url, '/admin/replicas'), 403);
  });
});

test('gateway admin API refuses credentials, paths, link-local addresses and the gateway itself', async () => {
  await withGateway(['--admin-api-key', ADMIN_KEY], async (gateway) => {
    const refused = async (url, status, pattern) => {
      const error = await errorOf(await adminRequest(gateway, 'POST', url, bearer(ADMIN_KEY)), status);
      assert.equal(error.param, 'url', url);
      assert.match(error.message, pattern, url);
    };
    await refused('http://user:pw@127.0.0.1:9', 400, /credentials/);
    await refused(`${server.url}/v1?x=1`, 400, /no path, query or fragment/);
    await refused('https://127.0.0.1:9', 400, /https is not supported/);
    await refused('http://2852039166:80', 400, /unusual form/);  // 169.254.169.254 as a resolver reads it
    await refused('http://169.254.169.254:80', 403, /link-local/);
    await refused('http://[fe80::1]:80', 403, /link-local/);
    await refused('http://[::ffff:169.254.169.254]:80', 403, /link-local/);
    await refused(gateway.url, 403, /gateway's own address/);
    await refused(`http://localhost:${gateway.port}`, 403, /gateway's own address/);
    assert.deepEqual(await listReplicas(gateway), [server.url]);
  });
});

// A name for the gateway that no rule can see through (this machine's host name, when it resolves to 127.0.0.1):
// the gateway recognises its own requests coming back, so the alias never passes a health check and no request loops.
test('a replica URL that is another name for the gateway is never routed to', async (t) => {
  const alias = os.hostname().toLowerCase();
  const resolved = await dns.lookup(alias, { family: 4 }).catch(() => null);
  if (resolved?.address !== '127.0.0.1') {
    t.skip(`the host name ${alias} does not resolve to 127.0.0.1`);
    return;
  }
  await withGateway(['--admin-api-key', ADMIN_KEY], async (gateway) => {
    const aliasUrl = `http://${alias}:${gateway.port}`;
    assert.equal((await adminRequest(gateway, 'POST', aliasUrl, bearer(ADMIN_KEY))).status, 201);
    await new Promise((r) => setTimeout(r, 1_500));  // several health checks (every 0.2 s)
    const listed = (await (await get(gateway.url, '/admin/replicas', bearer(ADMIN_KEY))).json()).replicas;
    assert.deepEqual(listed.map((r) => [r.url, r.healthy]), [[server.url, true], [aliasUrl, false]]);
    for (let i = 0; i < 8; ++i) assert.equal((await get(gateway.url, '/v1/models', bearer(KEY))).status, 200);
    // Sent by hand, a request carrying another gateway's marker is forwarded as usual.
    const foreign = await get(gateway.url, '/v1/models', { ...bearer(KEY), 'x-tern-gateway-id': 'another-gateway' });
    assert.equal(foreign.status, 200);
  });
});

test('gateway --allowed-replica-hosts binds replicas added at run time, not those on the command line', async () => {
  await withGateway(['--admin-api-key', ADMIN_KEY, '--allowed-replica-hosts', '10.0.0.0/8,replica.internal'],
    async (gateway) => {
      for (const url of ['http://127.0.0.1:9', 'http://localhost:22', 'http://192.168.0.1:8000',
        'http://other.internal:8000']) {
        const error = await errorOf(await adminRequest(gateway, 'POST', url, bearer(ADMIN_KEY)), 403);
        assert.equal(error.code, 'replica_not_allowed');
        assert.match(error.message, /not in --allowed-replica-hosts/);
      }
      for (const url of ['http://10.1.2.3:8000', 'http://replica.internal:8000']) {
        assert.equal((await adminRequest(gateway, 'POST', url, bearer(ADMIN_KEY))).status, 201, url);
      }
      // The --replica on 127.0.0.1 was trusted, and still serves.
      assert.deepEqual(await listReplicas(gateway),
        [server.url, 'http://10.1.2.3:8000', 'http://replica.internal:8000']);
    });
});

test('gateway refuses unsafe replicas and allow-list entries at start', async () => {
  const gateway = ['gateway', '--host', '127.0.0.1', '--port', '0'];
  const cases = [
    { argv: [...gateway, '--replica', 'http://169.254.169.254:80'], names: /link-local/ },
    { argv: [...gateway, '--replica', 'http://u:p@127.0.0.1:9'], names: /credentials/ },
    { argv: [...gateway, '--replica', 'http://127.0.0.1:9', '--allowed-replica-hosts', '10.0.0.0/33'],
      names: /--allowed-replica-hosts: '10\.0\.0\.0\/33'/ },
  ];
  for (const { argv, names } of cases) {
    const { code, stderr } = await runTern(argv);
    assert.notEqual(code, 0, `${argv.join(' ')} should refuse to start:\n${stderr}`);
    assert.match(stderr, names, argv.join(' '));
  }
});
