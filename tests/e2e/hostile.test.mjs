// Hostile clients against `ft serve` (issue 40, "The HTTP edge"): each attack is refused or bounded,
// /health answers throughout, RSS stays within a stated bound, SIGTERM completes within
// --shutdown-grace + 1 s with slow clients connected. Started by tests/e2e/e2e_test.cpp (ctest: E2E),
// which passes FT_BINARY; each server here is the built-in demo model on a free loopback port.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';

const FT = process.env.FT_BINARY;
if (!FT) throw new Error('run through ctest (E2E): FT_BINARY is not set');
const KEY = 'hostile-key';
const MB = 1 << 20;
const RSS_BOUND_MB = 48;  // growth allowed over one attack (the body limit here is 1 MB)

/** Starts `ft serve` on the demo model; resolves { proc, url, port } once it listens. */
function startServer(extra = []) {
  const proc = spawn(FT, ['serve', '--port', '0', '--threads', '1', '--api-key', KEY, '--max-body-mb', '1', ...extra],
                     { stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stderr.resume();
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`ft serve did not start: ${seen}`)), 60_000);
    proc.stdout.on('data', (d) => {
      seen += d.toString();
      const m = /listening on (http:\/\/[0-9.]+:([0-9]+))\/v1/.exec(seen);
      if (m) {
        clearTimeout(timer);
        proc.stdout.removeAllListeners('data');
        proc.stdout.resume();
        resolve({ proc, url: m[1], port: Number(m[2]) });
      }
    });
    proc.on('exit', (code) => reject(new Error(`ft serve exited ${code}: ${seen}`)));
  });
}

/** Resident set size of `pid` in MiB. */
function rssMb(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]) / 1024;
}

/** Opens a raw TCP connection; `received()` is what came back so far. */
function connect(port) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const got = [];
    sock.on('data', (d) => got.push(d));
    sock.on('error', () => {});
    sock.once('connect', () => resolve({ sock, received: () => Buffer.concat(got).toString('latin1') }));
    sock.once('error', reject);
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Sends `head`, then `fill` bytes (in 1 MiB writes, honouring backpressure) until a response status
 *  line arrived, the connection broke, or `total` bytes went out. Returns { reply, sent }. */
async function sendUntilAnswered(port, head, total, chunk) {
  const c = await connect(port);
  let broken = false;
  c.sock.on('close', () => { broken = true; });
  c.sock.write(head);
  let sent = 0;
  while (sent < total && !broken && !c.received().startsWith('HTTP/1.1')) {
    const piece = chunk(Math.min(MB, total - sent));
    sent += piece.length;
    if (!c.sock.write(piece)) await new Promise((r) => { c.sock.once('drain', r); c.sock.once('close', r); });
    await new Promise((r) => setImmediate(r));  // lets an answer that arrived be seen before the next write
  }
  for (let i = 0; i < 200 && !c.received().includes('\r\n\r\n') && !broken; ++i) await sleep(10);
  c.sock.destroy();
  return { reply: c.received(), sent };
}

/** GET /health with a deadline; resolves to [status, milliseconds]. */
async function timedHealth(url) {
  const t0 = Date.now();
  const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(5000) });
  await r.text();
  return [r.status, Date.now() - t0];
}

