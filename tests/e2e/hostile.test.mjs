// Hostile request bodies (issue 15 "Hostile HTTP input"), on the tiny hybrid and dense models:
// each gets a 400 in the OpenAI error shape with the stated code, and the server keeps serving
// (a normal request right after it succeeds with the usual cache hit on a repeated prompt).
//  - JSON nested 58,634 levels deep, to /tokenize, /apply-template and /v1/chat/completions
//    (before: a stack overflow killed the process) -> json_too_deep
//  - nesting inside tools[].function.parameters and chat_template_kwargs -> json_too_deep
//  - a tool call's `arguments` string of 58k '[' then ']' (before: a crash in the template
//    code) -> 400 naming the field
//  - a number that overflows a double (1e400; before: 500 with the library's message)
//  - --max-json-depth N: depth N accepted, N+1 refused
//
//   cd tests/e2e && node --test hostile.test.mjs
import assert from 'node:assert/strict';
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
