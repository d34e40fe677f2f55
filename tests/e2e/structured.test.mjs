// Structured output and forced tool calls on all four tiny families (docs/api-fields.md),
// through the official `openai` client, streamed and not:
//  - response_format json_schema: the reply parses and validates against the schema (ajv), on
//    random-weight models, because the engine's grammar sampler only lets valid JSON through;
//  - response_format json_object: the reply is a JSON object;
//  - tool_choice "required" and a named function: finish_reason "tool_calls", arguments that
//    parse and validate against the tool's parameters; parallel_tool_calls false: one call;
//  - tool_choice "none": no tool call.
// Thinking is turned off (chat_template_kwargs.enable_thinking false): a random model would
// otherwise spend max_tokens inside the <think> block the grammar allows before the JSON.
//
//   cd tests/e2e && node --test structured.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import Ajv from 'ajv';

import { streamChat, words } from './lib/chat.mjs';
import { modelPath, startServer } from './lib/server.mjs';

const FAMILIES = ['qwen35', 'qwen3', 'kimi-linear', 'granite-hybrid'];
const NO_THINK = { enable_thinking: false };

// Every value is bounded (enum, maxLength, integer, bounded array), so a random model's reply
// ends within max_tokens.
const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 150 },
    mood: { type: 'string', enum: ['happy', 'sad', 'calm'] },
    tags: { type: 'array', items: { type: 'string', maxLength: 6 }, maxItems: 2 },
  },
  required: ['name', 'age', 'mood', 'tags'],
  additionalProperties: false,
};

// Non-string parameters: their values follow the schema under every tool-call format. (Under
// the XML format of the Qwen3.5 template a string argument is free text up to its closing tag,
// which a random model may never write: docs/api-fields.md.)
const TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather forecast for a number of days',
    parameters: {
      type: 'object',
      properties: { days: { type: 'integer', minimum: 1, maximum: 7 }, metric: { type: 'boolean' } },
      required: ['days', 'metric'],
      additionalProperties: false,
    },
  },
};
const OTHER_TOOL = {
  type: 'function',
  function: {
    name: 'read_file',
    description: 'Read lines of the open file',
    parameters: {
      type: 'object',
      properties: { line: { type: 'integer', minimum: 0, maximum: 9999 }, count: { type: 'integer', minimum: 1, maximum: 50 } },
      required: ['line', 'count'],
      additionalProperties: false,
    },
  },
};

const ajv = new Ajv({ strict: false });
const validateSchema = ajv.compile(SCHEMA);
const validateWeather = ajv.compile(TOOL.function.parameters);
const validateRead = ajv.compile(OTHER_TOOL.function.parameters);

function messages(seed) {
  return [
    { role: 'system', content: `You answer in JSON. ${words(30, seed)}` },
    { role: 'user', content: words(12, seed + 1) },
  ];
}

function assertValid(text, where) {
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(text); }, `${where}: not JSON: ${JSON.stringify(text)}`);
  assert.ok(validateSchema(value), `${where}: ${JSON.stringify(value)} does not validate: ${ajv.errorsText(validateSchema.errors)}`);
  return value;
}

function assertCalls(calls, where, { one = false } = {}) {
  assert.ok(Array.isArray(calls) && calls.length >= 1, `${where}: no tool calls: ${JSON.stringify(calls)}`);
  if (one) assert.equal(calls.length, 1, `${where}: parallel_tool_calls false but ${calls.length} calls`);
  for (const c of calls) {
    assert.equal(c.type, 'function', where);
    assert.ok(typeof c.id === 'string' && c.id.length > 0, `${where}: id`);
    const args = JSON.parse(c.function.arguments);
    const v = c.function.name === 'get_weather' ? validateWeather : validateRead;
    assert.ok(['get_weather', 'read_file'].includes(c.function.name), `${where}: tool ${c.function.name}`);
    assert.ok(v(args), `${where}: arguments ${c.function.arguments}: ${ajv.errorsText(v.errors)}`);
  }
}

