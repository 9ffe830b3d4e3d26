// End-to-end tests of `ft serve`'s Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) with
// the official Anthropic client (@anthropic-ai/sdk) and curl. Started by tests/e2e/e2e_test.cpp (ctest:
// test_e2e) together with serve.test.mjs, against the same servers:
//   FT_E2E_URL        main server: --api-key FT_E2E_KEY, --max-body-mb 1, --max-running-requests 8
//   FT_E2E_SMALL_URL  small server: no key, --max-running-requests 1 --max-waiting-requests 0
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const URL_MAIN = process.env.FT_E2E_URL;
const KEY = process.env.FT_E2E_KEY;
const MODEL = process.env.FT_E2E_MODEL;
if (!URL_MAIN || !KEY || !MODEL) {
  throw new Error('run through ctest (test_e2e): FT_E2E_URL, FT_E2E_KEY, FT_E2E_MODEL are not set');
}

// The Anthropic client appends /v1/messages to the base URL; it sends the key as x-api-key.
const client = new Anthropic({ baseURL: URL_MAIN, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
const openai = new OpenAI({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });

const ask = (content, extra = {}) => ({
  model: MODEL, max_tokens: 24, temperature: 0, messages: [{ role: 'user', content }], ...extra,
});
const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

test('messages.create: message shape and usage, the same reply as chat completions', async () => {
  const body = ask('Tell me about the sea.', { max_tokens: 40 });
  const m = await client.messages.create(body);
  assert.match(m.id, /^msg_/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, MODEL);
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
  assert.equal(m.stop_sequence, null);
  assert.ok(m.content.length <= 1);
  if (m.content.length) assert.equal(m.content[0].type, 'text');
  const u = m.usage;
  assert.ok(u.output_tokens >= 1 && u.output_tokens <= 40);
  if (m.stop_reason === 'max_tokens') assert.equal(u.output_tokens, 40);
  assert.equal(u.cache_creation_input_tokens, 0);
  const prompt = u.input_tokens + u.cache_read_input_tokens;
  assert.ok(prompt > 5);

  const oa = await openai.chat.completions.create(body);
  assert.equal(oa.usage.prompt_tokens, prompt);
  assert.equal(oa.usage.completion_tokens, u.output_tokens);
  assert.equal(oa.choices[0].message.content.trim() === '' ? '' : oa.choices[0].message.content, textOf(m));
  assert.equal(oa.choices[0].finish_reason, m.stop_reason === 'end_turn' ? 'stop' : 'length');

  const counted = await client.messages.countTokens({ model: MODEL, messages: body.messages });
  assert.equal(counted.input_tokens, prompt);
});

test('messages.stream: text deltas add up to the non-streaming reply; final message and usage', async () => {
  const body = ask('Write a line about rivers.', { max_tokens: 30, system: 'You are terse.' });
  const whole = await client.messages.create(body);
  const stream = client.messages.stream(body);
  let text = '';
  const types = [];
  stream.on('text', (t) => { text += t; });
  for await (const ev of stream) types.push(ev.type);
  const final = await stream.finalMessage();
  assert.equal(types[0], 'message_start');
  assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
  assert.equal(text, textOf(whole));
  assert.equal(textOf(final), textOf(whole));
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(final.usage.input_tokens + final.usage.cache_read_input_tokens,
    whole.usage.input_tokens + whole.usage.cache_read_input_tokens);

  // create({stream: true}): the raw events, no [DONE].
  const raw = await client.messages.create({ ...body, stream: true });
  let rawText = '';
  for await (const ev of raw) {
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') rawText += ev.delta.text;
  }
  assert.equal(rawText, text);
});

test('messages: stop_sequences end the reply with stop_reason stop_sequence', async () => {
  const first = await client.messages.create(ask('Count with me.', { max_tokens: 20 }));
  const text = textOf(first);
  const stop = [...text].slice(6, 8).join('');
  if (stop.length === 0) return;  // the random model ended at once: nothing to cut
  const cut = await client.messages.create(ask('Count with me.', { max_tokens: 20, stop_sequences: [stop, 'zzzz-never'] }));
  assert.equal(textOf(cut), text.slice(0, text.indexOf(stop)));
  assert.equal(cut.stop_reason, 'stop_sequence');
  assert.equal(cut.stop_sequence, stop);
});

test('messages: errors in Anthropic error bodies', async () => {
  const bad = async (promise, Cls, status, type) => {
    await assert.rejects(promise, (e) => {
      assert.ok(e instanceof Cls, `${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, status);
      assert.equal(e.error.type, 'error');
      assert.equal(e.error.error.type, type);
      assert.equal(typeof e.error.error.message, 'string');
      return true;
    });
  };
  await bad(client.messages.create(ask('x', { model: 'claude-sonnet-4-5' })), Anthropic.NotFoundError, 404, 'not_found_error');
  await bad(client.messages.create(ask('x', { max_tokens: 5000 })), Anthropic.BadRequestError, 400, 'invalid_request_error');
  await bad(client.messages.create(ask('x', { temperature: 3 })), Anthropic.BadRequestError, 400, 'invalid_request_error');
  await bad(client.messages.create({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] }),
  Anthropic.BadRequestError, 400, 'invalid_request_error');
  const wrongKey = new Anthropic({ baseURL: URL_MAIN, apiKey: 'wrong', maxRetries: 0 });
  await bad(wrongKey.messages.create(ask('x')), Anthropic.AuthenticationError, 401, 'authentication_error');
  await bad(wrongKey.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }),
    Anthropic.AuthenticationError, 401, 'authentication_error');

  const big = execFileSync('curl', ['-sS', '--max-time', '30', '-H', `x-api-key: ${KEY}`, '-H', 'Content-Type: application/json',
    '--data-binary', '@-', '-w', '\n%{http_code}', `${URL_MAIN}/v1/messages`], { input: 'x'.repeat(2 * 1024 * 1024), encoding: 'utf8' });
  const [bigBody, bigStatus] = [big.slice(0, big.lastIndexOf('\n')), big.slice(big.lastIndexOf('\n') + 1)];
  assert.equal(bigStatus, '413');
  assert.deepEqual(JSON.parse(bigBody).error.type, 'request_too_large');
});
