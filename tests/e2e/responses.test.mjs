// End-to-end tests of /v1/responses with the official OpenAI client's Responses API (client.responses:
// create, stream, retrieve, delete), started by tests/e2e/e2e_test.cpp against `ft serve` on the
// qwen3_moe fixture (random weights, the Qwen3 template). The fixture's text is noise and it calls no
// tools on its own, so the tools loop is checked on its request side: function_call and
// function_call_output items reach the template as the chat route's tool_calls and tool messages do
// (the same prompt tokens); the reply side of calls is covered by tests/server/responses_test.cpp
// with a scripted model.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const URL_MAIN = process.env.FT_E2E_URL;
const KEY = process.env.FT_E2E_KEY;
const MODEL = process.env.FT_E2E_MODEL;
if (!URL_MAIN || !KEY || !MODEL) {
  throw new Error('run through ctest (test_e2e): FT_E2E_URL, FT_E2E_KEY, FT_E2E_MODEL are not set');
}

const client = new OpenAI({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });

const req = (input, extra = {}) => ({ model: MODEL, input, temperature: 0, max_output_tokens: 16, ...extra });

/** prompt_tokens of the same conversation sent to /v1/chat/completions. */
async function chatPromptTokens(messages, extra = {}) {
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 1, temperature: 0, ...extra });
  return r.usage.prompt_tokens;
}

function checkUsage(u) {
  assert.ok(u.input_tokens > 5);
  assert.ok(u.output_tokens >= 1 && u.output_tokens <= 16);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  assert.equal(typeof u.input_tokens_details.cached_tokens, 'number');
  assert.equal(u.output_tokens_details.reasoning_tokens, 0);
}

test('responses: create with a string input', async () => {
  const r = await client.responses.create(req('Tell me about the sea.', { instructions: 'Answer in one line.' }));
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, 'response');
  assert.equal(r.model, MODEL);
  assert.ok(['completed', 'incomplete'].includes(r.status));
  if (r.status === 'incomplete') {
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.usage.output_tokens, 16);
  }
  assert.equal(r.instructions, 'Answer in one line.');
  assert.equal(r.max_output_tokens, 16);
  assert.equal(r.store, true);
  assert.equal(r.error, null);
  const msg = r.output.find((o) => o.type === 'message');
  assert.equal(msg.role, 'assistant');
  assert.match(msg.id, /^msg_/);
  assert.equal(msg.content[0].type, 'output_text');
  assert.equal(r.output_text, msg.content[0].text);  // the SDK's convenience, from the output items
  checkUsage(r.usage);
  // The same conversation through chat: the same prompt.
  assert.equal(r.usage.input_tokens, await chatPromptTokens([
    { role: 'system', content: 'Answer in one line.' }, { role: 'user', content: 'Tell me about the sea.' }]));
});

test('responses: streaming events, deltas joined equal the final text and the unstreamed reply', async () => {
  const body = req('Count the waves.', { max_output_tokens: 24 });
  const whole = await client.responses.create(body);
  const stream = client.responses.stream(body);
  const types = [];
  let deltas = '', seq = -1, last = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.response) last = ev.response;
    assert.ok(ev.sequence_number > seq, `sequence_number ${ev.sequence_number} after ${seq}`);
    seq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
  }
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)), types.at(-1));
  for (const t of ['response.output_item.added', 'response.content_part.added', 'response.output_text.done',
    'response.content_part.done', 'response.output_item.done']) assert.ok(types.includes(t), t);
  // output_text is the SDK's (create and retrieve add it; a stream's final response is the wire object)
  const finalText = final.output.filter((o) => o.type === 'message').map((o) => o.content[0].text).join('');
  assert.equal(finalText, deltas);
  assert.equal(deltas, whole.output_text);
  // The last event's response (the SDK keeps its snapshot for response.incomplete, as it is built).
  assert.equal(last.status, whole.status);
  assert.equal(last.usage.input_tokens, whole.usage.input_tokens);
  assert.equal(last.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(last.output.at(-1).content[0].text, whole.output_text);

  // create({stream: true}): the raw events.
  const raw = await client.responses.create({ ...body, stream: true });
  let text = '', done = null;
  for await (const ev of raw) {
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.output_text.done') done = ev.text;
  }
  assert.equal(text, whole.output_text);
  assert.equal(done, text);
});

test('responses: a tools loop, function_call and function_call_output items reach the template', async () => {
  const tools = [{ type: 'function', name: 'get_weather', description: 'Weather of a city', strict: true,
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false } }];
  // The fixture's template (plain ChatML) does not render tools, so a request for the model to use them
  // is refused, naming them; with tool_choice "none" the tools are only echoed and the loop's items checked.
  await assert.rejects(client.responses.create(req('What is the weather in Paris?', { tools })),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools');
  const first = await client.responses.create(req('What is the weather in Paris?', { tools, tool_choice: 'none' }));
  assert.deepEqual(first.tools, tools);
  assert.equal(first.tool_choice, 'none');
  for (const item of first.output.filter((o) => o.type === 'function_call')) {
    assert.match(item.call_id, /^call_/);
    assert.equal(typeof item.arguments, 'string');
  }
  // The client runs the call and sends its output after the model's turn, as an agent loop does.
  const input = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { type: 'function_call_output', call_id: 'call_1', output: '{"temp_c": 18}' },
  ];
  const second = await client.responses.create(req(input, { tools, tool_choice: 'none' }));
  assert.ok(['completed', 'incomplete'].includes(second.status));
  const chatTools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: tools[0].parameters, strict: true } }];  // in the order the server builds it
  assert.equal(second.usage.input_tokens, await chatPromptTokens([
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 18}' }], { tools: chatTools, tool_choice: 'none' }));
  // A hosted tool is refused, naming it.
  await assert.rejects(client.responses.create(req('x', { tools: [{ type: 'web_search' }] })),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0].type');
});

test('responses: previous_response_id continues a stored conversation', async () => {
  const r1 = await client.responses.create(req('My name is Ada.'));
  const r2 = await client.responses.create(req('What is my name?', { previous_response_id: r1.id }));
  assert.equal(r2.previous_response_id, r1.id);
  assert.equal(r2.usage.input_tokens, await chatPromptTokens([
    { role: 'user', content: 'My name is Ada.' }, { role: 'assistant', content: r1.output_text },
    { role: 'user', content: 'What is my name?' }]));
  await assert.rejects(client.responses.create(req('x', { previous_response_id: 'resp_unknown' })),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
});

test('responses: retrieve and delete', async () => {
  const r = await client.responses.create(req('Remember this.', { metadata: { run: 'e2e' } }));
  const got = await client.responses.retrieve(r.id);
  assert.deepEqual(got, r);
  assert.deepEqual(got.metadata, { run: 'e2e' });
  await client.responses.delete(r.id);
  await assert.rejects(client.responses.retrieve(r.id), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.responses.delete(r.id), (e) => e instanceof OpenAI.NotFoundError);
  const unstored = await client.responses.create(req('Forget this.', { store: false }));
  await assert.rejects(client.responses.retrieve(unstored.id), (e) => e instanceof OpenAI.NotFoundError);
});
