// docs/api-fields.md walked: every request field of /v1/chat/completions that
// the table says is honoured changes the output as documented, every field it says is refused
// gets a 400 naming it, and the documented no-ops leave the output as it was. Also the stop and
// usage rules (a stop right after a leading space takes the space too; a stream carries usage
// only with stream_options.include_usage) and logprobs (OpenAI's shape with bytes, consistent
// with the tokens).
// Thinking is off (enable_thinking false) so that the reply is all content.
//
//   cd tests/e2e && node --test fields.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { assertError, readSSE, streamChat, words } from './lib/chat.mjs';
import { ARCHS, REPO_ROOT, modelPath, startServer } from './lib/server.mjs';

const NO_THINK = { enable_thinking: false };

function base(seed, max = 12) {
  return {
    model: 'tiny', max_tokens: max, temperature: 0, chat_template_kwargs: NO_THINK,
    messages: [{ role: 'system', content: words(25, seed) }, { role: 'user', content: words(10, seed + 1) }],
  };
}

/** Raw POST /v1/chat/completions; {status, json, text}. */
async function post(srv, body) {
  return srv.post('/v1/chat/completions', body);
}

/** The concatenated bytes of logprobs.content entries, as a Buffer. */
function lpBytes(entries) {
  return Buffer.from(entries.flatMap((e) => e.bytes));
}

/** The reply text the tokens spell: the chat parser drops the whitespace that opens the content
 *  (after the template's generation prompt), the logprobs keep every token. */
function spelled(entries) {
  return lpBytes(entries).toString('utf8').trimStart();
}

function assertLogprobs(entries, topN, where) {
  assert.ok(Array.isArray(entries) && entries.length > 0, `${where}: no logprobs.content`);
  for (const e of entries) {
    assert.equal(typeof e.token, 'string', where);
    assert.ok(e.logprob <= 0 && Number.isFinite(e.logprob), `${where}: logprob ${e.logprob}`);
    assert.ok(Array.isArray(e.bytes), `${where}: bytes`);
    assert.equal(e.top_logprobs.length, topN, `${where}: ${e.top_logprobs.length} alternatives, asked ${topN}`);
    for (let i = 1; i < e.top_logprobs.length; i++) {
      assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob, `${where}: top_logprobs not descending`);
    }
    if (topN > 0) {
      // Greedy: the sampled token is the most likely one, with the same log-probability.
      assert.deepEqual(e.top_logprobs[0].bytes, e.bytes, `${where}: top_logprobs[0] is not the sampled token`);
      assert.equal(e.top_logprobs[0].logprob, e.logprob, `${where}: sampled logprob`);
    }
  }
}

const arch = ARCHS[0];

