// Images in chat messages (docs/prompt-cache.md "Images") over real HTTP with the openai client, on
// the tiny dense model (qwen3) with a random-weight LLaVA-style projector from lineage-mkmodel
// --mmproj-out: image_url parts with data: URIs. An image fills 16 positions whose pseudo-tokens
// derive from its digest (src/cache/rule/media.h), so the cache restores the text before an image that
// differs, and past an image that is the same. Every output equals a cold run (cache_prompt:
// false). http(s) URLs, bytes that are no image, and images sent to a server without --mmproj get a
// 400 in OpenAI's error shape. With the warm-up on (--cache-warmup): the user turn after a turn
// with an image computes exactly its own tokens (the warm-up placed the image as the request did),
// and the Responses API's input_image parts (openai responses.create) go through the same path: a
// previous_response_id continuation restores past the previous prompt, another image under the same
// text restores exactly the text before it. The test PNGs are made here (tiny, deterministic).
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test images.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { echo, nearTieDiff, words } from './lib/chat.mjs';
import { chatTokens, lcp } from './lib/agents.mjs';
import { asInput, assertResponse, chatMessageOf } from './lib/dialects.mjs';
import { png, pngClaiming } from './lib/png.mjs';
import { ANCHOR_SLACK, BASE_ARGS, FAMILY, GEN, SERVER_ARGS, Scenario, detail, expectHit, expectSame, sys, user } from './lib/scenario.mjs';
import { MKMODEL_BIN, modelPath, startServer } from './lib/server.mjs';
import { logMark } from './lib/trace.mjs';

/** Positions one image fills with the projector of lineage-mkmodel (32x32 images, 8x8 patches). */
const IMAGE_TOKENS = 16;
const MARKER = '<__media__>';

const dataUri = (buf) => `data:image/png;base64,${buf.toString('base64')}`;
const IMG1 = dataUri(png(24, 24, 3));
const IMG2 = dataUri(png(24, 24, 5));
const IMG3 = dataUri(png(40, 40, 11));

const withImage = (text, url, after = '') => ({
  role: 'user',
  content: [{ type: 'text', text }, { type: 'image_url', image_url: { url } }, ...(after ? [{ type: 'text', text: after }] : [])],
});

