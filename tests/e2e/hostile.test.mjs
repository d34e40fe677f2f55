// Hostile request bodies (docs/prompt-cache.md "HTTP input", "Work per request"), on the tiny
// hybrid and dense models: each gets a 400 in the OpenAI error shape with the stated code, and the
// server keeps serving (a normal request right after it succeeds with the usual cache hit on a
// repeated prompt).
//  - JSON nested 58,634 levels deep, to /tokenize, /apply-template and /v1/chat/completions
//    (before: a stack overflow killed the process) -> json_too_deep
//  - nesting inside tools[].function.parameters and chat_template_kwargs -> json_too_deep
//  - a tool call's `arguments` string of 58k '[' then ']' (before: a crash in the template
//    code) -> 400 naming the field
//  - a number that overflows a double (1e400; before: 500 with the library's message)
//  - --max-json-depth N: depth N accepted, N+1 refused
//  - 10,000 tools, the same on /apply-template, 200,000 messages, grammars of 5,000 and 20,000
//    alternatives, a JSON Schema enum of 20,000 values and one of 1,000 properties, 151,936
//    logit_bias entries: a 400 naming the limit and its flag within 2 s on the default flags;
//    constraints under the alternatives limit (500 alternatives, 500 enum values, 256
//    properties, thinking on and off): a 400 grammar_too_costly within 2 s or an answer within 5 s; 330,000 special tokens tokenized (windows) or refused within 10 s; each of --max-tools, --max-tools-bytes,
//    --max-messages, --max-content-parts, --max-prompt-bytes at its value and one over, in
//    every dialect that takes tools, messages or a prompt text
//
//   cd tests/e2e && node --test hostile.test.mjs
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';

import { assertCompletion, assertError, words } from './lib/chat.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const DEEP = 58_634;
const deepArray = (n) => '['.repeat(n) + ']'.repeat(n);
// Long enough (~200 tokens) to be cached (--prompt-cache-min-prefix is 32 tokens).
const OK_BODY = { model: 'tiny', messages: [{ role: 'user', content: words(150, 7) }], max_tokens: 4, temperature: 0 };

for (const arch of ARCHS) {
  describe(`hostile bodies [${arch}]`, { timeout: 180_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `hostile-${arch}`,
        args: ['--parallel', '1', '--ctx-size', '512', '--max-json-depth', '40'] });
    });
    after(async () => { await srv?.stopGracefully(); });

    async function stillServes(what) {
      srv.assertAlive();
      const res = await srv.openai.chat.completions.create(OK_BODY);
      assertCompletion(res, { maxTokens: 4 }, `normal request after ${what}`);
      return res;
    }

    for (const path of ['/tokenize', '/apply-template', '/v1/chat/completions']) {
      it(`${DEEP} levels of nesting to ${path} -> 400 json_too_deep`, async () => {
        const r = await srv.post(path, `{"a":${deepArray(DEEP)},"b":1}`);
        const e = assertError(r, 400, path);
        assert.equal(e.code, 'json_too_deep');
        assert.match(e.message, /deeper than 40 levels/);
        await stillServes(path);
      });
    }

    it('nesting inside tools[].function.parameters and chat_template_kwargs -> 400', async () => {
      const params = `{"type":"object","properties":{"x":${deepArray(17_500)}}}`;
      const tools = `[{"type":"function","function":{"name":"f","parameters":${params}}}]`;
      let r = await srv.post('/v1/chat/completions',
        `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tools":${tools}}`);
      assert.equal(assertError(r, 400, 'tools').code, 'json_too_deep');
      r = await srv.post('/v1/chat/completions',
        `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"chat_template_kwargs":{"k":${deepArray(5000)}}}`);
      assert.equal(assertError(r, 400, 'kwargs').code, 'json_too_deep');
      await stillServes('nested tools/kwargs');
    });

    it("a tool call's arguments nested 58k deep -> 400 naming the field", async () => {
      const body = {
        model: 'tiny', max_tokens: 4,
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: null,
            tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: deepArray(DEEP) } }] },
          { role: 'tool', tool_call_id: 'c1', content: 'ok' },
        ],
      };
      const r = await srv.post('/v1/chat/completions', body);
      const e = assertError(r, 400, 'arguments');
      assert.equal(e.param, 'messages[1].tool_calls[0].function.arguments');
      assert.match(e.message, /deeper than 40 levels/);
      await stillServes('deep arguments');
    });

    it('a number that overflows (1e400) -> 400 invalid_json, not 500', async () => {
      for (const path of ['/tokenize', '/v1/chat/completions']) {
        const r = await srv.post(path, '{"a":1e400}');
        const e = assertError(r, 400, path);
        assert.equal(e.code, 'invalid_json');
        assert.match(e.message, /1e400/);
      }
      await stillServes('1e400');
    });

    it('depth at the limit is served, one more level is refused', async () => {
      // The body object is level 1, messages 2, a message 3; kwargs value nests the rest.
      const kw = (levels) => deepArray(levels);
      let r = await srv.post('/v1/chat/completions',
        `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"chat_template_kwargs":{"k":${kw(38)}}}`);
      assert.equal(r.status, 200, `depth 40: ${r.text}`);
      r = await srv.post('/v1/chat/completions',
        `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"chat_template_kwargs":{"k":${kw(39)}}}`);
      assert.equal(assertError(r, 400, 'depth 41').code, 'json_too_deep');
      // The cache still works after all of the above: the same request twice is a hit.
      await stillServes('the depth limit');
      const again = await stillServes('the depth limit (again)');
      assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0,
        `a repeated prompt must restore from the cache: ${JSON.stringify(again.usage)}`);
    });
  });
}

