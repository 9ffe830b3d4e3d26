// End-to-end tests of `ft serve` with the official OpenAI client and with curl. Started by
// tests/e2e/e2e_test.cpp (ctest: test_e2e), which launches two servers on the qwen3_moe fixture:
//   FT_E2E_URL        main server: --api-key FT_E2E_KEY, --max-body-mb 1, --max-running-requests 8
//   FT_E2E_SMALL_URL  small server: no key, --max-running-requests 1 --max-waiting-requests 0
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';

const URL_MAIN = process.env.FT_E2E_URL;
const URL_SMALL = process.env.FT_E2E_SMALL_URL;
const KEY = process.env.FT_E2E_KEY;
const MODEL = process.env.FT_E2E_MODEL;
if (!URL_MAIN || !URL_SMALL || !KEY || !MODEL) {
  throw new Error('run through ctest (test_e2e): FT_E2E_URL, FT_E2E_SMALL_URL, FT_E2E_KEY, FT_E2E_MODEL are not set');
}

const client = new OpenAI({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
const small = new OpenAI({ baseURL: `${URL_SMALL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

/** curl; returns { status, body, headers }. `args` are extra curl arguments. */
function curl(url, args = [], input = undefined) {
  const out = execFileSync('curl', ['-sS', '-i', '--max-time', '30', ...args, url], {
    input, maxBuffer: 64 << 20, encoding: 'latin1',
  });
  const sep = out.lastIndexOf('\r\nHTTP/') >= 0 ? out.lastIndexOf('HTTP/') : 0;  // skip "100 Continue"
  const resp = out.slice(sep);
  const end = resp.indexOf('\r\n\r\n');
  const head = resp.slice(0, end);
  const status = Number(head.split(' ')[1]);
  return { status, headers: head.toLowerCase(), body: Buffer.from(resp.slice(end + 4), 'latin1').toString('utf8') };
}
const auth = ['-H', `Authorization: Bearer ${KEY}`];
const jsonPost = () => ['-H', 'Content-Type: application/json', '--data-binary', '@-'];

async function stats(url = URL_MAIN) {
  const r = await fetch(`${url}/v1/stats`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(r.status, 200);
  return r.json();
}

const chat = (content, extra = {}) => ({
  model: MODEL, messages: [{ role: 'user', content }], temperature: 0, max_tokens: 24, ...extra,
});

async function streamChat(c, body, { abortAfter = 0 } = {}) {
  const stream = await c.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0, role = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.model, MODEL);
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
    if (abortAfter && ++chunks >= abortAfter) {
      stream.controller.abort();
      break;
    }
  }
  return { text, finish, usage, role };
}

test('models: list, retrieve, unknown id, trailing slash', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [MODEL]);
  const m = await client.models.retrieve(MODEL);
  assert.equal(m.id, MODEL);
  assert.equal(m.object, 'model');
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  assert.equal(curl(`${URL_MAIN}/v1/models/`, auth).status, 200);
  assert.equal(curl(`${URL_MAIN}/v1/models/${MODEL}/`, auth).status, 200);
});

test('chat: non-streaming response, usage, and streaming gives the same text', async () => {
  const body = chat('Tell me about the sea.', { max_tokens: 40 });
  const r = await client.chat.completions.create(body);
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  const u = r.usage;
  assert.ok(u.prompt_tokens > 5);
  assert.ok(u.completion_tokens >= 1 && u.completion_tokens <= 40);
  if (c.finish_reason === 'length') assert.equal(u.completion_tokens, 40);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.equal(typeof u.prompt_tokens_details.cached_tokens, 'number');

  const s = await streamChat(client, body);
  assert.equal(s.role, 'assistant');
  assert.equal(s.text, c.message.content);
  assert.equal(s.finish, c.finish_reason);
  assert.equal(s.usage.completion_tokens, u.completion_tokens);
  assert.equal(s.usage.prompt_tokens, u.prompt_tokens);
});

test('chat: logprobs, top_logprobs, seed, stop strings', async () => {
  const r = await client.chat.completions.create(chat('Count with me.', { max_tokens: 20, ignore_eos: true, logprobs: true, top_logprobs: 3 }));
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 20);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.top_logprobs[0].logprob >= t.logprob - 1e-6);
  }
  assert.equal(r.usage.completion_tokens, 20);
  // Sampled with a seed: the same request twice gives the same text.
  const sampled = chat('Pick words.', { temperature: 0.9, top_p: 0.95, top_k: 50, seed: 1234, max_tokens: 24 });
  const a = await client.chat.completions.create(sampled);
  const b = await client.chat.completions.create(sampled);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  // Stop at a piece of the greedy text: the output ends right before it.
  const text = r.choices[0].message.content;
  const stop = [...text].slice(6, 8).join('');
  assert.ok(stop.length > 0);
  const st = await client.chat.completions.create(chat('Count with me.', { max_tokens: 20, ignore_eos: true, stop: [stop, 'zzzz-never'] }));
  assert.equal(st.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  assert.equal(st.choices[0].finish_reason, 'stop');
});

test('chat: n choices, whole and streamed, each the seed + i request', async () => {
  const body = chat('Pick words.', { temperature: 0.9, seed: 77, max_tokens: 16, n: 3 });
  const r = await client.chat.completions.create(body);
  assert.equal(r.choices.length, 3);
  let completion = 0;
  for (const [i, ch] of r.choices.entries()) {
    assert.equal(ch.index, i);
    const one = await client.chat.completions.create({ ...body, n: 1, seed: 77 + i });
    assert.equal(ch.message.content, one.choices[0].message.content);
    completion += one.usage.completion_tokens;
  }
  assert.equal(r.usage.completion_tokens, completion);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const text = ['', '', ''];
  let usage = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) text[ch.index] += ch.delta.content ?? '';
  }
  assert.deepEqual(text, r.choices.map((c) => c.message.content));
  assert.equal(usage.completion_tokens, completion);
});

test('completions: string, token ids, echo, streaming, logprobs', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'The cat sat on', max_tokens: 16, temperature: 0, ignore_eos: true });
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.completion_tokens, 16);
  const text = r.choices[0].text;
  const e = await client.completions.create({ model: MODEL, prompt: 'The cat sat on', max_tokens: 16, temperature: 0, ignore_eos: true, echo: true });
  assert.equal(e.choices[0].text, 'The cat sat on' + text);
  const stream = await client.completions.create({ model: MODEL, prompt: 'The cat sat on', max_tokens: 16, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  let streamed = '', usage = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) streamed += c.text;
  }
  assert.equal(streamed, text);
  assert.equal(usage.completion_tokens, 16);
  const ids = await client.completions.create({ model: MODEL, prompt: [40, 41, 42, 43], max_tokens: 5, temperature: 0, logprobs: 2, ignore_eos: true });
  assert.equal(ids.usage.prompt_tokens, 4);
  assert.equal(ids.choices[0].logprobs.tokens.length, 5);
  assert.equal(ids.choices[0].logprobs.top_logprobs[0] && Object.keys(ids.choices[0].logprobs.top_logprobs[0]).length <= 2, true);
});

test('stats and metrics', async () => {
  const s = await stats();
  assert.equal(s.model, MODEL);
  assert.equal(s.context_limit, 1024);
  for (const k of ['pages_total', 'pages_used', 'pages_free', 'pages_cached', 'page_size']) assert.equal(typeof s.kv[k], 'number');
  for (const k of ['running', 'waiting', 'total', 'finished']) assert.equal(typeof s.requests[k], 'number');
  assert.ok(s.totals.generation_tokens > 0);
  assert.equal(typeof s.throughput.prompt_tokens_per_s, 'number');
  assert.equal(typeof s.throughput.generation_tokens_per_s, 'number');
  assert.equal(typeof s.mean_ttft_s, 'number');
  const m = curl(`${URL_MAIN}/metrics`, auth);
  assert.equal(m.status, 200);
  assert.match(m.headers, /content-type: text\/plain/);
  for (const name of ['freetoken_requests_running', 'freetoken_requests_waiting', 'freetoken_kv_pages_used', 'freetoken_kv_pages_total',
    'freetoken_generation_tokens_total', 'freetoken_prompt_tokens_per_second', 'freetoken_time_to_first_token_seconds_mean']) {
    assert.match(m.body, new RegExp(`^${name} [0-9.e+-]+$`, 'm'), name);
  }
  assert.match(m.body, new RegExp(`^freetoken_context_limit_tokens 1024$`, 'm'));
});

test('errors: OpenAI error bodies and statuses', async () => {
  const bad = async (body, status, code) => {
    await assert.rejects(client.chat.completions.create(body), (e) => {
      assert.equal(e.status, status, e.message);
      if (code) assert.equal(e.code, code);
      assert.equal(typeof e.error.message, 'string');
      assert.ok('param' in e.error && 'type' in e.error);
      return true;
    });
  };
  await bad(chat('x', { temperature: 'hot' }), 400);
  await bad(chat('x', { n: 0 }), 400);
  await bad({ model: MODEL, messages: 'hello' }, 400);
  await bad({ model: MODEL, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }] }] }, 400);
  await bad(chat('x', { max_tokens: 5000 }), 400, 'context_length_exceeded');
  await bad(chat('x', { model: 'gpt-4o' }), 404, 'model_not_found');
  await assert.rejects(client.completions.create({ model: MODEL, prompt: 'a '.repeat(1500), max_tokens: 4 }), (e) => e.status === 400 && e.code === 'context_length_exceeded');

  const malformed = curl(`${URL_MAIN}/v1/chat/completions`, [...auth, ...jsonPost()], '{"messages": [');
  assert.equal(malformed.status, 400);
  assert.equal(JSON.parse(malformed.body).error.type, 'invalid_request_error');
  const image = curl(`${URL_MAIN}/v1/chat/completions`, [...auth, ...jsonPost()],
    JSON.stringify({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }));
  assert.equal(image.status, 400);
  assert.match(JSON.parse(image.body).error.message, /text-only/);
  const big = curl(`${URL_MAIN}/v1/chat/completions`, [...auth, ...jsonPost()], 'x'.repeat(2 * 1024 * 1024));
  assert.equal(big.status, 413);
  assert.equal(JSON.parse(big.body).error.code, 'request_too_large');
  const route = curl(`${URL_MAIN}/v1/nope`, auth);
  assert.equal(route.status, 404);
  assert.ok(JSON.parse(route.body).error);
  assert.equal(curl(`${URL_MAIN}/health`).status, 200);
});

test('auth: no key 401, bad key 401, good key 200, /health open', async () => {
  for (const path of ['/v1/models', '/v1/stats', '/metrics']) {
    assert.equal(curl(`${URL_MAIN}${path}`).status, 401, path);
    assert.equal(curl(`${URL_MAIN}${path}`, ['-H', 'Authorization: Bearer wrong']).status, 401, path);
    assert.equal(curl(`${URL_MAIN}${path}`, auth).status, 200, path);
    assert.equal(curl(`${URL_MAIN}${path}`, ['-H', `x-api-key: ${KEY}`]).status, 200, path);
  }
  const noKey = curl(`${URL_MAIN}/v1/chat/completions`, jsonPost(), JSON.stringify(chat('x')));
  assert.equal(noKey.status, 401);
  assert.equal(JSON.parse(noKey.body).error.code, 'invalid_api_key');
  const wrong = new OpenAI({ baseURL: `${URL_MAIN}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.chat.completions.create(chat('x')), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  const h = curl(`${URL_MAIN}/health`);
  assert.equal(h.status, 200);
  assert.equal(JSON.parse(h.body).status, 'ok');
});

test('8 concurrent streaming requests equal the same requests run one at a time', async () => {
  const bodies = Array.from({ length: 8 }, (_, i) => chat(`Story ${i}: ` + 'once upon a time there was a fox. '.repeat(1 + 3 * i),
    { max_tokens: 10 + 9 * i, ignore_eos: i % 2 === 0 }));
  const together = await Promise.all(bodies.map((b) => streamChat(client, b)));
  for (let i = 0; i < 8; ++i) {
    const alone = await client.chat.completions.create(bodies[i]);
    const t = together[i];
    assert.equal(t.text, alone.choices[0].message.content, `request ${i} text`);
    assert.equal(t.finish, alone.choices[0].finish_reason, `request ${i} finish`);
    assert.equal(t.usage.prompt_tokens, alone.usage.prompt_tokens, `request ${i} prompt tokens`);
    assert.equal(t.usage.completion_tokens, alone.usage.completion_tokens, `request ${i} completion tokens`);
    assert.equal(t.usage.total_tokens, t.usage.prompt_tokens + t.usage.completion_tokens);
    if (i % 2 === 0) assert.equal(t.usage.completion_tokens, bodies[i].max_tokens);
  }
});

test('a request sharing a 200-token prefix reuses >= 192 cached tokens with unchanged output', async () => {
  const system = 'You are a careful assistant for the harbour office of a small fishing town. ' +
    'Every morning you read the weather report, the list of boats that left before dawn, the tide table, ' +
    'and the notes the night watch wrote about nets, engines, and gulls. '.repeat(4) +
    'Answer in short plain sentences and never invent a boat that is not on the list.';
  const msgs = (q) => ({ model: MODEL, temperature: 0, max_tokens: 24,
    messages: [{ role: 'system', content: system }, { role: 'user', content: q }] });
  const first = await client.chat.completions.create(msgs('Which boats left today?'));
  assert.ok(first.usage.prompt_tokens >= 200, `the shared prefix is only ${first.usage.prompt_tokens} tokens`);
  const second = await client.chat.completions.create(msgs('What did the night watch write?'));
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= 192,
    `cached ${second.usage.prompt_tokens_details.cached_tokens} of ${second.usage.prompt_tokens}`);
  // The same request on the small server, whose cache never saw the prefix.
  const fresh = await small.chat.completions.create(msgs('What did the night watch write?'));
  assert.equal(fresh.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(second.choices[0].message.content, fresh.choices[0].message.content);
  assert.equal(second.usage.completion_tokens, fresh.usage.completion_tokens);
  const s = await stats();
  assert.ok(s.totals.cached_prompt_tokens >= 192);
});

test('a client disconnecting mid-stream is gone from /v1/stats within 1 s and its pages return', async () => {
  const idle = await stats();
  assert.equal(idle.requests.running, 0);
  const cancelledBefore = idle.requests.cancelled;
  await streamChat(client, chat('Keep talking.', { max_tokens: 990, ignore_eos: true }), { abortAfter: 2 });
  const t0 = Date.now();
  let s;
  for (;;) {
    s = await stats();
    if (s.requests.running === 0 && s.requests.waiting === 0 && s.kv.pages_used === idle.kv.pages_used) break;
    assert.ok(Date.now() - t0 < 1000, `still running after 1 s: ${JSON.stringify(s.requests)} pages ${s.kv.pages_used}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(s.requests.cancelled, cancelledBefore + 1);
  assert.ok(s.totals.generation_tokens - idle.totals.generation_tokens < 990);
});

test('overload beyond the waiting queue gives 503', async () => {
  const first = await small.chat.completions.create({ ...chat('Long one.', { max_tokens: 990, ignore_eos: true }), stream: true });
  const it = first[Symbol.asyncIterator]();
  await it.next();  // the first request is running now
  await assert.rejects(small.chat.completions.create(chat('Second.')), (e) => e.status === 503 && e.error.type === 'server_error');
  first.controller.abort();
  const ok = curl(`${URL_SMALL}/v1/models`);  // no --api-key on this server: open
  assert.equal(ok.status, 200);
});