/** Writes the projector for `model` to `file` (lineage-mkmodel --mmproj-out). */
function makeProjector(model, file) {
  const r = spawnSync(MKMODEL_BIN, ['-o', model, '--lora-only', '--mmproj-out', file, '--seed', '1'],
    { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, `lineage-mkmodel --mmproj-out failed:\n${r.stdout}\n${r.stderr}`);
}

/** The openai client's rejection of `body`: status, error type, param and message. */
async function rejection(srv, body) {
  try {
    const res = await srv.openai.chat.completions.create(body);
    assert.fail(`expected a 400, got ${JSON.stringify(res)}`);
  } catch (e) {
    if (e.code === 'ERR_ASSERTION') throw e;
    return { status: e.status, type: e.error?.type, param: e.error?.param, message: e.error?.message ?? e.message };
  }
}

// qwen3: dense; granite-hybrid: hybrid (Mamba2 + NoPE attention). The qwen35 family positions
// images with M-RoPE, which this server refuses at startup.
for (const arch of ['qwen3', 'granite-hybrid']) describe(`images [${arch}]`, { timeout: 300_000 }, () => {
  let srv;
  let sc;
  let dir;
  const model = modelPath(arch);
  const dense = FAMILY[arch] === 'dense';
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-images-'));
    const mmproj = path.join(dir, 'mmproj.gguf');
    makeProjector(model, mmproj);
    srv = await startServer({ model, name: `images-${arch}`, args: [...SERVER_ARGS, '--cache-trace', '--mmproj', mmproj] });
    sc = new Scenario(srv, arch);
  });
  after(async () => {
    await srv?.stopGracefully();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const SYS = sys(`You describe pictures for the user. ${words(50, 171)}`);
  const ASK = 'What is in this picture?';
  const conv = (url) => [SYS, withImage(ASK, url, 'Answer in one line.')];

  /** Prompt tokens before the first image of `messages`: /apply-template, cut at the marker. */
  async function tokensBeforeImage(messages) {
    const r = await srv.post('/apply-template', { messages });
    assert.equal(r.status, 200, r.text);
    const at = r.json.prompt.indexOf(MARKER);
    assert.ok(at > 0, `no image marker in the rendered prompt: ${r.json.prompt}`);
    const t = await srv.post('/tokenize', { content: r.json.prompt.slice(0, at) });
    return t.json.tokens.length;
  }

  it('text + image 1, then image 2: the text before the image; image 1 again: a hit; outputs equal cold', async () => {
    await sc.reset();
    const EIGHT = { max_tokens: 8 };  // enough tokens for the two images' replies to part
    const before = await sc.stats();
    const nBefore = await tokensBeforeImage(conv(IMG1));
    assert.ok(nBefore >= 32, `the text before the image is ${nBefore} tokens (< min prefix)`);

    const a1 = await sc.ask('text + image 1', conv(IMG1), EIGHT);
    expectHit(a1, 0, 'miss');
    // The image fills IMAGE_TOKENS positions between the text before and after its marker
    // (each tokenized on its own).
    const rendered = (await srv.post('/apply-template', { messages: conv(IMG1) })).json.prompt;
    const nAfter = (await srv.post('/tokenize', { content: rendered.slice(rendered.indexOf(MARKER) + MARKER.length) })).json.tokens.length;
    assert.equal(a1.u.prompt, nBefore + IMAGE_TOKENS + nAfter, `prompt tokens with one image${detail(a1)}`);

    const b = await sc.ask('text + image 2', conv(IMG2), EIGHT);
    if (dense) {
      // Any prefix restores, and the prompt parts from the stored one exactly where the image
      // starts: the text before it, not one image position.
      expectHit(b, nBefore, 'prefix');
    } else {
      // The turn checkpoint the first request captured at the image's start.
      expectHit(b, nBefore, 'turn');
      assert.ok(a1.trace.captures.some((c) => c.kind === 'turn' && c.n === nBefore), detail(a1));
    }
    assert.match(b.trace.lines.join('\n'), /where image 1 starts \(mm_digest differs\)/, detail(b));

    const a2 = await sc.ask('text + image 1 again', conv(IMG1), EIGHT);
    expectHit(a2, a2.u.prompt - 1, dense ? 'prefix' : 'guard');
    expectSame(a2, a1, 'image 1 twice');

    const coldA = await sc.uncached('image 1 cold', conv(IMG1), { ...EIGHT, logprobs: true });
    const coldB = await sc.uncached('image 2 cold', conv(IMG2), { ...EIGHT, logprobs: true });
    expectSame(a1, coldA, 'image 1 vs cold');
    expectSame(b, coldB, 'image 2 vs cold');
    // The two images are different inputs to the model: the first token's log-probability
    // differs (the greedy tokens may agree on a random-weight model).
    assert.notEqual(coldA.res.choices[0].logprobs.content[0].logprob, coldB.res.choices[0].logprobs.content[0].logprob,
      'the two images gave the same distribution: is the image decoded?');

    const after = await sc.stats();
    const d = (k, sub) => (after[k]?.[sub] ?? 0) - (before[k]?.[sub] ?? 0);
    assert.equal(d('key_differs', 'mm_digest'), 1, JSON.stringify(after.key_differs));
    assert.equal(d('short_hits_by_cause', 'key_differs'), 1, JSON.stringify(after.short_hits_by_cause));
  });

  it('a conversation with images continues across turns with the usual hits; outputs equal cold', async () => {
    await sc.reset();
    const t1 = conv(IMG1);
    const r1 = await sc.ask('turn 1', t1, { max_tokens: 6 });
    expectHit(r1, 0, 'miss');
    const reply1 = r1.res.choices[0].message;
    const t2 = [...t1, { role: 'assistant', content: reply1.content ?? '' }, { role: 'user', content: 'And its colours?' }];
    const r2 = await sc.ask('turn 2', t2, { max_tokens: 6 });
    // The whole first turn, its image included, up to where the assistant turn is re-rendered.
    assert.ok(r2.u.cached >= r1.u.prompt - GEN && r2.u.cached < r2.u.prompt, `turn 2 restored too little${detail(r2)}`);
    assert.equal(r2.hit, dense ? 'prefix' : 'turn', detail(r2));
    const reply2 = r2.res.choices[0].message;
    // Turn 3 brings a second image of another size.
    const t3 = [...t2, { role: 'assistant', content: reply2.content ?? '' }, withImage('Compare with this one:', IMG3)];
    const r3 = await sc.ask('turn 3 with another image', t3, { max_tokens: 6 });
    assert.ok(r3.u.cached >= r2.u.prompt - GEN && r3.u.cached < r3.u.prompt - IMAGE_TOKENS, `turn 3${detail(r3)}`);
    const r3again = await sc.ask('turn 3 resent', t3, { max_tokens: 6 });
    expectHit(r3again, r3.u.prompt - 1, dense ? 'prefix' : 'guard');
    for (const [r, msgs] of [[r1, t1], [r2, t2], [r3, t3]]) {
      expectSame(r, await sc.uncached(`${r.where} cold`, msgs, { max_tokens: 6 }), `${r.where} vs cold`);
    }
    expectSame(r3again, r3, 'turn 3 resent');
  });

  if (dense) it('refuses an http(s) image URL and bytes that are no image with a 400 naming the field', async () => {
    const http = await rejection(srv, { model: 'tiny', messages: [withImage(ASK, 'https://example.com/cat.png')] });
    assert.equal(http.status, 400);
    assert.equal(http.type, 'invalid_request_error');
    assert.equal(http.param, 'messages[0].content[1].image_url.url');
    assert.match(http.message, /fetches nothing.*data:image\/png;base64/);

    const junk = await rejection(srv, { model: 'tiny', messages: [withImage(ASK, `data:image/png;base64,${Buffer.from('not a picture').toString('base64')}`)] });
    assert.equal(junk.status, 400);
    assert.equal(junk.param, 'messages[0].content[1].image_url');
    assert.match(junk.message, /not an image/);

    const plain = await rejection(srv, { model: 'tiny', messages: [withImage(ASK, 'data:text/plain;base64,aGVsbG8=')] });
    assert.equal(plain.status, 400);
    assert.match(plain.message, /send an image/);

    // Past --image-max-pixels (32 Mi by default), from the header: nothing is decoded.
    const huge = await rejection(srv, { model: 'tiny', messages: [withImage(ASK, dataUri(pngClaiming(8193, 4097)))] });
    assert.equal(huge.status, 400);
    assert.equal(huge.param, 'messages[0].content[1].image_url');
    assert.match(huge.message, /the image is 8193x4097 pixels, more than this server takes \(33554432 pixels, --image-max-pixels\)/);
    srv.assertAlive();
  });

  if (dense) it('/v1/messages/count_tokens counts an image as the tokens /v1/messages runs', async () => {
    const body = { model: 'tiny', max_tokens: 2, messages: [{ role: 'user', content: [
      { type: 'text', text: ASK }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: IMG1.split(',')[1] } }] }] };
    const counted = await srv.post('/v1/messages/count_tokens', body);
    assert.equal(counted.status, 200, counted.text);
    const ran = await srv.post('/v1/messages', body);
    assert.equal(ran.status, 200, ran.text);
    assert.equal(counted.json.input_tokens, ran.json.usage.input_tokens + ran.json.usage.cache_read_input_tokens +
      (ran.json.usage.cache_creation_input_tokens ?? 0));
    const text = await srv.post('/v1/messages/count_tokens', { ...body, messages: [{ role: 'user', content: ASK }] });
    assert.equal(counted.json.input_tokens - text.json.input_tokens >= IMAGE_TOKENS, true,
      `the image added ${counted.json.input_tokens - text.json.input_tokens} tokens`);
  });
});