describe(`request fields as docs/api-fields.md states them [${arch}]`, { timeout: 600_000 }, () => {
  let srv;
  let tokenize;
  before(async () => {
    srv = await startServer({ model: modelPath(arch), name: `fields-${arch}`, args: ['--ctx-size', '4096'] });
    tokenize = async (text) => {
      const r = await srv.post('/tokenize', { content: text });
      assert.equal(r.status, 200, r.text);
      return r.json.tokens;
    };
  });
  after(async () => { await srv?.stopGracefully(); });

  it('the table lists every field this test walks', () => {
    const table = fs.readFileSync(path.join(REPO_ROOT, 'docs/api-fields.md'), 'utf8');
    for (const f of ['response_format', 'tool_choice', 'parallel_tool_calls', 'logprobs', 'top_logprobs', 'seed',
      'presence_penalty', 'frequency_penalty', 'logit_bias', 'grammar', 'n_probs', 'top_k', 'min_p', 'repeat_penalty',
      'stop', 'stream_options', 'n', 'audio', 'modalities', 'prediction', 'web_search_options', 'functions',
      'function_call', 'verbosity', 'store', 'metadata', 'user', 'service_tier']) {
      assert.match(table, new RegExp('^\\|[^|\\n]*`' + f + '`', 'm'), `docs/api-fields.md has no row for ${f}`);
    }
  });

  it('logprobs + top_logprobs: one entry per token, bytes spell the content (non-streamed)', async () => {
    const r = await srv.openai.chat.completions.create({ ...base(1), logprobs: true, top_logprobs: 3 });
    const c = r.choices[0];
    assertLogprobs(c.logprobs.content, 3, 'non-streamed');
    assert.equal(c.logprobs.content.length, r.usage.completion_tokens, 'one entry per generated token');
    assert.equal(spelled(c.logprobs.content), c.message.content);
    const plain = await srv.openai.chat.completions.create(base(1));
    assert.equal(plain.choices[0].logprobs, null, 'no logprobs unless asked');
    assert.equal(plain.choices[0].message.content, c.message.content, 'logprobs do not change the reply');
  });

  it('logprobs streamed: the entries arrive with the chunks and agree with the non-streamed ones', async () => {
    const body = { ...base(2), logprobs: true, top_logprobs: 2 };
    const r = await srv.openai.chat.completions.create(body);
    const s = await streamChat(srv.openai, body);
    const entries = s.chunks.flatMap((c) => c.choices?.[0]?.logprobs?.content ?? []);
    assertLogprobs(entries, 2, 'streamed');
    assert.deepEqual(entries, r.choices[0].logprobs.content);
    assert.equal(spelled(entries), s.content);
  });

  it('logprobs without alternatives, n_probs, and the limits', async () => {
    const r = await srv.openai.chat.completions.create({ ...base(3), logprobs: true });
    assertLogprobs(r.choices[0].logprobs.content, 0, 'logprobs only');
    const n = await post(srv, { ...base(3), n_probs: 4 });
    assert.equal(n.status, 200, n.text);
    assertLogprobs(n.json.choices[0].logprobs.content, 4, 'n_probs');
    assert.equal(assertError(await post(srv, { ...base(3), logprobs: true, top_logprobs: 21 }), 400).param, 'top_logprobs');
    assert.equal(assertError(await post(srv, { ...base(3), top_logprobs: 2 }), 400).param, 'top_logprobs');
  });

  it('seed: the same seed samples the same reply, another seed another one', async () => {
    const body = { ...base(4, 24), temperature: 1.0 };
    const a = await srv.openai.chat.completions.create({ ...body, seed: 11 });
    const b = await srv.openai.chat.completions.create({ ...body, seed: 11 });
    const c = await srv.openai.chat.completions.create({ ...body, seed: 12 });
    assert.equal(a.choices[0].message.content, b.choices[0].message.content, 'same seed, other reply');
    assert.notEqual(a.choices[0].message.content, c.choices[0].message.content, 'other seed, same reply');
  });

  it('top_k 1 and min_p 1 sample the greedy reply at temperature 1', async () => {
    const greedy = (await srv.openai.chat.completions.create(base(5, 16))).choices[0].message.content;
    for (const extra of [{ top_k: 1 }, { min_p: 1 }]) {
      const r = await post(srv, { ...base(5, 16), temperature: 1, seed: 3, ...extra });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].message.content, greedy, JSON.stringify(extra));
    }
  });

  it('logit_bias: +100 forces a token, -100 bans the greedy one', async () => {
    const ids = await tokenize(' lineage');
    assert.equal(ids.length >= 1, true);
    const tok = ids[0];
    const lp = await srv.openai.chat.completions.create({ ...base(6, 5), logit_bias: { [tok]: 100 }, logprobs: true });
    assert.equal(lp.choices[0].logprobs.content.length, 5);
    const piece = Buffer.from(lp.choices[0].logprobs.content[0].bytes).toString('utf8');
    assert.deepEqual(await tokenize(piece), [tok], `the forced token ${JSON.stringify(piece)} is not ${tok}`);
    for (const e of lp.choices[0].logprobs.content) assert.equal(Buffer.from(e.bytes).toString('utf8'), piece);
    assert.equal(lp.choices[0].message.content, piece.repeat(5).trimStart());
    const greedy = await srv.openai.chat.completions.create({ ...base(6, 3), logprobs: true });
    const first = greedy.choices[0].logprobs.content[0];
    const firstId = (await tokenize(Buffer.from(first.bytes).toString('utf8')))[0];
    const banned = await srv.openai.chat.completions.create({ ...base(6, 3), logprobs: true, logit_bias: { [firstId]: -100 } });
    assert.notDeepEqual(banned.choices[0].logprobs.content[0].bytes, first.bytes, 'the banned token was sampled');
    assert.equal(assertError(await post(srv, { ...base(6), logit_bias: { 99999999: 5 } }), 400).param, 'logit_bias');
    assert.equal(assertError(await post(srv, { ...base(6), logit_bias: { 5: 101 } }), 400).param, 'logit_bias');
  });

  it('presence_penalty and frequency_penalty: the first repeat within 2 nats of the runner-up is replaced', async () => {
    // From the greedy reply's logprobs: the first position k whose token already appeared and
    // whose lead over the next token is < 2 (a logprob difference is a logit difference). A
    // penalty of 2 must keep the reply up to k and change the token at k.
    let found = 0;
    for (let seed = 7; seed < 27 && found < 2; seed++) {
      const body = { ...base(seed, 40), logprobs: true, top_logprobs: 2 };
      const greedy = await srv.openai.chat.completions.create(body);
      const e = greedy.choices[0].logprobs.content;
      const seen = new Set();
      let k = -1;
      for (let i = 0; i < e.length; i++) {
        const key = e[i].bytes.join(',');
        const lead = e[i].top_logprobs[0].logprob - e[i].top_logprobs[1].logprob;
        if (seen.has(key) && lead < 2 && lead > 1e-3) { k = i; break; }
        seen.add(key);
      }
      if (k < 0) continue;
      found++;
      for (const extra of [{ presence_penalty: 2 }, { frequency_penalty: 2 }]) {
        const r = await srv.openai.chat.completions.create({ ...body, ...extra });
        const p = r.choices[0].logprobs.content;
        assert.deepEqual(p.slice(0, k).map((x) => x.bytes), e.slice(0, k).map((x) => x.bytes),
          `${JSON.stringify(extra)} seed ${seed}: the reply changed before position ${k}`);
        assert.notDeepEqual(p[k]?.bytes, e[k].bytes, `${JSON.stringify(extra)} seed ${seed}: position ${k} kept its repeat`);
      }
    }
    assert.ok(found > 0, 'no greedy reply with a close repeat in 20 prompts');
    assert.equal(assertError(await post(srv, { ...base(7), presence_penalty: 2.5 }), 400).param, 'presence_penalty');
    assert.equal(assertError(await post(srv, { ...base(7), frequency_penalty: -3 }), 400).param, 'frequency_penalty');
  });

  it('repeat_penalty changes a greedy reply that repeats', async () => {
    let changed = false;
    for (let seed = 7; seed < 12 && !changed; seed++) {
      const body = base(seed, 40);
      const plain = (await srv.openai.chat.completions.create(body)).choices[0].message.content;
      const r = await post(srv, { ...body, repeat_penalty: 3 });
      assert.equal(r.status, 200, r.text);
      changed = r.json.choices[0].message.content !== plain;
    }
    assert.ok(changed, 'repeat_penalty 3 changed none of 5 greedy replies');
  });

  it('grammar (GBNF): the reply is in the language; a bad grammar is a 400', async () => {
    const r = await post(srv, { ...base(8, 20), grammar: 'root ::= ("yes" | "no") "."' });
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.choices[0].message.content, /^(yes|no)\.$/);
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    assert.equal(assertError(await post(srv, { ...base(8), grammar: 'root ::= (' }), 400).param, 'grammar');
  });

  it('response_format: an invalid type is a 400 naming response_format', async () => {
    for (const rf of [{ type: 'xml' }, { type: 'json_schema' }, 'json', { type: 'json_schema', json_schema: { name: 'x', schema: 5 } }]) {
      const e = assertError(await post(srv, { ...base(9), response_format: rf }), 400, JSON.stringify(rf));
      assert.match(e.param, /^response_format/, JSON.stringify(e));
    }
    const ok = await post(srv, { ...base(9), response_format: { type: 'text' } });
    assert.equal(ok.status, 200, ok.text);
  });

  it('refused fields get a 400 that names them', async () => {
    const refused = {
      n: 2, audio: { voice: 'alloy', format: 'wav' }, modalities: ['text', 'audio'], prediction: { type: 'content', content: 'x' },
      web_search_options: {}, functions: [{ name: 'f' }], function_call: 'auto', verbosity: 'low',
    };
    assert.equal(assertError(await post(srv, { ...base(10), stream_options: { include_usage: true } }), 400).param,
      'stream_options', 'stream_options without stream');
    for (const [k, v] of Object.entries(refused)) {
      const e = assertError(await post(srv, { ...base(10), [k]: v }), 400, k);
      assert.equal(e.param, k, `${k}: ${JSON.stringify(e)}`);
    }
  });

  it('documented no-ops leave the reply as it was', async () => {
    const plain = (await srv.openai.chat.completions.create(base(11))).choices[0].message.content;
    const r = await post(srv, { ...base(11), store: false, metadata: { a: 'b' }, user: 'u1', service_tier: 'auto',
      modalities: ['text'], n: 1, safety_identifier: 'x', stream_options: null, parallel_tool_calls: true });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, plain);
  });

  it('stop right after a leading space: the space goes too (streamed and not)', async () => {
    const body = { ...base(12, 16), logprobs: true };
    const full = await srv.openai.chat.completions.create(body);
    const entries = full.choices[0].logprobs.content;
    const texts = entries.map((e) => Buffer.from(e.bytes).toString('utf8'));
    const i = texts.findIndex((t, k) => k > 0 && /^ \S{2,}$/.test(t) && !texts.slice(0, k).join('').includes(t.slice(1)));
    assert.ok(i > 0, `no token with a leading space to stop on in ${JSON.stringify(texts)}`);
    const stop = texts[i].slice(1);
    const want = texts.slice(0, i).join('').trimStart();
    const cut = await srv.openai.chat.completions.create({ ...base(12, 16), stop: [stop] });
    assert.equal(cut.choices[0].message.content, want, `stop ${JSON.stringify(stop)}`);
    assert.equal(cut.choices[0].finish_reason, 'stop');
    const s = await streamChat(srv.openai, { ...base(12, 16), stop: [stop] });
    assert.equal(s.content, want, 'streamed');
    // The token right at the start: content "" (it was " ").
    const first = texts[0].trimStart();
    if (texts[0].startsWith(' ') && first.length > 0) {
      const z = await srv.openai.chat.completions.create({ ...base(12, 16), stop: [first] });
      assert.equal(z.choices[0].message.content, '');
    }
  });

  it('stream usage: none without include_usage; with it, usage null on every chunk but a last choices: [] one', async () => {
    for (const include of [false, true]) {
      const body = { ...base(13, 6), stream: true };
      if (include) body.stream_options = { include_usage: true };
      const res = await fetch(`${srv.url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
      });
      const { data } = await readSSE(res);
      assert.equal(data.at(-1), '[DONE]');
      const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
      if (!include) {
        for (const c of chunks) assert.ok(!('usage' in c), `usage without include_usage: ${JSON.stringify(c)}`);
      } else {
        const last = chunks.at(-1);
        assert.deepEqual(last.choices, []);
        assert.equal(last.usage.completion_tokens, 6);
        for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null, JSON.stringify(c));
      }
    }
  });
});
