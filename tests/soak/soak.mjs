// make soak (issue 40): `ft serve` on the demo model and on the qwen3_moe fixture under SOAK_CLIENTS
// concurrent clients for SOAK_MIN minutes, mixing chat, completions and Anthropic messages, streamed and
// whole, with tools, long and short prompts and prefix-sharing conversations, ~30% of the streams cut
// by the client and ~5% malformed bodies. Then it drains and asserts, per server:
//   - no 5xx but 503 (overload, with Retry-After); every 2xx reply valid JSON or a well-formed SSE stream;
//     every malformed body a 4xx with an error object; the server still running;
//   - after the drain, /v1/stats shows 0 running and 0 waiting, KV pages used 0 (cached pages are the
//     prefix cache's, not leaks) and no recurrent-state slot held;
//   - resident memory (VmRSS) growth from the end of warm-up (the first 20% of the run) to the end under
//     SOAK_RSS_MIB (default 64 MiB).
// Prints a table: requests, tokens, errors by kind, disconnects, p50/p99 time to first token and
// inter-token latency, RSS at warm-up and at the end. Exit code 1 on any failed assertion.
//
// Both servers use Qwen2.5's chat template (ChatML with Hermes tool calls) from the shared data, so
// tools requests are rendered.
//
// Usage: node tests/soak/soak.mjs FT_BINARY SHARED_DIR   (env: SOAK_MIN, SOAK_CLIENTS, SOAK_RSS_MIB, SOAK_SEED)
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

const [ftBin, shared] = process.argv.slice(2);
if (!ftBin || !shared) {
  console.error('usage: node tests/soak/soak.mjs FT_BINARY SHARED_DIR');
  process.exit(2);
}
const fixture = `${shared}/fixtures/gguf/qwen3_moe/qwen3_moe-bf16.gguf`;
const template = `${shared}/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja`;
const minutes = Number(process.env.SOAK_MIN ?? 10);
const nClients = Number(process.env.SOAK_CLIENTS ?? 24);
const rssBoundMiB = Number(process.env.SOAK_RSS_MIB ?? 64);
const durationMs = minutes * 60_000;

