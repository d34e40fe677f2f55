// POST /apply-template and POST /tokenize (llama-server's endpoints): together they give a
// client the exact prompt tokens of a chat request, which the benchmark's oracle needs
// (tools/bench). For the tiny hybrid (qwen35) and tiny dense (qwen3) models:
//  - /apply-template renders a conversation with tools as the chat endpoint does: tokenized
//    with /tokenize its length equals the chat completion's usage.prompt_tokens, and the
//    prompt of a conversation is a prefix of the next turn's in text;
//  - /tokenize parses special tokens by default, not with parse_special false;
//  - malformed bodies get a 400 naming the field.
//
//   cd tests/e2e && node --test tokenize.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { assertError, echo, words } from './lib/chat.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const TOOLS = [
  { type: 'function', function: { name: 'read_file', description: 'Read a file of the repository.',
    parameters: { type: 'object', properties: { path: { type: 'string', description: 'Path from the root.' } }, required: ['path'] } } },
  { type: 'function', function: { name: 'run_tests', description: 'Run the unit tests.',
    parameters: { type: 'object', properties: { filter: { type: 'string' } }, required: [] } } },
];
const SYSTEM = `You are a coding agent. ${words(60, 7)}`;

for (const arch of ARCHS) {
  describe(`tokenize and apply-template [${arch}]`, { timeout: 180_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `tokenize-${arch}`, args: ['--parallel', '2', '--ctx-size', '4096'] });
    });
    after(async () => { await srv?.stopGracefully(); });

    const tokens = async (content, extra = {}) => {
      const r = await srv.post('/tokenize', { content, ...extra });
      assert.equal(r.status, 200, r.text);
      assert.ok(Array.isArray(r.json.tokens), r.text);
      for (const t of r.json.tokens) assert.ok(Number.isInteger(t) && t >= 0, r.text);
      return r.json.tokens;
    };
    const template = async (body) => {
      const r = await srv.post('/apply-template', body);
      assert.equal(r.status, 200, r.text);
      assert.equal(typeof r.json.prompt, 'string', r.text);
      return r.json.prompt;
    };

    it('the rendered prompt tokenizes to usage.prompt_tokens, with and without tools', async () => {
      for (const tools of [undefined, TOOLS]) {
        const body = { messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: words(30, 3) }], tools };
        const prompt = await template(body);
        assert.ok(prompt.includes(SYSTEM), 'the system text is in the prompt');
        if (tools) assert.ok(prompt.includes('read_file'), 'the tool schemas are in the prompt');
        const toks = await tokens(prompt);
        const res = await srv.openai.chat.completions.create({ model: 'tiny', ...body, max_tokens: 4, temperature: 0 });
        assert.equal(toks.length, res.usage.prompt_tokens, `tools: ${!!tools}`);
      }
    });

    it('a conversation prompt is a text prefix of the next turn (up to the generation prompt)', async () => {
      const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'First question.' }];
      const first = await template({ messages, tools: TOOLS });
      const res = await srv.openai.chat.completions.create({ model: 'tiny', messages, tools: TOOLS, max_tokens: 6, temperature: 0 });
      const next = await template({ messages: [...messages, echo(res.choices[0].message), { role: 'user', content: 'Second.' }], tools: TOOLS });
      assert.ok(next.length > first.length);
      let n = 0;
      while (n < first.length && first[n] === next[n]) n++;
      // The next prompt re-renders the reply after `<|im_start|>assistant\n`: it shares at
      // least everything before the generation prompt.
      assert.ok(n >= first.lastIndexOf('<|im_start|>assistant'), `common prefix ${n} of ${first.length} chars`);
    });

    it('/tokenize parses special tokens unless parse_special is false', async () => {
      const text = '<|im_start|>user\nhello<|im_end|>';
      const parsed = await tokens(text);
      const plain = await tokens(text, { parse_special: false });
      assert.ok(plain.length > parsed.length, `${plain.length} plain vs ${parsed.length} parsed`);
      assert.deepEqual(await tokens(text, { parse_special: true, add_special: false }), parsed);
      assert.deepEqual(await tokens(''), []);
    });

    it('malformed bodies are 400s that name the field', async () => {
      assert.equal(assertError(await srv.post('/tokenize', {}), 400, 'no content').param, 'content');
      assert.equal(assertError(await srv.post('/tokenize', { content: 3 }), 400, 'content 3').param, 'content');
      assert.equal(assertError(await srv.post('/tokenize', { content: 'x', parse_special: 'yes' }), 400, 'flag').param,
        'parse_special');
      assertError(await srv.post('/tokenize', 'not json'), 400, 'not json');
      assert.equal(assertError(await srv.post('/apply-template', { messages: [] }), 400, 'no messages').param, 'messages');
    });
  });
}