// Bodies that ask the HTTP side for unbounded work: a tool list, a conversation or a
// prompt text so large that the chat template (llama.cpp's jinja interpreter, ~0.3 ms a message,
// ~0.7 ms a tool) or the tokenizer ran for minutes and took gigabytes, all below --max-body-bytes.
const tool = (i) => ({ type: 'function', function: { name: `tool_${i}`, description: `Tool number ${i} does a thing`,
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } });
const toolList = (n) => Array.from({ length: n }, (_, i) => tool(i));
const conversation = (n) => Array.from({ length: n },
  (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `message ${i}` }));

/** A GBNF grammar of `n` string alternatives (n - 1 '|'). */
const alternatives = (n) => `root ::= ${Array.from({ length: n }, (_, i) => `"word${i}x"`).join(' | ')}`;
/** response_format for JSON Schema `schema`. */
const schemaFormat = (schema) => ({ type: 'json_schema', json_schema: { name: 'x', schema } });

/** POSTs `body` and returns the response with `ms`, the time it took. */
async function timedPost(srv, path, body) {
  const t0 = Date.now();
  const r = await srv.post(path, body);
  return { ...r, ms: Date.now() - t0 };
}

describe('per-request work limits on the default flags [qwen35]', { timeout: 180_000 }, () => {
  let srv;
  before(async () => {
    srv = await startServer({ model: modelPath('qwen35'), name: 'limits-default', args: ['--parallel', '2'] });
  });
  after(async () => { await srv?.stopGracefully(); });

  // Before: 26.6 s (an error after tokenizing 837,989 tokens), 29.8 s (a 2.5 MB prompt) and no
  // answer within 60 s, RSS 138 MB -> 14 GB (2 shared cores).
  const cases = [
    ['10,000 tools', '/v1/chat/completions', () => ({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }], tools: toolList(10_000) }),
      'too_many_tools', 'tools', /this request has 10000 tools; this server accepts at most 1024 \(--max-tools\)/],
    ['10,000 tools', '/apply-template', () => ({ messages: [{ role: 'user', content: 'hi' }], tools: toolList(10_000) }),
      'too_many_tools', 'tools', /at most 1024 \(--max-tools\)/],
    ['200,000 messages', '/v1/chat/completions', () => ({ model: 'tiny', max_tokens: 4, messages: conversation(200_000) }),
      'too_many_messages', 'messages', /this request has 200000 messages; this server accepts at most 4096 \(--max-messages\)/],
    // Before: ~19 s a generated token on the engine thread, another request waiting 37 s.
    ['a grammar of 5,000 alternatives', '/v1/chat/completions', () => ({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
      grammar: alternatives(5000) }),
      'grammar_too_large', 'grammar', /^this request has 4999 alternatives in its grammar \('\|'\); this server accepts at most 512 \(--max-grammar-alternatives\)/],
    // Before: 2.5 min, going on 32 s after its client left; another request waited 26 s.
    ['a grammar of 20,000 alternatives', '/v1/chat/completions', () => ({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
      grammar: alternatives(20_000) }),
      'grammar_too_large', 'grammar', /this request has 19999 alternatives in its grammar/],
    // Before: no answer in 60 s (served in 110 s for 8 tokens: the enum's stacks live beside the
    // optional reasoning block from the first token on).
    ['a JSON Schema enum of 20,000 values', '/v1/chat/completions', () => ({ model: 'tiny', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }],
      response_format: schemaFormat({ type: 'string', enum: Array.from({ length: 20_000 }, (_, i) => `value${i}`) }) }),
      'grammar_too_large', 'response_format', /this request has 20000 alternatives in its JSON Schema \(enum values, properties, anyOf\/oneOf branches\); this server accepts at most 512 \(--max-grammar-alternatives\)/],
    // Before: 3.7-5.5 s of rendering (json-schema-to-grammar), then a 400 "failed to parse grammar".
    ['a JSON Schema of 1,000 optional properties', '/v1/chat/completions', () => ({ model: 'tiny', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }],
      response_format: schemaFormat({ type: 'object', properties: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`p${i}`, { type: 'string' }])) }) }),
      'grammar_too_large', 'response_format', /this request has 1000 alternatives in its JSON Schema/],
    // Before: 20.5 s on the engine thread (18 s of it parsing the object's 151,936 keys).
    ['151,936 logit_bias entries', '/v1/chat/completions', () => ({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
      logit_bias: Object.fromEntries(Array.from({ length: 151_936 }, (_, i) => [String(i), -1])) }),
      'json_too_large', null, /an object in the request body has more than 8192 keys/],
    ['2,000 logit_bias entries', '/v1/chat/completions', () => ({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
      logit_bias: Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [String(i), -1])) }),
      'too_many_logit_bias', 'logit_bias', /this request has 2000 logit_bias entries; this server accepts at most 1024 \(--max-logit-bias\)/],
  ];
  for (const [what, path, body, code, param, message] of cases) {
    it(`${what} to ${path} -> 400 ${code} within 2 s, while a normal request is served`, async () => {
      const [r, normal] = await Promise.all([
        timedPost(srv, path, body()),
        srv.openai.chat.completions.create(OK_BODY),
      ]);
      const e = assertError(r, 400, `${what} ${path}`);
      assert.equal(e.code, code);
      assert.equal(e.param, param);
      assert.match(e.message, message);
      assert.ok(r.ms < 2000, `${what} to ${path} took ${r.ms} ms`);
      assertCompletion(normal, { maxTokens: 4 }, `normal request beside ${what}`);
    });
  }

  // Under the alternatives limit, a constraint's cost per generated token decides: the probe
  // before the queue (engine::grammar_step_seconds) refuses what costs more than --max-grammar-ms
  // (200) a step, the scheduler ends a request whose step takes longer while it runs. Which of
  // the three happens depends on the machine's speed; each must be quick (the done-when of the
  // hostile-input work: a 400 within 2 s or an answer within 5 s), with thinking on (the
  // constraint's alternatives live beside the reasoning from the first token) and off.
  const underTheLimit = [
    ['a grammar of 500 alternatives', () => ({ grammar: alternatives(500) }), 'grammar'],
    ['a JSON Schema enum of 500 values', () => ({ response_format: schemaFormat({ type: 'string', enum: Array.from({ length: 500 }, (_, i) => `value${i}`) }) }), 'response_format'],
    ['a JSON Schema of 256 optional properties', () => ({ response_format: schemaFormat({ type: 'object', properties: Object.fromEntries(Array.from({ length: 256 }, (_, i) => [`p${i}`, { type: 'string' }])) }) }), 'response_format'],
  ];
  for (const [what, fields, param] of underTheLimit) {
    for (const thinking of [true, false]) {
      it(`${what} (thinking ${thinking ? 'on' : 'off'}): a 400 grammar_too_costly within 2 s or an answer within 5 s, while a normal request is served`, async () => {
        const [r, normal] = await Promise.all([
          timedPost(srv, '/v1/chat/completions', { model: 'tiny', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }],
            chat_template_kwargs: { enable_thinking: thinking }, ...fields() }),
          srv.openai.chat.completions.create(OK_BODY),
        ]);
        if (r.status === 200) {
          assert.ok(r.ms < 5000, `${what}: served in ${r.ms} ms`);
        } else {
          const e = assertError(r, 400, what);
          assert.equal(e.code, 'grammar_too_costly');
          assert.match(e.message, /at most 200 ms \(--max-grammar-ms\)/);
          // Refused by the probe before the queue (it names the field): within 2 s; or ended by
          // the scheduler at a step over the bound while it was served (no param): within the
          // 5 s an answer has.
          assert.ok(e.param === param || e.param === null, `param ${e.param}`);
          assert.ok(r.ms < (e.param === null ? 5000 : 2000), `${what}: refused in ${r.ms} ms (param ${e.param})`);
        }
        assertCompletion(normal, { maxTokens: 4 }, `normal request beside ${what}`);
      });
    }
  }

  // llama.cpp cuts a text at its special tokens in time that grows with the square of their
  // count (40,000 took 2.8 s, 330,000 no answer in 120 s, holding a core after the client left);
  // the server tokenizes a long text in windows (engine::model::tokenize): 1.2 s (/tokenize) and
  // 1.5 s (chat) measured on 2 busy cores. The bound here is 10 s: far under the quadratic time.
  it('330,000 special tokens (3.96 MB): /tokenize answers all of them, a chat request gets a 400, within 10 s', async () => {
    const text = '<|im_start|>'.repeat(330_000);
    const t = await timedPost(srv, '/tokenize', { content: text, parse_special: true });
    assert.equal(t.status, 200, t.text.slice(0, 300));
    assert.equal(t.json.tokens.length, 330_000);
    assert.ok(new Set(t.json.tokens).size === 1, 'one special token, 330,000 times');
    assert.ok(t.ms < 10_000, `/tokenize took ${t.ms} ms`);
    const c = await timedPost(srv, '/v1/chat/completions', { model: 'tiny', max_tokens: 1, messages: [{ role: 'user', content: text }] });
    assert.equal(assertError(c, 400, 'chat').code, 'context_length_exceeded');
    assert.ok(c.ms < 10_000, `the chat request took ${c.ms} ms`);
    await srv.openai.chat.completions.create(OK_BODY);
  });

  it('just under the limits (1,024 tools; 4,096 messages) the answer still comes within 5 s', async () => {
    for (const [path, body] of [
      ['/apply-template', { messages: [{ role: 'user', content: 'hi' }], tools: toolList(1024) }],
      ['/v1/chat/completions', { model: 'tiny', max_tokens: 4, messages: conversation(4096) }],
    ]) {
      const r = await timedPost(srv, path, body);
      // /apply-template renders it; the chat request is longer than the context (16,384 tokens).
      if (path === '/apply-template') assert.equal(r.status, 200, r.text.slice(0, 300));
      else assert.equal(assertError(r, 400, path).code, 'context_length_exceeded');
      assert.ok(r.ms < 5000, `${path} took ${r.ms} ms`);
    }
  });
});

