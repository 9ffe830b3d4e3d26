// End-to-end tests of `ft serve` with the Vercel AI SDK (`ai` + `@ai-sdk/openai`), the way its docs
// start: createOpenAI({baseURL, apiKey}) and the default provider `openai(model)`, which in this SDK
// version talks to the Responses API (POST /v1/responses: checked below from the requests it makes).
// `openai.chat(model)` is the Chat Completions model. Started by tests/e2e/e2e_test.cpp against the
// qwen3_moe fixture (random weights: the text is noise, so replies are compared with each other and
// with the official `openai` client's, and objects are checked against their zod schema).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText, generateObject, streamObject, Output } from 'ai';
import OpenAI from 'openai';
import { z } from 'zod';

const URL_MAIN = process.env.FT_E2E_URL;
const KEY = process.env.FT_E2E_KEY;
const MODEL = process.env.FT_E2E_MODEL;
if (!URL_MAIN || !KEY || !MODEL) {
  throw new Error('run through ctest (test_e2e): FT_E2E_URL, FT_E2E_KEY, FT_E2E_MODEL are not set');
}

/** Requests the SDK sent: {method, path, body}. */
const sent = [];
const recordingFetch = async (url, init) => {
  sent.push({ method: init?.method ?? 'GET', path: new URL(url).pathname, body: init?.body ? JSON.parse(init.body) : null });
  return fetch(url, init);
};
globalThis.AI_SDK_LOG_WARNINGS = false;  // the seed warning is asserted below, not printed
const openai = createOpenAI({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY, fetch: recordingFetch });
const client = new OpenAI({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });

const lastSent = () => sent.at(-1);
async function textOfStream(result) {
  let text = '';
  for await (const part of result.textStream) text += part;
  return text;
}

test('ai sdk: openai(model) uses the Responses API; generateText and streamText give the same text', async () => {
  const settings = { model: openai(MODEL), prompt: 'Tell me about the sea.', temperature: 0, maxOutputTokens: 24, maxRetries: 0 };
  const whole = await generateText(settings);
  assert.equal(lastSent().method, 'POST');
  assert.equal(lastSent().path, '/v1/responses');
  assert.equal(lastSent().body.model, MODEL);
  assert.equal(lastSent().body.max_output_tokens, 24);
  assert.ok(whole.text.length > 0, 'no text came back');
  assert.ok(['stop', 'length'].includes(whole.finishReason), whole.finishReason);
  assert.ok(whole.usage.inputTokens > 5);
  assert.ok(whole.usage.outputTokens >= 1 && whole.usage.outputTokens <= 24);
  assert.match(whole.response.id, /^resp_/);
  // The official client's create with the same input: the same greedy text and token counts.
  const direct = await client.responses.create({ model: MODEL, input: [{ role: 'user', content: 'Tell me about the sea.' }],
    temperature: 0, max_output_tokens: 24 });
  assert.equal(whole.text, direct.output_text);
  assert.equal(whole.usage.inputTokens, direct.usage.input_tokens);
  assert.equal(whole.usage.outputTokens, direct.usage.output_tokens);

  const streamed = streamText(settings);
  const text = await textOfStream(streamed);
  assert.equal(lastSent().path, '/v1/responses');
  assert.equal(lastSent().body.stream, true);
  assert.equal(text, whole.text);
  assert.equal(await streamed.finishReason, whole.finishReason);
  assert.deepEqual((await streamed.usage).outputTokens, whole.usage.outputTokens);

  // The Responses API has no seed: the SDK drops it with a warning rather than send it.
  const seeded = await generateText({ ...settings, seed: 5 });
  assert.ok(seeded.warnings.some((w) => w.feature === 'seed'), JSON.stringify(seeded.warnings));
  assert.equal(lastSent().body.seed, undefined);
});

test('ai sdk: openai.chat(model) with a seed at temperature 1, streamed and not, the same text', async () => {
  for (const seed of [1, 2, 3]) {
    const settings = { model: openai.chat(MODEL), system: 'You are terse.', prompt: 'Count the waves.', temperature: 1,
      seed, maxOutputTokens: 32, maxRetries: 0 };
    const whole = await generateText(settings);
    assert.equal(lastSent().path, '/v1/chat/completions');
    assert.equal(lastSent().body.seed, seed);
    const streamed = streamText(settings);
    const text = await textOfStream(streamed);
    assert.equal(lastSent().path, '/v1/chat/completions');
    assert.equal(text, whole.text, `seed ${seed}`);
    assert.equal(await streamed.finishReason, whole.finishReason);
  }
});

const Recipe = z.object({
  title: z.string().max(12),
  servings: z.number().int().min(1).max(8),
  vegetarian: z.boolean(),
  difficulty: z.enum(['easy', 'medium', 'hard']),
  ingredients: z.array(z.object({ name: z.string().max(8), grams: z.number().int().min(1).max(500) })).min(1).max(3),
  note: z.string().max(10).nullable(),
});

test('ai sdk: generateObject and streamObject with a zod schema (structured outputs) on both endpoints', async () => {
  for (const [model, path] of [[openai(MODEL), '/v1/responses'], [openai.chat(MODEL), '/v1/chat/completions']]) {
    for (let i = 0; i < 3; i++) {
      const r = await generateObject({ model, schema: Recipe, schemaName: 'recipe', prompt: 'A recipe.', temperature: 1,
        maxOutputTokens: 300, maxRetries: 0 });
      assert.equal(lastSent().path, path);
      const body = lastSent().body;
      const format = path === '/v1/responses' ? body.text.format : body.response_format;
      assert.equal(format.type, 'json_schema', JSON.stringify(format));
      assert.deepEqual(r.object, Recipe.parse(r.object));  // generateObject also validated it (it throws if not)
      assert.ok(r.object.ingredients.length >= 1 && r.object.ingredients.length <= 3);
    }
    const s = streamObject({ model, schema: Recipe, prompt: 'A recipe.', temperature: 1, maxOutputTokens: 300, maxRetries: 0 });
    let partials = 0, last;
    for await (const p of s.partialObjectStream) {
      partials++;
      last = p;
    }
    const obj = await s.object;
    assert.equal(lastSent().path, path);
    // The server sends the text decoded since its last write in one delta, so on a busy machine a short
    // object may arrive whole: one partial is legal, and the last one is the object.
    assert.ok(partials >= 1, `${partials} partial objects`);
    assert.deepEqual(last, obj);
    assert.deepEqual(obj, Recipe.parse(obj));
  }
});

test('ai sdk: generateText with Output.object', async () => {
  const r = await generateText({ model: openai(MODEL), output: Output.object({ schema: Recipe }), prompt: 'A recipe.',
    temperature: 1, maxOutputTokens: 300, maxRetries: 0 });
  assert.equal(lastSent().path, '/v1/responses');
  assert.deepEqual(r.output, Recipe.parse(JSON.parse(r.text)));
});