for (const arch of FAMILIES) {
  describe(`structured output and forced tool calls [${arch}]`, { timeout: 600_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `structured-${arch}`, args: ['--ctx-size', '4096'] });
    });
    after(async () => { await srv?.stopGracefully(); });

    const schemaFormat = { type: 'json_schema', json_schema: { name: 'person', schema: SCHEMA, strict: true } };

    for (const seed of [1, 2]) {
      it(`json_schema (seed ${seed}, greedy and sampled): the reply validates, streamed and not`, async () => {
        for (const temperature of [0, 1]) {
          const body = { model: 'tiny', messages: messages(seed * 10), max_tokens: 160, temperature, seed,
            response_format: schemaFormat, chat_template_kwargs: NO_THINK };
          const r = await srv.openai.chat.completions.create(body);
          const where = `${arch} seed ${seed} temperature ${temperature}`;
          assert.equal(r.choices[0].finish_reason, 'stop', `${where}: ${JSON.stringify(r.choices[0])}`);
          const v = assertValid(r.choices[0].message.content, where);
          const s = await streamChat(srv.openai, body);
          assert.equal(s.finish, 'stop', `${where} streamed`);
          assertValid(s.content, `${where} streamed`);
          if (temperature === 0) assert.deepEqual(JSON.parse(s.content), v, `${where}: streamed != non-streamed`);
        }
      });
    }

    it('the Responses API: text.format json_schema validates, streamed and not', async () => {
      const body = { model: 'tiny', input: messages(30), max_output_tokens: 160, temperature: 0, store: false,
        reasoning: { effort: 'none' }, text: { format: { type: 'json_schema', name: 'person', schema: SCHEMA, strict: true } } };
      const r = await srv.openai.responses.create(body);
      assert.equal(r.status, 'completed', `${arch}: ${JSON.stringify(r.output)}`);
      const v = assertValid(r.output_text, `${arch} responses`);
      const s = await srv.openai.responses.create({ ...body, stream: true });
      let text = '';
      for await (const ev of s) if (ev.type === 'response.output_text.delta') text += ev.delta;
      assert.deepEqual(assertValid(text, `${arch} responses streamed`), v, `${arch}: streamed != non-streamed`);
    });

    it('json_schema with strict false and json_object: JSON all the same', async () => {
      const loose = { type: 'json_schema', json_schema: { name: 'person', schema: SCHEMA, strict: false } };
      const r = await srv.openai.chat.completions.create({ model: 'tiny', messages: messages(5), max_tokens: 160,
        temperature: 0, response_format: loose, chat_template_kwargs: NO_THINK });
      assertValid(r.choices[0].message.content, `${arch} strict false`);
      // json_object: any object; a random model may write a long string, so only a reply that
      // ended by itself must be complete JSON, and a cut one must be the start of an object.
      const o = await srv.openai.chat.completions.create({ model: 'tiny', messages: messages(6), max_tokens: 200,
        temperature: 0, response_format: { type: 'json_object' }, chat_template_kwargs: NO_THINK });
      const text = o.choices[0].message.content;
      assert.match(text, /^\s*\{/, `${arch} json_object: ${JSON.stringify(text)}`);
      if (o.choices[0].finish_reason === 'stop') {
        const v = JSON.parse(text);
        assert.equal(typeof v, 'object', `${arch} json_object: ${text}`);
        assert.ok(v !== null && !Array.isArray(v), `${arch} json_object: ${text}`);
      } else {
        assert.equal(o.choices[0].finish_reason, 'length');
      }
    });

    for (const choice of ['required', 'named']) {
      it(`tool_choice ${choice}: finish_reason tool_calls, arguments that validate (streamed and not)`, async () => {
        const tool_choice = choice === 'required' ? 'required' : { type: 'function', function: { name: 'read_file' } };
        const body = { model: 'tiny', messages: messages(20), max_tokens: 120, temperature: 0, tools: [TOOL, OTHER_TOOL],
          tool_choice, parallel_tool_calls: false, chat_template_kwargs: NO_THINK };
        const r = await srv.openai.chat.completions.create(body);
        const where = `${arch} tool_choice ${choice}`;
        assert.equal(r.choices[0].finish_reason, 'tool_calls', `${where}: ${JSON.stringify(r.choices[0])}`);
        assertCalls(r.choices[0].message.tool_calls, where, { one: true });
        if (choice === 'named') assert.equal(r.choices[0].message.tool_calls[0].function.name, 'read_file');
        const s = await streamChat(srv.openai, body);
        assert.equal(s.finish, 'tool_calls', `${where} streamed`);
        assertCalls(s.toolCalls, `${where} streamed`, { one: true });
        assert.deepEqual(s.toolCalls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
          r.choices[0].message.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
          `${where}: streamed calls differ`);
      });
    }

    it('tool_choice required with thinking on: the prompt leaves the reasoning open, the call is not forced inside it', async () => {
      const body = { model: 'tiny', messages: messages(20), tools: [TOOL], tool_choice: 'required' };
      const on = await srv.post('/apply-template', body);
      const off = await srv.post('/apply-template', { ...body, chat_template_kwargs: NO_THINK });
      assert.equal(on.status, 200, on.text);
      if (on.json.prompt.endsWith('<think>\n')) {
        // Thinking on: the generation prompt opens the reasoning and nothing follows it.
        assert.ok(!on.json.prompt.includes('<think>\n<tool_call>'), on.json.prompt.slice(-80));
        // Thinking off: the call's start word ends the prompt (the forced call).
        assert.ok(off.json.prompt.endsWith('<tool_call>'), off.json.prompt.slice(-80));
      } else {
        assert.equal(on.json.prompt, off.json.prompt, 'a template without thinking renders both alike');
      }
    });

    it('tool_choice none: no tool call', async () => {
      const r = await srv.openai.chat.completions.create({ model: 'tiny', messages: messages(30), max_tokens: 12,
        temperature: 0, tools: [TOOL], tool_choice: 'none', chat_template_kwargs: NO_THINK });
      assert.ok(!r.choices[0].message.tool_calls?.length, JSON.stringify(r.choices[0]));
      assert.notEqual(r.choices[0].finish_reason, 'tool_calls');
    });
  });
}