describe('per-request work limits, each flag at its value and one over [qwen35]', { timeout: 180_000 }, () => {
  let srv;
  before(async () => {
    srv = await startServer({ model: modelPath('qwen35'), name: 'limits-small',
      args: ['--parallel', '1', '--ctx-size', '4096', '--max-tools', '8', '--max-tools-bytes', '2048',
        '--max-messages', '16', '--max-content-parts', '24', '--max-prompt-bytes', '4096'] });
  });
  after(async () => { await srv?.stopGracefully(); });

  const user = [{ role: 'user', content: 'hi' }];
  const chat = (extra) => ({ model: 'tiny', max_tokens: 2, temperature: 0, messages: user, ...extra });

  it('--max-tools: 8 tools served, 9 refused in chat completions, /apply-template, Messages and Responses', async () => {
    // Short tools: 8 of them are ~800 bytes of definitions (under --max-tools-bytes).
    const short = (n) => Array.from({ length: n }, (_, i) => ({ type: 'function', function: { name: `t${i}`, parameters: {} } }));
    assert.equal((await srv.post('/v1/chat/completions', chat({ tools: short(8) }))).status, 200);
    for (const [path, body] of [['/v1/chat/completions', chat({ tools: short(9) })], ['/apply-template', { messages: user, tools: short(9) }]]) {
      const e = assertError(await srv.post(path, body), 400, path);
      assert.equal(e.code, 'too_many_tools');
      assert.equal(e.message, 'this request has 9 tools; this server accepts at most 8 (--max-tools): send fewer, ' +
        'or start the server with a larger --max-tools');
    }
    const anthropicTools = Array.from({ length: 9 }, (_, i) => ({ name: `t${i}`, input_schema: { type: 'object' } }));
    let r = await srv.post('/v1/messages', { model: 'tiny', max_tokens: 2, messages: user, tools: anthropicTools });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.type, 'error');
    assert.match(r.json.error.message, /9 tools; this server accepts at most 8 \(--max-tools\)/);
    const responsesTools = Array.from({ length: 9 }, (_, i) => ({ type: 'function', name: `t${i}`, parameters: {} }));
    r = await srv.post('/v1/responses', { model: 'tiny', max_output_tokens: 2, input: 'hi', tools: responsesTools });
    assert.equal(assertError(r, 400, 'responses').code, 'too_many_tools');
  });

  it('--max-tools-bytes: definitions over 2048 bytes refused', async () => {
    const big = [{ type: 'function', function: { name: 'f', description: 'd'.repeat(2100), parameters: {} } }];
    const e = assertError(await srv.post('/v1/chat/completions', chat({ tools: big })), 400, 'tool bytes');
    assert.equal(e.code, 'tools_too_large');
    assert.match(e.message, /this request has 2103 bytes of tool definitions .* at most 2048 \(--max-tools-bytes\)/);
  });

  it('--max-messages: 16 messages served, 17 refused in every dialect', async () => {
    assert.equal((await srv.post('/v1/chat/completions', chat({ messages: conversation(15) }))).status, 200);
    let e = assertError(await srv.post('/v1/chat/completions', chat({ messages: conversation(17) })), 400, 'chat');
    assert.equal(e.code, 'too_many_messages');
    assert.match(e.message, /17 messages; this server accepts at most 16 \(--max-messages\)/);
    let r = await srv.post('/v1/messages', { model: 'tiny', max_tokens: 2, messages: conversation(17) });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, /17 messages; .* \(--max-messages\)/);
    r = await srv.post('/v1/responses', { model: 'tiny', max_output_tokens: 2, input: conversation(17) });
    e = assertError(r, 400, 'responses');
    assert.equal(e.code, 'too_many_messages');
    assert.equal(e.param, 'input');
  });

  it('--max-content-parts: 25 text parts refused, 16 served', async () => {
    const parts = (n) => Array.from({ length: n }, (_, i) => ({ type: 'text', text: `p${i}` }));
    assert.equal((await srv.post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: parts(16) }] }))).status, 200);
    const e = assertError(await srv.post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: parts(25) }] })), 400, 'parts');
    assert.equal(e.code, 'too_many_content_parts');
    assert.match(e.message, /25 content parts .* at most 24 \(--max-content-parts\)/);
  });

  it('--max-prompt-bytes: the messages, the rendered prompt, a completions prompt and /tokenize content over 4096 bytes refused', async () => {
    // The messages' text over the bound: refused before the template renders it.
    let e = assertError(await srv.post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: 'x '.repeat(2100) }] })), 400, 'chat');
    assert.equal(e.code, 'prompt_too_large');
    assert.equal(e.param, 'messages');
    assert.match(e.message, /^the messages' text is 4200 bytes; this server tokenizes at most 4096 \(--max-prompt-bytes\)/);
    // Within it, but not with the template's markup around it: refused after the render.
    e = assertError(await srv.post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: 'x '.repeat(2045) }] })), 400, 'chat');
    assert.equal(e.code, 'prompt_too_large');
    assert.match(e.message, /^the rendered prompt is \d+ bytes; this server tokenizes at most 4096 \(--max-prompt-bytes\)/);
    e = assertError(await srv.post('/v1/completions', { model: 'tiny', max_tokens: 2, prompt: 'y'.repeat(4097) }), 400, 'completions');
    assert.equal(e.code, 'prompt_too_large');
    assert.equal(e.param, 'prompt');
    assert.equal(e.message, "'prompt' is 4097 bytes; this server tokenizes at most 4096 (--max-prompt-bytes): send a " +
      'shorter prompt, or start the server with a larger --max-prompt-bytes');
    e = assertError(await srv.post('/tokenize', { content: 'z'.repeat(4097) }), 400, 'tokenize');
    assert.equal(e.code, 'prompt_too_large');
    const ok = await srv.post('/tokenize', { content: 'z'.repeat(4096) });
    assert.equal(ok.status, 200, ok.text);
    assert.ok(ok.json.tokens.length > 0);
  });
});

