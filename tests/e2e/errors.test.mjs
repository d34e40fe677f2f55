// Request errors, for the tiny hybrid (qwen35) and tiny dense (qwen3) models, on a server
// with a small context (--ctx-size 512 --parallel 1). Each bad request must get the stated
// status with the OpenAI error shape {"error":{"message","type","param","code"}} (type
// "invalid_request_error" for a 400), and a normal request right after it must succeed:
//  - malformed JSON, a body that is not an object -> 400
//  - messages missing, not an array, empty; a message with an unknown role or a
//    non-string content; max_tokens or temperature as strings -> 400
//  - the same invalid body with stream:true -> 400 JSON, not an event stream
//  - a prompt longer than the context -> 400 whose message says the prompt is too long
//  - an unknown model name -> 200 (accepted, as llama-server does: one model is served)
//  - an unknown route -> 404, a served route with another method -> 405 with an Allow header
//    (every endpoint and alias --help lists, with every method)
//
//   cd tests/e2e && node --test errors.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';

import { assertCompletion, assertError, words } from './lib/chat.mjs';
import { ARCHS, SERVER_BIN, modelPath, startServer } from './lib/server.mjs';

/** The endpoints of `lineage-server --help`'s footer: path (and alias) -> methods, in order. */
function helpEndpoints() {
  const r = spawnSync(SERVER_BIN, ['--help'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const footer = r.stdout.slice(r.stdout.indexOf('Endpoints: '));
  const served = new Map();
  const add = (p, m) => served.set(p, [...(served.get(p) ?? []), m]);
  for (const [, method, p, alias] of footer.matchAll(/(GET|POST|DELETE) (\/[^\s,(.]*)(?: \(alias (\/[^\s;)]+))?/g)) {
    add(p, method);
    if (alias) add(alias, method);
  }
  return served;
}

const OK_BODY = { model: 'tiny', messages: [{ role: 'user', content: 'Say something short.' }], max_tokens: 8, temperature: 0 };
const user = (content) => [{ role: 'user', content }];

const BAD_REQUESTS = [
  ['malformed JSON', '{"model":"tiny","messages":[{"role":"user","content":"hi"}'],
  ['not JSON at all', 'messages=hi'],
  ['empty body', ''],
  ['a JSON array body', '[]'],
  ['messages missing', { model: 'tiny', max_tokens: 8 }],
  ['messages not an array', { model: 'tiny', messages: 'hello', max_tokens: 8 }],
  ['messages an object', { model: 'tiny', messages: { role: 'user', content: 'hi' }, max_tokens: 8 }],
  ['messages empty', { model: 'tiny', messages: [], max_tokens: 8 }],
  ['a message with an unknown role', { model: 'tiny', messages: [{ role: 'wizard', content: 'hi' }], max_tokens: 8 }],
  ['a message without a role', { model: 'tiny', messages: [{ content: 'hi' }], max_tokens: 8 }],
  ['content a number', { model: 'tiny', messages: [{ role: 'user', content: 42 }], max_tokens: 8 }],
  ['max_tokens a string', { model: 'tiny', messages: user('hi'), max_tokens: '16' }],
  ['temperature a string', { model: 'tiny', messages: user('hi'), max_tokens: 8, temperature: '0' }],
  ['stream:true with messages empty', { model: 'tiny', messages: [], max_tokens: 8, stream: true }],
];

for (const arch of ARCHS) {
  describe(`errors [${arch}]`, { timeout: 180_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `errors-${arch}`, args: ['--parallel', '1', '--ctx-size', '512'] });
    });
    after(async () => { await srv?.stopGracefully(); });

    /** A normal request must still succeed (the server keeps serving after an error). */
    async function stillServes(after) {
      srv.assertAlive();
      const res = await srv.openai.chat.completions.create(OK_BODY);
      assertCompletion(res, { maxTokens: 8 }, `normal request after ${after}`);
    }

    for (const [what, body] of BAD_REQUESTS) {
      it(`${what} -> 400, then the server still serves`, async () => {
        const r = await srv.post('/v1/chat/completions', body);
        assertError(r, 400, what);
        await stillServes(what);
      });
    }

    it('a prompt longer than the context -> 400 "too long", streamed or not', async () => {
      for (const stream of [false, true]) {
        const body = { model: 'tiny', messages: user(words(1500, 41)), max_tokens: 8, stream };
        const r = await srv.post('/v1/chat/completions', body);
        const e = assertError(r, 400, `long prompt (stream ${stream})`);
        assert.match(e.message, /too long|exceeds?|maximum context|context (size|length)/i,
          `the message should say the prompt is too long: ${e.message}`);
        await stillServes(`a too-long prompt (stream ${stream})`);
      }
    });

    it('the official client raises an APIError with status 400', async () => {
      await assert.rejects(
        srv.openai.chat.completions.create({ model: 'tiny', messages: [], max_tokens: 8 }),
        (e) => e.status === 400 && typeof e.error?.message === 'string',
      );
      await stillServes('a client-side APIError');
    });

    it('an unknown model name is accepted (one model is served, as llama-server does)', async () => {
      const res = await srv.openai.chat.completions.create({ ...OK_BODY, model: 'gpt-4o-does-not-exist' });
      assertCompletion(res, { maxTokens: 8 }, 'unknown model');
    });

    it('a conversation the template refuses -> 400 with the template\'s own words, not its stack', async () => {
      const r = await srv.post('/v1/chat/completions', { messages: [{ role: 'assistant', content: 'hi' }], max_tokens: 3 });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, 'messages');
      assert.match(r.json.error.message, /^the chat template could not render this conversation: [^\n]+; check the order and roles of 'messages'$/);
      assert.doesNotMatch(r.json.error.message, /While executing|------/);
      await stillServes('a template refusal');
    });

    it('an unknown route -> 404', async () => {
      const r = await srv.get('/v1/does-not-exist');
      assert.equal(r.status, 404);
      assert.match(r.json.error.message, /POST \/tokenize.*GET \/metrics/);
      // A served path with another method: 405, naming the method it takes.
      const m = await srv.get('/v1/chat/completions');
      assert.equal(m.status, 405);
      assert.equal(m.json.error.message, 'method GET is not allowed on /v1/chat/completions; it takes POST');
      await stillServes('a 404');
    });

    it('every endpoint --help lists is served, and answers 405 naming its methods to any other', async () => {
      const served = helpEndpoints();
      assert.ok(served.size >= 20, `premise: --help lists the endpoints and their aliases (${[...served.keys()]})`);
      for (const [pattern, methods] of served) {
        const pathname = pattern.replace(':id', 'resp_none');
        for (const method of ['GET', 'POST', 'DELETE', 'PUT', 'PATCH']) {
          const res = await fetch(srv.url + pathname, {
            method,
            headers: method === 'GET' ? {} : { 'content-type': 'application/json' },
            body: method === 'GET' || method === 'DELETE' ? undefined : '{}',
          });
          const text = await res.text();
          if (methods.includes(method)) {
            // Served: the handler answers (a 400 for the empty body, a 404 for an unknown
            // response id), never the router's 404/405.
            assert.notEqual(res.status, 405, `${method} ${pathname}: ${text}`);
            if (res.status === 404) assert.doesNotMatch(text, /unknown endpoint/, `${method} ${pathname}`);
            continue;
          }
          assert.equal(res.status, 405, `${method} ${pathname}: ${text}`);
          const body = JSON.parse(text);
          const message = body.error.message;
          assert.equal(message, `method ${method} is not allowed on ${pathname}; it takes ${methods.join(' or ')}`);
          // RFC 9110 section 15.5.6: a 405 carries the Allow header.
          assert.equal(res.headers.get('allow'), methods.join(', '), `${method} ${pathname}: Allow`);
        }
      }
      await stillServes('the endpoint walk');
    });
  });
}
