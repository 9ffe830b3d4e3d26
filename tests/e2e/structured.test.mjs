// End-to-end tests of structured outputs (issue 38) with the official `openai` client: JSON Schemas sent
// as response_format {type: "json_schema", json_schema: {name, schema, strict: true}} to
// chat.completions, zodResponseFormat + chat.completions.parse, and the Responses API's text.format
// (responses.create / responses.parse with zodTextFormat). Started by tests/e2e/e2e_test.cpp against
// `ft serve` on the qwen3_moe fixture: random weights, so without the grammar its text is noise and
// every valid output below is the constraint's doing. Each schema is sampled at temperature 1 with
// several seeds; every output must JSON.parse and validate with ajv (formats with ajv-formats).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodResponseFormat, zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import Ajv2020 from 'ajv/dist/2020.js';
import Ajv7 from 'ajv';
import addFormats from 'ajv-formats';

const URL_MAIN = process.env.FT_E2E_URL;
const KEY = process.env.FT_E2E_KEY;
const MODEL = process.env.FT_E2E_MODEL;
if (!URL_MAIN || !KEY || !MODEL) {
  throw new Error('run through ctest (test_e2e): FT_E2E_URL, FT_E2E_KEY, FT_E2E_MODEL are not set');
}

const client = new OpenAI({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });

const SEEDS = [1, 2, 3, 4, 5, 6];
const MAX_TOKENS = 200;  // the grammar's budget rule closes the value within it

/** An ajv validator of `schema` (draft 2020-12 unless the schema names draft-07), strict about the
 *  schema's own keywords so a typo in a test schema fails here rather than passing everything. */
function validator(schema) {
  const draft7 = schema.$schema === 'http://json-schema.org/draft-07/schema#';
  const opts = { strict: true, strictTypes: false, allErrors: true };
  const ajv = draft7 ? new Ajv7(opts) : new Ajv2020(opts);
  addFormats(ajv);
  return ajv.compile(schema);
}

/** A constrained reply ends when its value is complete ("stop"), or with "length" when the value's
 *  last token was also the max_tokens-th (the budget rule closes the value by then either way). */
function checkFinish(r, maxTokens, what) {
  const c = r.choices[0];
  assert.ok(c.finish_reason === 'stop' || (c.finish_reason === 'length' && r.usage.completion_tokens === maxTokens),
    `${what}: finish_reason ${c.finish_reason} after ${r.usage.completion_tokens} tokens`);
  assert.ok(r.usage.completion_tokens <= maxTokens);
}

function checkValid(validate, text, what) {
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(text); }, `${what}: not JSON: ${JSON.stringify(text)}`);
  assert.ok(validate(value), `${what}: ${JSON.stringify(text)} fails the schema: ${JSON.stringify(validate.errors)}`);
  return value;
}

const chatReq = (name, schema, seed, extra = {}) => ({
  model: MODEL, temperature: 1, seed, max_tokens: MAX_TOKENS,
  messages: [{ role: 'user', content: `Give me a ${name} as JSON.` }],
  response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } }, ...extra,
});

const str = { type: 'string', maxLength: 12 };

