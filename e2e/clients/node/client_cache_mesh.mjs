// node-redis's client-side cache (RESP3, CLIENT TRACKING), unchanged, against a 3-node mesh.
//
// Starts three keymesh-server nodes wired as a full mesh; a node-redis client with
// `RESP: 3, clientSideCache: {...}` on node A reads a key: repeated reads come from its local
// cache (node A serves one GET). The key is then written on node C; the write reaches A by
// merge, A sends the invalidation, and the client's next reads return the new value. A FLUSHALL
// on node B then empties the cache.
//
// Usage: node client_cache_mesh.mjs KEYMESH_SERVER   (redis@5 from package.json, npm ci)
// Exits 1 on any failure, saying what was expected and what came back.
import { spawn } from 'node:child_process';
import net from 'node:net';
import { createClient } from 'redis';

const DEADLINE_MS = 20000;
const binary = process.argv[2] ?? 'target/release/keymesh-server';

function isFree(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

async function freePort() {
  for (let i = 0; i < 200; i++) {
    const port = 20000 + Math.floor(Math.random() * 10000);
    if ((await isFree(port)) && (await isFree(port + 10000))) return port;
  }
  throw new Error('no free port pair');
}

async function waitFor(what, check) {
  const deadline = Date.now() + DEADLINE_MS;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function expect(what, want, got) {
  if (JSON.stringify(want) !== JSON.stringify(got)) {
    throw new Error(`${what}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
  }
}

function getCalls(info) {
  const m = /cmdstat_get:calls=(\d+)/.exec(info);
  return m ? Number(m[1]) : 0;
}

const ports = [];
for (let i = 0; i < 3; i++) ports.push(await freePort());
let log = '';
const procs = ports.map((port, i) => {
  const args = ['--port', `${port}`, '--bind', '127.0.0.1', '--metrics-port', '0', '--node-name', `cache-${i}`,
    '--active-replica', 'yes', '--multi-master', 'yes'];
  ports.forEach((peer, j) => { if (j !== i) args.push('--replicaof', '127.0.0.1', `${peer}`); });
  const p = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  p.stdout.on('data', (d) => { log += d; });
  p.stderr.on('data', (d) => { log += d; });
  return p;
});
const clients = [];
let code = 0;
try {
  const plain = [];
  for (const port of ports) {
    await waitFor(`node on ${port}`, async () => {
      const c = createClient({ socket: { port, host: '127.0.0.1', reconnectStrategy: false } });
      c.on('error', () => {});
      await c.connect();
      plain.push(c);
      return true;
    });
  }
  clients.push(...plain);
  for (const c of plain) {
    await waitFor('every mesh link up', async () => (await c.info('replication')).includes('master_global_link_status:up'));
  }
  await plain[0].set('page:home', 'v1');
  const cached = createClient({ socket: { port: ports[0], host: '127.0.0.1' }, RESP: 3, clientSideCache: { ttl: 0, maxEntries: 0, evictPolicy: 'LRU' } });
  cached.on('error', (e) => { log += `client error: ${e}\n`; });
  await cached.connect();
  clients.push(cached);
  const before = getCalls(await plain[0].info('commandstats'));
  for (let i = 0; i < 3; i++) expect('cached read on A', 'v1', await cached.get('page:home'));
  expect('GETs node A served (the others came from the cache)', 1, getCalls(await plain[0].info('commandstats')) - before);

  await plain[2].set('page:home', 'v2');
  // The write travels C -> A by merge; A then invalidates the client's cached copy.
  await waitFor('the write made on C to reach the cached reads on A', async () => (await cached.get('page:home')) === 'v2');
  expect('read after invalidation', 'v2', await cached.get('page:home'));

  await plain[1].flushAll();
  await waitFor('the FLUSHALL made on B to empty the cache on A', async () => (await cached.get('page:home')) === null);
  console.log('client_cache_mesh: node-redis cache on node A invalidated by writes on nodes C and B: ok');
} catch (e) {
  console.error(`client_cache_mesh: FAILED: ${e.message}`);
  console.error(log.slice(-3000));
  code = 1;
} finally {
  for (const c of clients) await c.close().catch(() => {});
  for (const p of procs) p.kill('SIGTERM');
}
process.exit(code);