/** Starts `ft serve ARGS` and resolves { proc, url } once it prints its "listening on" line. */
function startServer(name, args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(ftBin, ['serve', '--host', '127.0.0.1', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let seen = '';
    const onData = (d) => {
      seen += d.toString();
      const m = /listening on (http:\/\/[0-9.]+:[0-9]+)\/v1/.exec(seen);
      if (m) {
        proc.stdout.off('data', onData);
        proc.stdout.on('data', () => {});
        resolve({ name, proc, url: m[1] });
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', () => {});
    proc.on('exit', (code) => reject(new Error(`${name}: ft serve exited (${code}) before listening:\n${seen}`)));
  });
}

function rssMiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

// Deterministic random numbers (mulberry32), so a failing run can be repeated with SOAK_SEED.
let seed = Number(process.env.SOAK_SEED ?? 1919) >>> 0;
function rand() {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];

const words = 'the fox ran over a hill and saw river light stone cloud under many old trees while birds sang'.split(' ');
const text = (n) => Array.from({ length: n }, () => pick(words)).join(' ');
const sharedPrefix = 'You are a careful assistant. ' + text(120);  // prefix-sharing conversations
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];

/** One request of the mix: { kind, path, body, stream }. */
function makeRequest(model) {
  const stream = rand() < 0.5;
  const long = rand() < 0.15;
  const user = long ? text(220) : text(4 + Math.floor(rand() * 20));  // long: ~550 tokens (the fixture holds 1024)
  const max_tokens = 4 + Math.floor(rand() * 40);
  const r = rand();
  if (r < 0.35) {
    const messages = rand() < 0.4
      ? [{ role: 'system', content: sharedPrefix }, { role: 'user', content: 'hello' }, { role: 'assistant', content: text(10) }, { role: 'user', content: user }]
      : [{ role: 'user', content: user }];
    const body = { model, messages, max_tokens, temperature: rand() < 0.5 ? 0 : 0.8, stream };
    if (stream && rand() < 0.5) body.stream_options = { include_usage: true };
    return { kind: 'chat', path: '/v1/chat/completions', body, stream };
  }
  if (r < 0.5) {
    return { kind: 'tools', path: '/v1/chat/completions', stream,
      body: { model, messages: [{ role: 'user', content: 'weather in ' + pick(words) }], tools, max_tokens, stream } };
  }
  if (r < 0.75) {
    return { kind: 'completions', path: '/v1/completions', stream,
      body: { model, prompt: rand() < 0.3 ? sharedPrefix + user : user, max_tokens, stream, n: rand() < 0.1 ? 2 : 1 } };
  }
  return { kind: 'anthropic', path: '/v1/messages', stream,
    body: { model, max_tokens, stream, messages: [{ role: 'user', content: user }] } };
}

/** A body a client got wrong: truncated, a wrong type, or bytes that are not JSON. */
function malformed(req) {
  const s = JSON.stringify(req.body);
  return pick([
    s.slice(0, Math.max(1, Math.floor(s.length * rand()))),
    JSON.stringify({ ...req.body, max_tokens: 'many' }),
    JSON.stringify({ ...req.body, messages: 7, prompt: {} }),
    '\u0000\u00ff{' + s,
  ]);
}

function percentile(a, p) {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}

class Tally {
  constructor(name) {
    Object.assign(this, { name, requests: 0, tokens: 0, disconnects: 0, malformed: 0, ok: 0, overload: 0,
      errors: {}, ttft: [], itl: [], failures: [] });
  }
  error(kind, detail) {
    this.errors[kind] = (this.errors[kind] ?? 0) + 1;
    if (this.failures.length < 10) this.failures.push(`${kind}: ${detail}`);
  }
}

/** Reads an SSE stream; checks every data line is JSON (or [DONE]); returns the events' count. */
async function readSse(res, t0, tally, abortAt, controller) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '', events = 0, last = 0, sawEnd = false;
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (e) {
      if (controller.signal.aborted) return { events, cut: true };
      throw e;
    }
    if (chunk.done) break;
    buf += dec.decode(chunk.value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, at);
      buf = buf.slice(at + 2);
      for (const line of block.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') { sawEnd = true; continue; }
        const j = JSON.parse(data);  // throws on a malformed event
        if (j.type === 'message_stop') sawEnd = true;
        if (j.error || j.type === 'error') throw new Error('error event: ' + data.slice(0, 200));
        const now = performance.now();
        if (events === 0) tally.ttft.push(now - t0);
        else tally.itl.push(now - last);
        last = now;
        ++events;
        ++tally.tokens;
        if (abortAt && events >= abortAt) {
          controller.abort();
          return { events, cut: true };
        }
      }
    }
  }
  if (!sawEnd) throw new Error('stream ended without [DONE] / message_stop');
  return { events, cut: false };
}

async function oneRequest(srv, tally) {
  const req = makeRequest(srv.model);
  const bad = rand() < 0.05;
  const cut = req.stream && !bad && rand() < 0.3;
  const controller = new AbortController();
  const t0 = performance.now();
  ++tally.requests;
  let res;
  try {
    res = await fetch(srv.url + req.path, {
      method: 'POST', headers: { 'Content-Type': 'application/json', 'x-api-key': 'unused' },
      body: bad ? malformed(req) : JSON.stringify(req.body), signal: controller.signal,
    });
  } catch (e) {
    tally.error('connection', String(e));
    return;
  }
  if (bad) {
    ++tally.malformed;
    const body = await res.text();
    if (res.status < 400 || res.status >= 500) tally.error(`malformed->${res.status}`, body.slice(0, 200));
    else if (!JSON.parse(body).error && !JSON.parse(body).type) tally.error('malformed-no-error-object', body.slice(0, 200));
    return;
  }
  if (res.status === 503) {
    ++tally.overload;
    if (!res.headers.get('retry-after')) tally.error('503-without-retry-after', '');
    await res.text();
    return;
  }
  if (res.status !== 200) {
    tally.error(`status-${res.status}`, `${req.kind}: ${(await res.text()).slice(0, 300)}`);
    return;
  }
  try {
    if (req.stream) {
      const r = await readSse(res, t0, tally, cut ? 1 + Math.floor(rand() * 6) : 0, controller);
      if (r.cut) ++tally.disconnects;
    } else {
      const j = await res.json();
      if (!j.usage) throw new Error('reply without usage: ' + JSON.stringify(j).slice(0, 200));
      tally.ttft.push(performance.now() - t0);
      tally.tokens += j.usage.completion_tokens ?? j.usage.output_tokens ?? 0;
    }
    ++tally.ok;
  } catch (e) {
    tally.error('bad-reply', `${req.kind}: ${String(e).slice(0, 300)}`);
  }
}

async function client(srv, tally, until) {
  while (performance.now() < until) await oneRequest(srv, tally);
}