// name -> schema. Strings carry maxLength where a long one would crowd out the rest of the value.
const SCHEMAS = {
  flat_scalars: {
    type: 'object', additionalProperties: false, required: ['name', 'age', 'height', 'member'],
    properties: { name: str, age: { type: 'integer' }, height: { type: 'number' }, member: { type: 'boolean' } },
  },
  nested_objects: {
    type: 'object', additionalProperties: false, required: ['person'],
    properties: {
      person: {
        type: 'object', additionalProperties: false, required: ['name', 'address'],
        properties: {
          name: str,
          address: {
            type: 'object', additionalProperties: false, required: ['city', 'geo'],
            properties: {
              city: str,
              geo: { type: 'object', additionalProperties: false, required: ['lat', 'lon'],
                properties: { lat: { type: 'number' }, lon: { type: 'number' } } },
            },
          },
        },
      },
    },
  },
  string_enum: {
    type: 'object', additionalProperties: false, required: ['color', 'size'],
    properties: { color: { type: 'string', enum: ['red', 'green', 'blue'] }, size: { enum: ['S', 'M', 'L', 'XL'] } },
  },
  mixed_enum: { enum: ['one', 2, 3.5, true, null, { k: 'v' }, [1, 'two']] },
  const_values: {
    type: 'object', additionalProperties: false, required: ['version', 'kind', 'flags'],
    properties: { version: { const: 2 }, kind: { type: 'string', const: 'report' }, flags: { const: [true, false] } },
  },
  any_of_shapes: {
    type: 'object', additionalProperties: false, required: ['shape'],
    properties: {
      shape: {
        anyOf: [
          { type: 'object', additionalProperties: false, required: ['kind', 'radius'],
            properties: { kind: { const: 'circle' }, radius: { type: 'number' } } },
          { type: 'object', additionalProperties: false, required: ['kind', 'w', 'h'],
            properties: { kind: { const: 'rect' }, w: { type: 'integer' }, h: { type: 'integer' } } },
          { type: 'string', maxLength: 6 },
        ],
      },
    },
  },
  one_of_scalars: { oneOf: [{ type: 'integer' }, { type: 'boolean' }, { type: 'null' }] },
  defs_ref: {
    type: 'object', additionalProperties: false, required: ['from', 'to'],
    properties: { from: { $ref: '#/$defs/point' }, to: { $ref: '#/$defs/point' } },
    $defs: { point: { type: 'object', additionalProperties: false, required: ['x', 'y'],
      properties: { x: { type: 'integer' }, y: { type: 'integer' } } } },
  },
  recursive_tree: {
    $ref: '#/$defs/node',
    $defs: {
      node: {
        type: 'object', additionalProperties: false, required: ['label', 'children'],
        properties: { label: { type: 'string', maxLength: 4 },
          children: { type: 'array', maxItems: 2, items: { $ref: '#/$defs/node' } } },
      },
    },
  },
  recursive_list_root_ref: {
    type: 'object', additionalProperties: false, required: ['value', 'next'],
    properties: { value: { type: 'integer', minimum: 0, maximum: 9 }, next: { anyOf: [{ $ref: '#' }, { type: 'null' }] } },
  },
  draft7_definitions: {
    $schema: 'http://json-schema.org/draft-07/schema#',
    type: 'object', additionalProperties: false, required: ['items'],
    properties: { items: { type: 'array', items: { $ref: '#/definitions/item' }, maxItems: 3 } },
    definitions: { item: { type: 'object', additionalProperties: false, required: ['sku', 'qty'],
      properties: { sku: { type: 'string', maxLength: 6 }, qty: { type: 'integer', minimum: 1, maximum: 100 } } } },
  },
  array_bounds: {
    type: 'object', additionalProperties: false, required: ['tags', 'scores'],
    properties: {
      tags: { type: 'array', items: { type: 'string', maxLength: 5 }, minItems: 2, maxItems: 4 },
      scores: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 10 }, minItems: 3, maxItems: 3 },
    },
  },
  top_level_array: {
    type: 'array', minItems: 1, maxItems: 3,
    items: { type: 'object', additionalProperties: false, required: ['id', 'done'],
      properties: { id: { type: 'integer' }, done: { type: 'boolean' } } },
  },
  tuple_prefix_items: {
    type: 'array', prefixItems: [{ type: 'string', maxLength: 5 }, { type: 'integer' }, { type: 'boolean' }],
    items: false, minItems: 3,
  },
  optional_properties: {
    type: 'object', additionalProperties: false, required: ['id'],
    properties: { id: { type: 'integer' }, nickname: str, age: { type: 'integer', minimum: 0, maximum: 150 },
      email: { type: 'string', maxLength: 10 } },
  },
  integer_ranges: {
    type: 'object', additionalProperties: false, required: ['percent', 'negative', 'exclusive', 'big'],
    properties: {
      percent: { type: 'integer', minimum: 0, maximum: 100 },
      negative: { type: 'integer', minimum: -50, maximum: -7 },
      exclusive: { type: 'integer', exclusiveMinimum: 10, exclusiveMaximum: 20 },
      big: { type: 'integer', minimum: 1000000, maximum: 1000999 },
    },
  },
  number_range: {
    type: 'object', additionalProperties: false, required: ['ratio', 'temp'],
    properties: { ratio: { type: 'number', minimum: 0, maximum: 1 }, temp: { type: 'number', minimum: 20, maximum: 30 } },
  },
  string_lengths: {
    type: 'object', additionalProperties: false, required: ['code', 'short', 'word'],
    properties: {
      code: { type: 'string', minLength: 3, maxLength: 3 },
      short: { type: 'string', maxLength: 2 },
      word: { type: 'string', minLength: 1, maxLength: 8 },
    },
  },
  type_arrays: {
    type: 'object', additionalProperties: false, required: ['a', 'b', 'c'],
    properties: {
      a: { type: ['string', 'integer'], maxLength: 5 },
      b: { type: ['number', 'boolean', 'null'] },
      c: { type: ['array', 'null'], items: { type: 'integer' }, maxItems: 2 },
    },
  },
  nullable_fields: {
    type: 'object', additionalProperties: false, required: ['middle_name', 'score', 'parent'],
    properties: {
      middle_name: { type: ['string', 'null'], maxLength: 8 },
      score: { anyOf: [{ type: 'integer', minimum: 0, maximum: 5 }, { type: 'null' }] },
      parent: { anyOf: [{ $ref: '#/$defs/ref' }, { type: 'null' }] },
    },
    $defs: { ref: { type: 'object', additionalProperties: false, required: ['id'], properties: { id: { type: 'integer' } } } },
  },
  string_formats: {
    type: 'object', additionalProperties: false, required: ['day', 'at', 'time', 'id'],
    properties: { day: { type: 'string', format: 'date' }, at: { type: 'string', format: 'date-time' },
      time: { type: 'string', format: 'time' }, id: { type: 'string', format: 'uuid' } },
  },
  all_of_merge: {
    allOf: [
      { type: 'object', properties: { name: str }, required: ['name'] },
      { properties: { level: { type: 'integer', minimum: 1, maximum: 3 } }, required: ['level'] },
    ],
  },
  map_of_integers: {
    type: 'object', additionalProperties: { type: 'integer', minimum: 0, maximum: 99 },
  },
  any_value: { type: 'object', additionalProperties: false, required: ['payload'], properties: { payload: {} } },
  annotations_ignored: {
    title: 'Event', description: 'An event', type: 'object', additionalProperties: false, required: ['title'],
    properties: { title: { type: 'string', maxLength: 10, description: 'its title', examples: ['Launch'], default: 'x' } },
  },
};

