// End-to-end tests of Anthropic extended thinking (`thinking: {type: "enabled", budget_tokens}`) with
// the official @anthropic-ai/sdk client against the thinking server of tests/e2e/e2e_test.cpp: the
// built-in demo model (a 4096-token context, room for Anthropic's budget_tokens >= 1024 < max_tokens)
// with tests/e2e/thinking_template.jinja, a ChatML template whose generation prompt opens a <think>
// block unless enable_thinking is false, as Qwen3.5's and DeepSeek-R1's do. Its reply therefore starts
// in the reasoning, which the server returns as a thinking block. The weights are random: the model
// never writes </think>, so a reply is one thinking block (a thinking block followed by a text block is
// covered by tests/server/anthropic_messages_test.cpp with a scripted model). The server runs with
// --seed, so requests without a seed sample alike and a streamed reply can be compared with a whole one.
//   FT_E2E_THINK_URL    the thinking server (no key)
//   FT_E2E_THINK_MODEL  its model name
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const URL_THINK = process.env.FT_E2E_THINK_URL;
const MODEL = process.env.FT_E2E_THINK_MODEL;
if (!URL_THINK || !MODEL) {
  throw new Error('run through ctest (test_e2e): FT_E2E_THINK_URL, FT_E2E_THINK_MODEL are not set');
}

