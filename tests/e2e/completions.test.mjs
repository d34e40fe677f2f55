// POST /v1/completions (a raw prompt, docs/prompt-cache.md "Completions (raw prompt)") with the
// official `openai` client, for the tiny hybrid (qwen35) and dense (qwen3) models: string and
// token-array prompts (the same tokens, the same completion), streaming (== the non-streamed text;
// include_usage), the exact restore of a resent prompt and of a longer one, a raw prompt equal to a
// rendered chat conversation restoring the chat's entry, and the 400s (echo, suffix, several
// prompts).
//
//   cd tests/e2e && node --test completions.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { words } from './lib/chat.mjs';
import { FAMILY, SERVER_ARGS, SYSTEM } from './lib/scenario.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const MAX = 8;

for (const arch of ARCHS) {
  const hybrid = FAMILY[arch] === 'hybrid';
  describe(`completions [${arch}]`, { timeout: 240_000 }, () => {
    let srv;
    before(async () => { srv = await startServer({ model: modelPath(arch), name: `completions-${arch}`, args: SERVER_ARGS }); });
    after(async () => { await srv?.stopGracefully(); });

    const complete = (body) => srv.openai.completions.create({ model: 'tiny', max_tokens: MAX, temperature: 0, ...body });
    const tokens = async (content) => (await srv.post('/tokenize', { content, add_special: true, parse_special: true })).json.tokens;
    const cached = (r) => r.usage.prompt_tokens_details.cached_tokens;

    function assertText(r, where) {
      assert.equal(r.object, 'text_completion', where);
      assert.match(r.id, /^cmpl-/, where);
      assert.equal(r.choices.length, 1, where);
      assert.equal(typeof r.choices[0].text, 'string', where);
      assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason), `${where}: ${r.choices[0].finish_reason}`);
      if (r.choices[0].finish_reason === 'length') assert.equal(r.usage.completion_tokens, MAX, where);
      assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, where);
    }

    it('string and token-array prompts: same tokens, same completion; a resend restores all but one token', async () => {
      const prompt = `${SYSTEM(601)}\n\nQuestion: ${words(30, 602)}\nAnswer:`;
      const ids = await tokens(prompt);
      const a = await complete({ prompt, user: 'raw-1' });
      assertText(a, 'string prompt');
      assert.equal(a.usage.prompt_tokens, ids.length);
      assert.equal(cached(a), 0);
      const b = await complete({ prompt: ids, user: 'raw-1' });
      assertText(b, 'token prompt');
      assert.equal(b.usage.prompt_tokens, ids.length);
      assert.equal(cached(b), ids.length - 1, 'a resent prompt restores all but its last token');
      assert.equal(b.choices[0].text, a.choices[0].text);
      // cache_prompt: false bypasses the cache both ways.
      const c = await complete({ prompt, user: 'raw-1', cache_prompt: false });
      assert.equal(cached(c), 0);
      assert.equal(c.choices[0].text, a.choices[0].text);
    });

    it('a longer prompt with the same prefix restores the whole first prompt', async () => {
      const prompt = `${SYSTEM(611)}\n\nQuestion: ${words(30, 612)}\nAnswer:`;
      const a = await complete({ prompt });
      const b = await complete({ prompt: `${prompt} ${words(40, 613)}` });
      assertText(b, 'longer');
      // hybrid: the entry's whole state at its prompt's length ("full"); dense: any prefix of the
      // stored sequence (prompt + its completion), so at least the first prompt.
      if (hybrid) assert.equal(cached(b), a.usage.prompt_tokens);
      else assert.ok(cached(b) >= a.usage.prompt_tokens, `cached ${cached(b)} < ${a.usage.prompt_tokens}`);
    });

    it('streamed: the same text, then usage with include_usage, then [DONE]', async () => {
      const prompt = `Once upon a time ${words(80, 621)}`; // >= --prompt-cache-min-prefix tokens
      const plain = await complete({ prompt });
      const stream = await complete({ prompt, stream: true, stream_options: { include_usage: true } });
      let text = '';
      let finish = null;
      let usage = null;
      for await (const c of stream) {
        assert.equal(c.object, 'text_completion');
        if (c.choices.length) {
          text += c.choices[0].text;
          if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
        } else {
          usage = c.usage;
        }
      }
      assert.equal(text, plain.choices[0].text);
      assert.equal(finish, plain.choices[0].finish_reason);
      assert.equal(usage.prompt_tokens, plain.usage.prompt_tokens);
      assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
      assert.equal(usage.prompt_tokens_details.cached_tokens, plain.usage.prompt_tokens - 1);
    });

    it('a raw prompt equal to a rendered chat conversation restores the chat entry', async () => {
      const messages = [{ role: 'system', content: SYSTEM(631) }, { role: 'user', content: `Check ${words(30, 632)}` }];
      const c = await srv.openai.chat.completions.create({ model: 'tiny', messages, max_tokens: MAX, temperature: 0 });
      const { prompt } = (await srv.post('/apply-template', { messages })).json;
      const r = await complete({ prompt });
      assert.equal(r.usage.prompt_tokens, c.usage.prompt_tokens);
      assert.equal(cached(r), c.usage.prompt_tokens - 1);
    });

    it('refused with a 400 naming the field: echo, suffix, several prompts, a bad token id', async () => {
      for (const [body, param] of [[{ prompt: 'x', echo: true }, 'echo'], [{ prompt: 'x', suffix: 'y' }, 'suffix'],
        [{ prompt: ['a', 'b'] }, 'prompt'], [{ prompt: [1, 2, 1e9] }, 'prompt[2]'], [{}, 'prompt']]) {
        const r = await srv.post('/v1/completions', { model: 'tiny', ...body });
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.equal(r.json.error.param, param, JSON.stringify(r.json));
      }
    });
  });
}