async function stats(url) {
  const r = await fetch(url + '/v1/stats');
  return r.json();
}

async function main() {
  const servers = [
    await startServer('demo', ['--threads', '1', '--chat-template', template, '--max-running-requests', '8',
      '--max-waiting-requests', '4']),
    await startServer('qwen3_moe fixture', ['--model', fixture, '--threads', '1', '--chat-template', template,
      '--kv-tokens', '16384', '--max-running-requests', '8', '--max-waiting-requests', '4']),
  ];
  for (const s of servers) s.model = (await (await fetch(s.url + '/v1/models')).json()).data[0].id;
  const tallies = servers.map((s) => new Tally(s.name));
  const start = performance.now(), until = start + durationMs;
  const rss = servers.map(() => ({ warm: NaN, end: NaN, max: 0 }));
  const sampler = setInterval(() => {
    servers.forEach((s, i) => {
      const v = rssMiB(s.proc.pid);
      rss[i].max = Math.max(rss[i].max, v);
      if (Number.isNaN(rss[i].warm) && performance.now() - start >= 0.2 * durationMs) rss[i].warm = v;
    });
  }, 1000);
  await Promise.all(Array.from({ length: nClients }, (_, k) => client(servers[k % servers.length], tallies[k % servers.length], until)));
  clearInterval(sampler);

  let failed = false;
  const fail = (msg) => { failed = true; console.log('FAIL ' + msg); };
  for (const [i, s] of servers.entries()) {
    let st;
    for (let k = 0; k < 100; ++k) {  // drain: cut streams finish at their next step
      st = await stats(s.url);
      if (st.requests.running === 0 && st.requests.waiting === 0 && st.kv.pages_used === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    rss[i].end = rssMiB(s.proc.pid);
    if (s.proc.exitCode !== null) fail(`${s.name}: the server exited (${s.proc.exitCode})`);
    if (st.requests.running !== 0 || st.requests.waiting !== 0) fail(`${s.name}: ${st.requests.running} running, ${st.requests.waiting} waiting after the drain`);
    if (st.kv.pages_used !== 0) fail(`${s.name}: ${st.kv.pages_used} KV pages still used after the drain`);
    if ((st.kv.state_slots_used ?? 0) !== 0) fail(`${s.name}: ${st.kv.state_slots_used} state slots still held`);
    const t = tallies[i];
    const unexpected = Object.values(t.errors).reduce((a, b) => a + b, 0);
    if (unexpected) fail(`${s.name}: ${unexpected} unexpected replies: ${JSON.stringify(t.errors)}\n  ${t.failures.join('\n  ')}`);
    if (t.ok === 0) fail(`${s.name}: no request succeeded`);
    const growth = rss[i].end - rss[i].warm;
    if (!(growth < rssBoundMiB)) fail(`${s.name}: RSS grew ${growth.toFixed(1)} MiB after warm-up (bound ${rssBoundMiB} MiB)`);
  }
  const f = (x) => (Number.isNaN(x) ? '-' : x.toFixed(1));
  console.log(`\nsoak: ${minutes} min, ${nClients} clients (${nClients / servers.length} a server), seed ${process.env.SOAK_SEED ?? 1919}`);
  console.log('| server | requests | ok | tokens | malformed (4xx) | disconnects | 503 | unexpected | TTFT p50 / p99 ms | ITL p50 / p99 ms | RSS warm -> end (max) MiB |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|');
  tallies.forEach((t, i) => {
    const unexpected = Object.values(t.errors).reduce((a, b) => a + b, 0);
    console.log(`| ${t.name} | ${t.requests} | ${t.ok} | ${t.tokens} | ${t.malformed} | ${t.disconnects} | ${t.overload} | ${unexpected} | ` +
      `${f(percentile(t.ttft, 0.5))} / ${f(percentile(t.ttft, 0.99))} | ${f(percentile(t.itl, 0.5))} / ${f(percentile(t.itl, 0.99))} | ` +
      `${f(rss[i].warm)} -> ${f(rss[i].end)} (${f(rss[i].max)}) |`);
  });
  for (const s of servers) s.proc.kill('SIGTERM');
  const exits = await Promise.all(servers.map((s) => new Promise((r) => (s.proc.exitCode !== null ? r(s.proc.exitCode) : s.proc.on('exit', r)))));
  exits.forEach((code, i) => { if (code !== 0) fail(`${servers[i].name}: exit code ${code} after SIGTERM`); });
  console.log(failed ? 'soak: FAILED' : 'soak: passed');
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