test('structured outputs: every schema, several seeds at temperature 1, every reply parses and validates', async () => {
  assert.ok(Object.keys(SCHEMAS).length >= 20);
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    const validate = validator(schema);
    const replies = await Promise.all(SEEDS.map((seed) => client.chat.completions.create(chatReq(name, schema, seed))));
    const texts = new Set();
    replies.forEach((r, i) => {
      const choice = r.choices[0];
      checkFinish(r, MAX_TOKENS, `${name} seed ${SEEDS[i]}`);
      checkValid(validate, choice.message.content, `${name} seed ${SEEDS[i]}`);
      texts.add(choice.message.content);
    });
    // Sampling at temperature 1 really samples: schemas with a choice to make give different values
    // across seeds (const_values has exactly one valid value).
    if (name !== 'const_values') assert.ok(texts.size >= 2, `${name}: every seed gave ${[...texts][0]}`);
  }
});

test('structured outputs: the same seed gives the same value, streamed or not', async () => {
  for (const name of ['nested_objects', 'recursive_tree', 'any_of_shapes', 'string_formats']) {
    const schema = SCHEMAS[name];
    const validate = validator(schema);
    const body = chatReq(name, schema, 7);
    const whole = await client.chat.completions.create(body);
    const again = await client.chat.completions.create(body);
    assert.equal(again.choices[0].message.content, whole.choices[0].message.content);
    const stream = await client.chat.completions.create({ ...body, stream: true });
    let text = '', finish = null;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (c?.delta?.content) text += c.delta.content;
      if (c?.finish_reason) finish = c.finish_reason;
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, whole.choices[0].finish_reason);
    checkValid(validate, text, `${name} streamed`);
  }
});

test('structured outputs: a short max_tokens still closes the value', async () => {
  const schema = SCHEMAS.recursive_tree;
  const validate = validator(schema);
  for (const seed of SEEDS) {
    const r = await client.chat.completions.create(chatReq('tree', schema, seed, { max_tokens: 40 }));
    checkFinish(r, 40, `tree seed ${seed}`);
    checkValid(validate, r.choices[0].message.content, `tree seed ${seed}, max_tokens 40`);
  }
});

test('structured outputs: response_format json_object gives a JSON object', async () => {
  for (const seed of SEEDS) {
    const r = await client.chat.completions.create({
      model: MODEL, temperature: 1, seed, max_tokens: 120, messages: [{ role: 'user', content: 'Any JSON object.' }],
      response_format: { type: 'json_object' },
    });
    checkFinish(r, 120, `json_object seed ${seed}`);
    const v = JSON.parse(r.choices[0].message.content);
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), r.choices[0].message.content);
  }
});

