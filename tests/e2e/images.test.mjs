// Images in chat messages (issue 16) over real HTTP with the openai client, on the tiny dense
// model (qwen3) with a random-weight LLaVA-style projector from lineage-mkmodel --mmproj-out:
// image_url parts with data: URIs. An image fills 16 positions whose pseudo-tokens derive from
// its digest (src/cache/media.h), so the cache restores the text before an image that differs,
// and past an image that is the same. Every output equals a cold run (cache_prompt: false).
// http(s) URLs, bytes that are no image, and images sent to a server without --mmproj get a
// 400 in OpenAI's error shape. The test PNGs are made here (tiny, deterministic).
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test images.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { words } from './lib/chat.mjs';
import { png } from './lib/png.mjs';
import { FAMILY, GEN, SERVER_ARGS, Scenario, detail, expectHit, expectSame, sys } from './lib/scenario.mjs';
import { MKMODEL_BIN, modelPath, startServer } from './lib/server.mjs';

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
    // Text still works.
    const ok = await srv.openai.chat.completions.create({ model: 'tiny', max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(ok.object, 'chat.completion');
  });
});