const client = new Anthropic({ baseURL: URL_THINK, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const openai = new OpenAI({ baseURL: `${URL_THINK}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const THINKING = { type: 'enabled', budget_tokens: 1024 };
const ask = (content, extra = {}) => ({
  model: MODEL, max_tokens: 1100, thinking: THINKING, messages: [{ role: 'user', content }], ...extra,
});

/** The events of a raw stream, checked for Anthropic's grammar: message_start, then for each block
 *  content_block_start, deltas of its kind, content_block_stop (indices 0, 1, ... in order), then
 *  message_delta and message_stop; ping may come anywhere after message_start. Returns the blocks
 *  rebuilt from the deltas and the message_delta. */
function checkEventSequence(events) {
  const types = events.map((e) => e.type).filter((t) => t !== 'ping');
  assert.equal(types[0], 'message_start');
  assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
  const blocks = [];
  let open = null;
  for (const ev of events.slice(1, -2)) {
    if (ev.type === 'ping') continue;
    if (ev.type === 'content_block_start') {
      assert.equal(open, null, 'a block started before the last one stopped');
      assert.equal(ev.index, blocks.length);
      open = { ...ev.content_block, deltas: [] };
      blocks.push(open);
    } else if (ev.type === 'content_block_delta') {
      assert.ok(open, 'a delta outside a block');
      assert.equal(ev.index, blocks.length - 1);
      open.deltas.push(ev.delta);
      if (open.type === 'thinking') {
        assert.ok(['thinking_delta', 'signature_delta'].includes(ev.delta.type), ev.delta.type);
        if (ev.delta.type === 'thinking_delta') open.thinking += ev.delta.thinking;
        else open.signature += ev.delta.signature;
      } else if (open.type === 'text') {
        assert.equal(ev.delta.type, 'text_delta');
        open.text += ev.delta.text;
      }
    } else if (ev.type === 'content_block_stop') {
      assert.ok(open, 'a stop outside a block');
      assert.equal(ev.index, blocks.length - 1);
      open = null;
    } else {
      assert.fail(`unexpected event ${ev.type} between message_start and message_delta`);
    }
  }
  assert.equal(open, null, 'a block never stopped');
  return { start: events[0], blocks, delta: events.at(-2) };
}

test('thinking: a streamed thinking block is well-formed and equals the unstreamed reply', async () => {
  const body = ask('Why is the sea salty?');
  const whole = await client.messages.create(body);
  assert.ok(['end_turn', 'max_tokens'].includes(whole.stop_reason), whole.stop_reason);
  assert.equal(whole.content[0].type, 'thinking');
  assert.ok(whole.content[0].thinking.length > 0);
  assert.equal(typeof whole.content[0].signature, 'string');
  assert.ok(whole.usage.output_tokens >= 1 && whole.usage.output_tokens <= 1100);

  // The raw events.
  const raw = await client.messages.create({ ...body, stream: true });
  const events = [];
  for await (const ev of raw) events.push(ev);
  const { start, blocks, delta } = checkEventSequence(events);
  assert.equal(start.message.model, MODEL);
  assert.deepEqual(start.message.content, []);
  assert.equal(blocks[0].type, 'thinking');
  assert.equal(blocks[0].deltas[0].type, 'thinking_delta');
  assert.equal(blocks[0].thinking, whole.content[0].thinking);
  assert.equal(blocks.length, whole.content.length);
  assert.equal(delta.delta.stop_reason, whole.stop_reason);
  assert.equal(delta.usage.output_tokens, whole.usage.output_tokens);

  // The SDK's MessageStream: its thinking events and final message.
  const stream = client.messages.stream(body);
  let thinking = '';
  stream.on('thinking', (d) => { thinking += d; });
  const final = await stream.finalMessage();
  assert.equal(thinking, whole.content[0].thinking);
  assert.deepEqual(final.content, whole.content);
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
});

test('thinking: the OpenAI route gives the same reasoning as reasoning_content', async () => {
  const m = await client.messages.create(ask('Think about rivers.'));
  const c = await openai.chat.completions.create({ model: MODEL, max_tokens: 1100,
    messages: [{ role: 'user', content: 'Think about rivers.' }], chat_template_kwargs: { enable_thinking: true } });
  assert.equal(c.usage.prompt_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
  assert.equal(c.choices[0].message.reasoning_content, m.content[0].thinking);
  assert.equal(c.choices[0].message.content ?? '', m.content.filter((b) => b.type === 'text').map((b) => b.text).join(''));
});

test('thinking: disabled closes the block in the prompt and the reply is text', async () => {
  const messages = [{ role: 'user', content: 'Why is the sea salty?' }];
  const on = await client.messages.countTokens({ model: MODEL, messages, thinking: THINKING });
  const off = await client.messages.countTokens({ model: MODEL, messages, thinking: { type: 'disabled' } });
  // The demo vocabulary is bytes: "\n</think>\n\n" after the open "<think>\n" is 11 more tokens.
  assert.equal(off.input_tokens - on.input_tokens, '\n</think>\n\n'.length);
  const m = await client.messages.create(ask('Why is the sea salty?', { max_tokens: 64, thinking: { type: 'disabled' } }));
  assert.ok(m.content.every((b) => b.type === 'text'), JSON.stringify(m.content));
  const raw = await client.messages.create(ask('Why is the sea salty?', { max_tokens: 64, thinking: { type: 'disabled' }, stream: true }));
  const events = [];
  for await (const ev of raw) events.push(ev);
  const { blocks } = checkEventSequence(events);
  assert.ok(blocks.every((b) => b.type === 'text'));
  assert.equal(blocks.map((b) => b.text).join(''), m.content.map((b) => b.text).join(''));
});

test('thinking: a reply sent back with its thinking block continues the conversation', async () => {
  const first = await client.messages.create(ask('Name a sea.', { max_tokens: 1100 }));
  const next = {
    model: MODEL, max_tokens: 1100, thinking: THINKING,
    messages: [{ role: 'user', content: 'Name a sea.' }, { role: 'assistant', content: first.content },
      { role: 'user', content: 'And another?' }],
  };
  const second = await client.messages.create(next);
  assert.equal(second.content[0].type, 'thinking');
  const counted = await client.messages.countTokens({ model: MODEL, messages: next.messages, thinking: THINKING });
  assert.equal(counted.input_tokens, second.usage.input_tokens + second.usage.cache_read_input_tokens);
});

test('thinking: budget_tokens is checked as Anthropic checks it', async () => {
  const bad = async (extra, param) => {
    await assert.rejects(client.messages.create(ask('x', extra)), (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError, `${e.constructor.name}: ${e.message}`);
      assert.equal(e.error.error.type, 'invalid_request_error');
      assert.ok(e.error.error.message.includes(param), e.error.error.message);
      return true;
    });
  };
  await bad({ thinking: { type: 'enabled', budget_tokens: 1000 } }, 'budget_tokens');
  await bad({ max_tokens: 1024, thinking: { type: 'enabled', budget_tokens: 1024 } }, 'max_tokens');
  await bad({ thinking: { type: 'sometimes' } }, 'thinking.type');
});