/** A raw HTTP request (node:http, so that the Host header can be set). Returns {status, json}. */
function rawRequest(port, { method = 'GET', path = '/', headers = {}, body = '' }) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, text, json });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

// Access checks (docs/prompt-cache.md "HTTP input", "Tenants and access"): the Host allow-list
// against DNS rebinding, JSON-only POST bodies against cross-site form/text posts, and the API key.
describe('access checks [qwen3]', { timeout: 180_000 }, () => {
  let open;
  let keyed;
  before(async () => {
    open = await startServer({ model: modelPath('qwen3'), name: 'access-open', args: ['--parallel', '1', '--ctx-size', '512'] });
    keyed = await startServer({ model: modelPath('qwen3'), name: 'access-keyed',
      args: ['--parallel', '1', '--ctx-size', '512', '--api-key', 'sk-right-key'] });
  });
  after(async () => { await open?.stopGracefully(); await keyed?.stopGracefully(); });

  it('without a key: a foreign Host name gets 403; IP literals and localhost pass', async () => {
    let r = await rawRequest(open.port, { path: '/v1/models', headers: { Host: 'attacker.example:8080' } });
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.error.code, 'host_not_allowed');
    assert.match(r.json.error.message, /--allowed-hosts attacker\.example/);
    for (const host of [`127.0.0.1:${open.port}`, `localhost:${open.port}`, '[::1]']) {
      r = await rawRequest(open.port, { path: '/v1/models', headers: { Host: host } });
      assert.equal(r.status, 200, `${host}: ${r.text}`);
    }
  });

  it('a text/plain or form POST (a web page) gets 415 and changes nothing', async () => {
    const body = { model: 'tiny', messages: [{ role: 'user', content: words(120, 3) }], max_tokens: 2, temperature: 0 };
    const first = await open.post('/v1/chat/completions', body);
    assert.equal(first.status, 200, first.text);
    const before = (await open.get('/v1/cache/stats')).json.entries;
    assert.ok(before > 0, 'the chat request must have left a cache entry');
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const r = await rawRequest(open.port, { method: 'POST', path: '/v1/cache/reset', headers: { 'Content-Type': type }, body: '{}' });
      assert.equal(r.status, 415, `${type}: ${r.text}`);
      assert.equal(r.json.error.code, 'unsupported_media_type');
    }
    const r = await rawRequest(open.port, { method: 'POST', path: '/v1/cache/reset', body: '{}' });
    assert.equal(r.status, 415, `no content type: ${r.text}`);
    assert.equal((await open.get('/v1/cache/stats')).json.entries, before, 'the cache must be intact');
    const again = await open.post('/v1/chat/completions', body);
    assert.ok(again.json.usage.prompt_tokens_details.cached_tokens > 0, `still a hit: ${again.text}`);
  });

  it('with a key: any Host; wrong or missing key 401; the right key 200; /health and /ready open', async () => {
    const r0 = await rawRequest(keyed.port, { path: '/v1/models', headers: { Host: 'gpu-box.lan' } });
    assert.equal(r0.status, 401, r0.text);
    for (const auth of ['', 'Bearer sk-wrong-key', 'Bearer sk-right-kez', 'Bearer sk-right-key2', 'sk-right-key']) {
      const r = await rawRequest(keyed.port, { path: '/v1/models', headers: auth ? { Authorization: auth } : {} });
      assert.equal(r.status, 401, `'${auth}': ${r.text}`);
    }
    const ok = await rawRequest(keyed.port, { path: '/v1/models', headers: { Authorization: 'Bearer sk-right-key', Host: 'gpu-box.lan' } });
    assert.equal(ok.status, 200, ok.text);
    assert.equal((await rawRequest(keyed.port, { path: '/health' })).status, 200);
    const ready = await rawRequest(keyed.port, { path: '/ready' });  // a load balancer's probe has no key
    assert.equal(ready.status, 200, ready.text);
    assert.equal(JSON.parse(ready.text).status, 'ready');
  });
});