/** A reply as what two greedy runs must agree on, from a chat completion or a response. */
const chatReply = (res) => ({ content: res.choices[0].message.content ?? '',
  reasoning: res.choices[0].message.reasoning_content ?? '', tokens: res.usage.completion_tokens });
const responseReply = (r) => {
  const m = chatMessageOf(r.output);
  return { content: m.content, reasoning: m.reasoning_content ?? '', tokens: r.usage.output_tokens };
};
/** A restored reply against a cold chat completion of the same prompt (asked with logprobs):
 *  equal on a hybrid; on a dense model up to a near tie, as a dense hit prefills its prompt in
 *  other passes than the cold run (docs/prompt-cache.md "What a hit guarantees"). */
function expectAsCold(reply, cold, dense, what) {
  if (!dense) {
    assert.deepEqual(reply, chatReply(cold), what);
    return;
  }
  assert.equal(reply.tokens, chatReply(cold).tokens, what);
  assert.equal(nearTieDiff(`${reply.reasoning}${reply.content}`, cold), '', what);
}

// The warm-up of the next turn (on by default in the server; off in the e2e servers above unless
// named) after requests with images, and the Responses API's input_image parts.
for (const arch of ['qwen3', 'granite-hybrid']) describe(`images with the warm-up and the Responses API [${arch}]`, { timeout: 300_000 }, () => {
  let srv;
  let dir;
  const model = modelPath(arch);
  const dense = FAMILY[arch] === 'dense';
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-images-warm-'));
    const mmproj = path.join(dir, 'mmproj.gguf');
    makeProjector(model, mmproj);
    srv = await startServer({ model, name: `images-warm-${arch}`,
      args: [...BASE_ARGS, '--cache-trace', '--cache-warmup', '--mmproj', mmproj] });
  });
  after(async () => {
    await srv?.stopGracefully();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const SYSTEM_TEXT = `You describe pictures for the user. ${words(50, 171)}`;
  const ASK = 'What is in this picture?';
  const conv = (url) => [sys(SYSTEM_TEXT), withImage(ASK, url, 'Answer in one line.')];
  const imageInput = (url) => [{ role: 'user', content: [{ type: 'input_text', text: ASK },
    { type: 'input_image', image_url: url, detail: 'auto' }, { type: 'input_text', text: 'Answer in one line.' }] }];
  const chat = (messages, extra = {}) => srv.openai.chat.completions.create({ model: 'tiny', messages, max_tokens: 8,
    temperature: 0, ...extra });
  const respond = (body) => srv.openai.responses.create({ model: 'tiny', instructions: SYSTEM_TEXT,
    max_output_tokens: 8, temperature: 0, ...body });
  const cachedOf = (r) => r.usage.input_tokens_details.cached_tokens;
  const LOGPROBS = { logprobs: true, top_logprobs: 3 };

  /** Tokens of the one-image prompt of `messages`: the text around the image marker, each side
   *  tokenized on its own, plus the image's positions. Also the tokens before the image. */
  async function imagePrompt(messages) {
    const r = await srv.post('/apply-template', { messages });
    assert.equal(r.status, 200, r.text);
    const at = r.json.prompt.indexOf(MARKER);
    assert.ok(at > 0, `no image marker in the rendered prompt: ${r.json.prompt}`);
    const count = async (content) => (await srv.post('/tokenize', { content, add_special: false, parse_special: true })).json.tokens.length;
    const before = await count(r.json.prompt.slice(0, at));
    return { before, total: before + IMAGE_TOKENS + await count(r.json.prompt.slice(at + MARKER.length)) };
  }

  /** The tokens of the last (user) message's own text onwards, generation prompt included:
   *  where the prompt of `messages` leaves the same conversation with another last message. */
  async function ownTokens(messages) {
    const p = await chatTokens(srv, { messages });
    const other = structuredClone(messages);
    other.at(-1).content = `Zulu ${other.at(-1).content}`;
    return p.length - lcp(p, await chatTokens(srv, { messages: other }));
  }

  it('chat: after a turn with an image, the warmed next user turn computes exactly its own tokens; outputs equal cold', async () => {
    const t1 = conv(IMG1);
    let before = await srv.cacheStats();
    const r1 = await chat(t1);
    assert.equal(r1.usage.prompt_tokens, (await imagePrompt(t1)).total);
    // The pause of a user reading the reply: the warm-up of the next turn runs meanwhile.
    await srv.waitWarmup(before.warmup.runs, 'after the turn with an image');
    const t2 = [...t1, echo(r1.choices[0].message), user('And its colours?')];
    const own = await ownTokens(t2);
    before = await srv.cacheStats();
    const r2 = await chat(t2);
    const cached = r2.usage.prompt_tokens_details.cached_tokens;
    assert.equal(r2.usage.prompt_tokens - cached, own,
      `turn 2 computed ${r2.usage.prompt_tokens - cached} of ${r2.usage.prompt_tokens} tokens; its own message + ` +
      `generation prompt are ${own}; turn 1's prompt was ${r1.usage.prompt_tokens}\n${srv.logTail(30)}`);
    assert.ok(cached > r1.usage.prompt_tokens, 'past turn 1 (its image included) and its reply');
    const s = await srv.cacheStats();
    assert.equal(s.warmup.hits, before.warmup.hits + 1, `a warm-up hit: ${JSON.stringify(s.warmup)}`);
    assert.equal(s.warmup.wasted, before.warmup.wasted);
    await srv.waitWarmup(before.warmup.runs, 'after turn 2');  // its own warm-up, before the cold runs

    assert.deepEqual(chatReply(r1), chatReply(await chat(t1, { cache_prompt: false })), 'turn 1 vs cold');
    expectAsCold(chatReply(r2), await chat(t2, { cache_prompt: false, ...LOGPROBS }), dense, 'turn 2 vs cold');
  });

  it('Responses input_image: previous_response_id restores past the previous prompt, another image the text before it; outputs equal cold', async () => {
    const reset = await srv.post('/v1/cache/reset', {});
    assert.equal(reset.status, 200, reset.text);
    const p1 = await imagePrompt(conv(IMG1));
    let before = await srv.cacheStats();
    const r1 = await respond({ input: imageInput(IMG1) });
    assertResponse(r1, { maxOutputTokens: 8 }, 'turn 1');
    // The same prompt as the chat dialect's rendering of the same conversation.
    assert.equal(r1.usage.input_tokens, p1.total);
    assert.equal(cachedOf(r1), 0);
    await srv.waitWarmup(before.warmup.runs, 'after the response with an image');

    // The stored conversation holds the image (its data URI): the continuation re-renders it.
    before = await srv.cacheStats();
    const r2 = await respond({ previous_response_id: r1.id, input: 'And its colours?' });
    assertResponse(r2, { maxOutputTokens: 8 }, 'turn 2');
    const t2 = [...conv(IMG1), chatMessageOf(r1.output), user('And its colours?')];
    const own = await ownTokens(t2);
    assert.ok(cachedOf(r2) >= r1.usage.input_tokens, `turn 2 restores past turn 1's prompt: ${JSON.stringify(r2.usage)}`);
    assert.equal(r2.usage.input_tokens - cachedOf(r2), own, `turn 2: ${JSON.stringify(r2.usage)}\n${srv.logTail(30)}`);
    assert.equal((await srv.cacheStats()).warmup.hits, before.warmup.hits + 1);
    await srv.waitWarmup(before.warmup.runs, 'after turn 2');

    // Another image under the same text: at most the text before the image. Dense: exactly that
    // prefix. Hybrid: the image-start checkpoint of turn 1 was thinned away as the conversation
    // grew (more than --cache-max-checkpoints per lineage: the oldest turn boundaries go), so the
    // pinned anchor: the system prompt up to the user turn's header, less ANCHOR_SLACK.
    const anchorHint = lcp(await chatTokens(srv, { messages: conv(IMG1) }),
      await chatTokens(srv, { messages: [sys(SYSTEM_TEXT), user('Zulu')] }));
    before = await srv.cacheStats();
    const mark = logMark(srv);
    const r3 = await respond({ input: imageInput(IMG2), store: false });
    assertResponse(r3, { maxOutputTokens: 8 }, 'another image');
    assert.equal(r3.usage.input_tokens, p1.total);
    assert.equal(cachedOf(r3), dense ? p1.before : anchorHint - ANCHOR_SLACK,
      `another image (${p1.before} tokens before it, anchor hint ${anchorHint}): ${JSON.stringify(r3.usage)}\n${srv.logTail(30)}`);
    await srv.waitWarmup(before.warmup.runs, 'after another image');  // a store: false reply is warmed too
    // (Read after the warm-up: the log pipe may lag the response.)
    assert.match(srv.log().slice(mark), /request \d+: lookup of \d+ tokens .*where image 1 starts \(mm_digest differs\)/);

    const cold = (body) => respond({ ...body, store: false, cache_prompt: false });
    const c1 = await cold({ input: imageInput(IMG1) });
    assert.equal(cachedOf(c1), 0);
    assert.deepEqual(responseReply(r1), responseReply(c1), 'turn 1 vs cold');
    const c2 = await cold({ input: [...imageInput(IMG1), ...asInput(r1.output), { role: 'user', content: 'And its colours?' }] });
    assert.equal(c2.usage.input_tokens, r2.usage.input_tokens, 'the stored conversation and the items resent agree');
    // The restored turns against the chat dialect's cold run of the same prompt, which gives
    // the logprobs a dense model's near ties are read from.
    const chat2 = await chat(t2, { cache_prompt: false, ...LOGPROBS });
    assert.deepEqual(responseReply(c2), chatReply(chat2), 'turn 2: the Responses and the chat cold runs');
    expectAsCold(responseReply(r2), chat2, dense, 'turn 2 vs cold');
    expectAsCold(responseReply(r3), await chat(conv(IMG2), { cache_prompt: false, ...LOGPROBS }), dense,
      'another image vs cold');
    // The Responses prompt is the chat prompt: the same greedy reply on /v1/chat/completions.
    assert.deepEqual(responseReply(r1), chatReply(await chat(conv(IMG1), { cache_prompt: false })), 'turn 1 vs chat cold');
  });

  if (dense) it('Responses refuses an http(s) image URL and a file_id with a 400 in its error shape', async () => {
    const refuse = async (part, param, pattern) => {
      try {
        const r = await respond({ input: [{ role: 'user', content: [{ type: 'input_text', text: ASK }, part] }] });
        assert.fail(`expected a 400, got ${JSON.stringify(r)}`);
      } catch (e) {
        if (e.code === 'ERR_ASSERTION') throw e;
        assert.equal(e.status, 400);
        assert.equal(e.error?.type, 'invalid_request_error');
        assert.equal(e.error?.param, param);
        assert.match(e.error?.message ?? '', pattern);
      }
    };
    await refuse({ type: 'input_image', image_url: 'https://example.com/cat.png' }, 'input[0].content[1].image_url',
      /fetches nothing.*data:image\/png;base64/);
    await refuse({ type: 'input_image', file_id: 'file-abc123' }, 'input[0].content[1].file_id', /no Files API/);
    srv.assertAlive();
  });
});

describe('images without --mmproj', { timeout: 120_000 }, () => {
  let srv;
  before(async () => {
    srv = await startServer({ model: modelPath('qwen3'), name: 'images-none', args: SERVER_ARGS });
  });
  after(async () => { await srv?.stopGracefully(); });

  it('answers a request with an image with a 400 that says to start the server with --mmproj', async () => {
    const r = await rejection(srv, { model: 'tiny', messages: [withImage('What is this?', IMG1)] });
    assert.equal(r.status, 400);
    assert.equal(r.type, 'invalid_request_error');
    assert.equal(r.param, 'messages[0].content[1].image_url');
    assert.match(r.message, /no multimodal projector \(start it with --mmproj FILE\)/);
    // count_tokens refuses it the same way.
    const counted = await srv.post('/v1/messages/count_tokens', { model: 'tiny', messages: [{ role: 'user', content: [
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: IMG1.split(',')[1] } }] }] });
    assert.equal(counted.status, 400, counted.text);
    assert.match(counted.text, /no multimodal projector/);
    // Text still works.
    const ok = await srv.openai.chat.completions.create({ model: 'tiny', max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(ok.object, 'chat.completion');
  });
});