async function runningNow(url) {
  const r = await fetch(`${url}/v1/stats`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(r.status, 200);
  const q = (await r.json()).requests;
  return q.running + q.waiting;
}

let srv;
before(async () => { srv = await startServer(); });
after(() => { srv?.proc.kill('SIGKILL'); });

test('a 64 MiB header line and 20,000 header fields are refused with 431, RSS bounded', async () => {
  const rss0 = rssMb(srv.proc.pid);
  const big = await sendUntilAnswered(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ', 64 * MB,
                                      (n) => Buffer.alloc(n, 'a'));
  assert.match(big.reply, /^HTTP\/1\.1 431 /, big.reply.slice(0, 200));
  assert.match(big.reply, /request_header_fields_too_large/);
  let many = 'GET /v1/models HTTP/1.1\r\nHost: x\r\n';
  for (let i = 0; i < 20000; ++i) many += `X-H-${i}: v\r\n`;
  const lots = await sendUntilAnswered(srv.port, many + '\r\n', 0, () => Buffer.alloc(0));
  assert.match(lots.reply, /^HTTP\/1\.1 431 /, lots.reply.slice(0, 200));
  const rss1 = rssMb(srv.proc.pid);
  assert.ok(rss1 - rss0 < RSS_BOUND_MB, `RSS grew ${rss0} -> ${rss1} MiB`);
  const [status] = await timedHealth(srv.url);
  assert.equal(status, 200);
});

test('a chunked 200 MiB body is refused early: 401 without the key, 413 with it, RSS bounded', async () => {
  const rss0 = rssMb(srv.proc.pid);
  const chunk = (n) => Buffer.concat([Buffer.from(`${n.toString(16)}\r\n`), Buffer.alloc(n, 'x'), Buffer.from('\r\n')]);
  const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
               'Transfer-Encoding: chunked\r\n';
  const nokey = await sendUntilAnswered(srv.port, head + '\r\n', 200 * MB, chunk);
  assert.match(nokey.reply, /^HTTP\/1\.1 401 /, nokey.reply.slice(0, 200));
  assert.match(nokey.reply, /invalid_api_key/);
  assert.ok(nokey.sent < 64 * MB, `the 401 came after ${nokey.sent} bytes`);
  const keyed = await sendUntilAnswered(srv.port, head + `Authorization: Bearer ${KEY}\r\n\r\n`, 200 * MB, chunk);
  assert.match(keyed.reply, /^HTTP\/1\.1 413 /, keyed.reply.slice(0, 200));
  assert.match(keyed.reply, /request_too_large/);
  assert.ok(keyed.sent < 64 * MB, `the 413 came after ${keyed.sent} bytes`);
  const rss1 = rssMb(srv.proc.pid);
  assert.ok(rss1 - rss0 < RSS_BOUND_MB, `RSS grew ${rss0} -> ${rss1} MiB`);
});

test('160 slow connections (a byte every 2 s) leave /health fast', async () => {
  const slow = [];
  for (let i = 0; i < 160; ++i) {
    const c = await connect(srv.port);
    c.sock.write('GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    slow.push(c);
  }
  const drip = setInterval(() => { for (const c of slow) c.sock.write('a'); }, 2000);
  try {
    for (let i = 0; i < 6; ++i) {
      const [status, ms] = await timedHealth(srv.url);
      assert.equal(status, 200);
      assert.ok(ms < 1000, `/health took ${ms} ms with 160 slow clients`);
      await sleep(500);
    }
    assert.equal(slow.filter((c) => c.received().length > 0).length, 0, 'a slow client was answered early');
  } finally {
    clearInterval(drip);
    for (const c of slow) c.sock.destroy();
  }
});

test('Range bytes=0-,0-,... x2600 gets no multi-range reply', async () => {
  const ranges = 'bytes=0-' + ',0-'.repeat(2600);
  for (const path of ['/v1/models', '/v1/models/nope', '/health']) {
    const r = await fetch(`${srv.url}${path}`, { headers: { Range: ranges, Authorization: `Bearer ${KEY}` } });
    const body = await r.text();
    assert.notEqual(r.status, 206, path);
    assert.ok(body.length < 4096, `${path}: ${body.length} bytes`);
    assert.ok(!(r.headers.get('content-type') ?? '').startsWith('multipart'), path);
  }
});

test('framing errors are answered with a 4xx at once', async () => {
  const auth = `Authorization: Bearer ${KEY}\r\n`;
  const cases = [
    'GARBAGE\r\n\r\n',
    'GET /health HTTP/9.9\r\n\r\n',
    'GET /health HTTP/1.1\r\nNo colon here\r\n\r\n',
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n',
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n',
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n',
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n\r\nzz\r\n`,
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n\r\n5\r\nabcdefgh\r\n`,
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n',
  ];
  for (const raw of cases) {
    const c = await connect(srv.port);
    const t0 = Date.now();
    c.sock.write(raw);
    while (!c.received().includes('\r\n\r\n') && Date.now() - t0 < 3000) await sleep(5);
    const ms = Date.now() - t0;
    c.sock.destroy();
    const status = Number(c.received().split(' ')[1]);
    assert.ok(status >= 400 && status < 500, `${JSON.stringify(raw)} -> ${JSON.stringify(c.received().slice(0, 80))}`);
    assert.ok(ms < 1000, `${JSON.stringify(raw)} answered after ${ms} ms`);
  }
});

test('a non-streaming request whose client hangs up is cancelled', async () => {
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'write forever' }], max_tokens: 3000,
                                ignore_eos: true });
  // Several so the engine is busy for a long time if they are not cancelled.
  const socks = [];
  for (let i = 0; i < 4; ++i) {
    const c = await connect(srv.port);
    c.sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
                 `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    socks.push(c);
  }
  let running = 0;
  for (let i = 0; i < 300 && running < 1; ++i) { running = await runningNow(srv.url); await sleep(10); }
  assert.ok(running >= 1, 'the requests never ran');
  for (const c of socks) c.sock.destroy();
  const t0 = Date.now();
  while ((await runningNow(srv.url)) > 0 && Date.now() - t0 < 5000) await sleep(20);
  const ms = Date.now() - t0;
  assert.equal(await runningNow(srv.url), 0, 'requests still running after their clients left');
  assert.ok(ms < 2000, `cancelled only after ${ms} ms`);
  const [status, hms] = await timedHealth(srv.url);
  assert.equal(status, 200);
  assert.ok(hms < 1000);
});

test('an HTTP/1.0 client gets a stream without chunked framing, ended by the close', async () => {
  const c = await connect(srv.port);
  let closed = false;
  c.sock.on('close', () => { closed = true; });
  const body = JSON.stringify({ prompt: 'Once', max_tokens: 4, stream: true });
  c.sock.write(`POST /v1/completions HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
               `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  for (let i = 0; i < 1000 && !closed; ++i) await sleep(10);
  assert.ok(closed, 'the server did not close the HTTP/1.0 stream');
  const reply = c.received();
  const [head, rest] = [reply.slice(0, reply.indexOf('\r\n\r\n')), reply.slice(reply.indexOf('\r\n\r\n') + 4)];
  assert.match(head, /^HTTP\/1\.1 200 /, head);
  assert.doesNotMatch(head, /Transfer-Encoding/i);
  assert.match(rest, /^data: \{/, rest.slice(0, 80));  // no chunk size line before the first event
  assert.match(rest, /data: \[DONE\]\n\n$/);
});

test('an HTTP/1.0 keep-alive is echoed, and an absolute-form target is served', async () => {
  const c = await connect(srv.port);
  c.sock.write('GET http://127.0.0.1/health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n');
  for (let i = 0; i < 200 && !c.received().includes('"status"'); ++i) await sleep(10);
  const first = c.received();
  assert.match(first, /^HTTP\/1\.1 200 /, first.slice(0, 200));
  assert.match(first, /\r\nConnection: keep-alive\r\n/i);
  c.sock.write('GET /health HTTP/1.0\r\n\r\n');  // the same connection, still open
  for (let i = 0; i < 200 && c.received().split('HTTP/1.1 200').length < 3; ++i) await sleep(10);
  assert.equal(c.received().split('HTTP/1.1 200').length, 3, c.received());
  c.sock.destroy();
});

test('SIGTERM completes within --shutdown-grace + 1 s with slow clients connected', async () => {
  const grace = 2;
  const s = await startServer(['--shutdown-grace', String(grace)]);
  const slow = [];
  try {
    for (let i = 0; i < 40; ++i) {
      const c = await connect(s.port);
      c.sock.write(i % 2 ? 'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: a' : 'POST /v1/chat/completions HTTP/1.1\r\n' +
                   `Host: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: 1000\r\n\r\n{"messages"`);
      slow.push(c);
    }
    await sleep(200);
    const exited = new Promise((r) => s.proc.once('exit', (code, sig) => r({ code, sig })));
    const t0 = Date.now();
    s.proc.kill('SIGTERM');
    const res = await Promise.race([exited, sleep((grace + 1) * 1000 + 500).then(() => null)]);
    const ms = Date.now() - t0;
    assert.ok(res, `ft serve still running ${ms} ms after SIGTERM`);
    assert.equal(res.code, 0);
    assert.ok(ms <= (grace + 1) * 1000, `exited after ${ms} ms`);
  } finally {
    for (const c of slow) c.sock.destroy();
    s.proc.kill('SIGKILL');
  }
});