test('structured outputs: keywords the grammar cannot compile get a 400 naming the keyword and param', async () => {
  const cases = [
    [{ type: 'string', pattern: '^a+$' }, "'#/pattern'"],
    [{ type: 'object', properties: { n: { type: 'number', multipleOf: 5 } }, required: ['n'] }, "'#/properties/n/multipleOf'"],
    [{ type: 'object', minProperties: 1 }, "'#/minProperties'"],
    [{ type: 'array', items: { type: 'integer' }, uniqueItems: true }, "'#/uniqueItems'"],
    [{ not: { type: 'string' } }, "'#/not'"],
  ];
  for (const [schema, pointer] of cases) {
    await assert.rejects(client.chat.completions.create(chatReq('bad', schema, 1)), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.status, 400);
      assert.equal(e.param, 'response_format.json_schema.schema');
      assert.ok(e.message.includes(pointer), e.message);
      return true;
    });
  }
  // The same refusal through the Responses API names its own field.
  await assert.rejects(client.responses.create({
    model: MODEL, input: 'x', text: { format: { type: 'json_schema', name: 'bad', strict: true, schema: cases[0][0] } },
  }), (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'text.format.schema' &&
    e.message.includes("'#/pattern'"));
});

// zod schemas through the SDK's helper (zod 4: z.toJSONSchema, draft-07, made strict by the helper).
const TreeNode = z.object({
  name: z.string().max(6),
  get children() { return z.array(TreeNode).max(2); },
});
const Order = z.object({
  id: z.number().int().min(1).max(9999),
  status: z.enum(['pending', 'shipped', 'delivered']),
  customer: z.object({ name: z.string().max(10), vip: z.boolean() }),
  items: z.array(z.object({ sku: z.string().max(6), qty: z.number().int().min(1).max(5), price: z.number() })).min(1).max(3),
  note: z.string().max(8).nullable(),
  channel: z.literal('web'),
  payment: z.union([
    z.object({ method: z.literal('card'), last4: z.string().min(4).max(4) }),
    z.object({ method: z.literal('cash') }),
  ]),
  tree: TreeNode,
});

test('zodResponseFormat + chat.completions.parse: a parsed object that the zod schema accepts', async () => {
  const format = zodResponseFormat(Order, 'order');
  assert.equal(format.json_schema.strict, true);
  const validate = validator(format.json_schema.schema);
  for (const seed of SEEDS) {
    const r = await client.chat.completions.parse({
      model: MODEL, temperature: 1, seed, max_tokens: 300, messages: [{ role: 'user', content: 'An order, please.' }],
      response_format: format,
    });
    const msg = r.choices[0].message;
    checkFinish(r, 300, `order seed ${seed}`);
    assert.ok(!msg.refusal);
    assert.ok(msg.parsed && typeof msg.parsed === 'object', msg.content);
    assert.deepEqual(msg.parsed, Order.parse(JSON.parse(msg.content)));
    checkValid(validate, msg.content, `order seed ${seed}`);
    assert.equal(msg.parsed.channel, 'web');
    assert.ok(msg.parsed.items.length >= 1 && msg.parsed.items.length <= 3);
  }
});

test('Responses API text.format json_schema: responses.create and responses.parse with zodTextFormat', async () => {
  const schema = SCHEMAS.defs_ref;
  const validate = validator(schema);
  for (const seed of SEEDS.slice(0, 3)) {
    // The Responses API has no seed field: temperature 1 samples differently each time, all valid.
    const r = await client.responses.create({
      model: MODEL, input: `Two points (${seed}).`, temperature: 1, max_output_tokens: MAX_TOKENS,
      text: { format: { type: 'json_schema', name: 'segment', schema, strict: true } },
    });
    assert.equal(r.status, 'completed');
    assert.deepEqual(r.text.format, { type: 'json_schema', name: 'segment', schema, strict: true });
    checkValid(validate, r.output_text, `responses segment ${seed}`);
  }
  const format = zodTextFormat(Order, 'order');
  const validateOrder = validator(format.schema);
  for (let i = 0; i < 3; i++) {
    const r = await client.responses.parse({
      model: MODEL, input: 'An order, please.', temperature: 1, max_output_tokens: 300, text: { format },
    });
    assert.equal(r.status, 'completed');
    assert.ok(r.output_parsed && typeof r.output_parsed === 'object', r.output_text);
    assert.deepEqual(r.output_parsed, Order.parse(JSON.parse(r.output_text)));
    checkValid(validateOrder, r.output_text, `responses.parse order ${i}`);
  }
  // Streamed: the deltas add up to a valid value.
  const stream = client.responses.stream({
    model: MODEL, input: 'An order, please.', temperature: 1, max_output_tokens: 300, text: { format },
  });
  let deltas = '';
  for await (const ev of stream) if (ev.type === 'response.output_text.delta') deltas += ev.delta;
  const final = await stream.finalResponse();
  assert.equal(final.status, 'completed');
  checkValid(validateOrder, deltas, 'responses.stream order');
  assert.deepEqual(final.output_parsed, Order.parse(JSON.parse(deltas)));
});
