// "A restore computes what a cold run computes" (docs/prompt-cache.md "What a hit guarantees"),
// on all four tiny families: for 16 prompts, greedy,
//   - miss == cache off: the first request on a cold cache (cache on, cached_tokens 0) answers
//     what the same request with cache_prompt:false answers, down to the log-probabilities of
//     every token and its runners-up (equal floats: equal logits). On granite-hybrid (Mamba2,
//     whose chunked scan depends on how the prefill is split) this holds because a cache-off
//     prefill is split at the points a first request with the cache on captures at; without
//     that, prompt 0 already differs in the 4th decimal of its first logprob;
//   - hit == miss: the resend restores (cached_tokens > 0) and answers the same. Hybrids: down
//     to the logprobs (the miss took its prompt-end checkpoint, so both compute the last prompt
//     token alone). Dense (qwen3): the same tokens, logprobs within 0.01 nats: the miss computed
//     the last prompt token inside the whole prefill, the hit alone, and the attention kernels
//     round differently for the two batch shapes. qwen35 with --cache-guard-rollback: the same
//     greedy tokens (near-tie runners-up may swap) and logprobs within 0.01 nats, for the same reason (the miss takes its guard by rolling back, not by a split);
//     miss == cache off still bit for bit (a bypass rolls back and replays as the miss does).
//   - the same for 4 prompts that end with a tool result (a hybrid miss then takes its resend guard
//     at prompt - 1 by a split, where a user turn's merges into its history boundary); dense: where
//     the hit's chosen tokens differ from the miss's, they part at a near tie (the miss's pick and a
//     runner-up within 0.01 nats: measured on tool prompt 0 on qwen3 on an AVX-512 Xeon), and the
//     replies part after it;
//   - with a quantized KV cache (-ctk q8_0 -ctv q8_0) on qwen35 and qwen3, 6 prompts each: the
//     same rules (a restore copies the quantized rows as they are).
//
//   cd tests/e2e && node --test restore-equality.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { nearTieDiff, words } from './lib/chat.mjs';
import { modelPath, startServer } from './lib/server.mjs';

const FAMILIES = ['qwen35', 'qwen3', 'kimi-linear', 'granite-hybrid'];
const PROMPTS = 16;

function body(i, extra = {}) {
  return {
    model: 'tiny', max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 5,
    messages: [
      // Each system prompt differs from its first words on: no prompt restores another's.
      { role: 'system', content: `${words(3, 500 + i)} ${words(300, 7)}` },
      { role: 'user', content: words(120, 900 + i) },
    ],
    ...extra,
  };
}

// A conversation whose prompt ends with a tool result (no history boundary: a hybrid miss takes its
// resend guard at prompt - 1, by a split), so the last prompt token's pass differs from a user
// turn's.
const TOOL_PROMPTS = 4;
function toolBody(i, extra = {}) {
  const b = body(100 + i, extra);
  const args = JSON.stringify({ path: `notes-${i}.txt` });
  // The tool's name and description differ per prompt from their first token, so that no prompt
  // shares the tool block (rendered before the system text on some templates) with another.
  b.tools = [{ type: 'function', function: { name: `read${i}_${words(1, 1400 + i)}`, description: words(12, 1500 + i),
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } }];
  b.messages.push({ role: 'assistant', content: '', tool_calls: [{ id: `call_${i}`, type: 'function',
    function: { name: b.tools[0].function.name, arguments: args } }] });
  b.messages.push({ role: 'tool', tool_call_id: `call_${i}`, content: words(60, 1300 + i) });
  return b;
}

// The reply and the log-probabilities of its tokens and their runners-up: equal floats mean
// equal logits, a much finer check than equal greedy tokens.
const tokensOf = (r) => JSON.stringify({ m: r.choices[0].message, f: r.choices[0].finish_reason,
  t: r.choices[0].logprobs.content.map((e) => [e.bytes, e.top_logprobs.map((a) => a.bytes)]) });
// The chosen tokens only (runners-up that are near-ties may swap places when logits differ in
// the low bits).
const chosenOf = (r) => JSON.stringify({ m: r.choices[0].message, f: r.choices[0].finish_reason,
  t: r.choices[0].logprobs.content.map((e) => e.bytes) });
const maxLogprobGap = (a, b) => Math.max(...a.choices[0].logprobs.content.flatMap((e, i) =>
  e.top_logprobs.map((x, j) => Math.abs(x.logprob - b.choices[0].logprobs.content[i].top_logprobs[j].logprob))));
/** Where two runs' runners-up disagree beyond `tol` nats: each listed runner-up of one is listed by
 *  the other with a logprob within `tol`, or is within `tol` of the other's last listed one (a
 *  near tie at the list's end may fall off it). Near ties may swap places. '' when they agree. */
function runnersUpDiff(a, b, tol = 0.01) {
  const [x, y] = [a.choices[0].logprobs.content, b.choices[0].logprobs.content];
  for (const [one, other] of [[x, y], [y, x]]) {
    for (const [i, e] of one.entries()) {
      const theirs = other[i].top_logprobs;
      for (const r of e.top_logprobs) {
        const same = theirs.find((t) => t.token === r.token);
        if (same ? Math.abs(same.logprob - r.logprob) > tol : r.logprob > theirs.at(-1).logprob + tol) {
          return `token ${i}: runner-up ${JSON.stringify(r.token)} (${r.logprob}) against ${JSON.stringify(theirs.map((t) => [t.token, t.logprob]))}`;
        }
      }
    }
  }
  return '';
}
const reply = (r) => JSON.stringify({ m: r.choices[0].message, f: r.choices[0].finish_reason, lp: r.choices[0].logprobs });

// tolerant: hit == miss in the greedy tokens, logprobs within 0.01 nats (dense: the runners-up
// too, near ties within that free to swap places: the kernels' rounding moves a logprob by a few
// 1e-3 nats on AVX2 CPUs).
// A quantized KV cache (-ctk q8_0 -ctv q8_0) on one hybrid and the dense family, with
// fewer prompts: a restore copies the quantized rows as they are, so the same rules hold.
const Q8 = ['-ctk', 'q8_0', '-ctv', 'q8_0'];
const CONFIGS = [...FAMILIES.map((arch) => ({ arch, args: [], tolerant: arch === 'qwen3',
  same: arch === 'qwen3' ? chosenOf : tokensOf, runnersUp: arch === 'qwen3' })),
  { arch: 'qwen35', args: ['--cache-guard-rollback'], tag: 'rollback', tolerant: true, same: chosenOf },
  { arch: 'qwen35', args: Q8, tag: 'q8_0', tolerant: false, same: tokensOf, prompts: 6 },
  { arch: 'qwen3', args: Q8, tag: 'q8_0', tolerant: true, same: chosenOf, runnersUp: true, prompts: 6 }];

for (const { arch, args, tag, tolerant, same, runnersUp = false, prompts = PROMPTS } of CONFIGS) {
  describe(`hit == miss == cache off [${arch}${args.length ? ` ${args.join(' ')}` : ''}]`, { timeout: 600_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `equality-${arch}${tag ? `-${tag}` : ''}`,
        args: ['--ctx-size', '2048', '--repack', ...args] });  // the server's default weights
    });
    after(async () => { await srv?.stopGracefully(); });

    it(`${prompts} prompts and ${TOOL_PROMPTS} ending with a tool result: cache off, then miss, then hit, all the same reply`, async (t) => {
      if (args.includes('q8_0')) assert.match(srv.log(), /K q8_0, V q8_0/, 'the memory plan names the KV types');
      for (let j = 0; j < prompts + TOOL_PROMPTS; j++) {
        const [i, make] = j < prompts ? [j, (x) => body(j, x)] : [`tool ${j - prompts}`, (x) => toolBody(j - prompts, x)];
        const off = await srv.openai.chat.completions.create(make({ cache_prompt: false }));
        const miss = await srv.openai.chat.completions.create(make());
        const hit = await srv.openai.chat.completions.create(make());
        assert.equal(miss.usage.prompt_tokens_details.cached_tokens, 0, `prompt ${i}: the first request hit`);
        assert.ok(hit.usage.prompt_tokens_details.cached_tokens > 0, `prompt ${i}: the resend missed`);
        assert.equal(reply(miss), reply(off), `prompt ${i}: miss != cache off`);
        if (tolerant && same(hit) !== same(miss)) {
          // A flip is allowed only where the miss's pick and a runner-up lie within 0.01 nats (the
          // batch shapes round differently: "What a hit guarantees"); the replies part after it.
          const m = hit.choices[0].message;
          const why = nearTieDiff(`${m.reasoning_content ?? ''}${m.content ?? ''}`, miss);
          t.diagnostic(`prompt ${i}: hit and miss part at a near tie${why ? `: not one: ${why}` : ''}`);
          assert.equal(why, '', `prompt ${i}: hit != miss`);
        } else if (tolerant) {
          assert.ok(maxLogprobGap(hit, miss) <= 0.01, `prompt ${i}: hit and miss logprobs differ by ${maxLogprobGap(hit, miss)}`);
          if (runnersUp) assert.equal(runnersUpDiff(hit, miss), '', `prompt ${i}: hit != miss`);
        } else {
          assert.equal(reply(hit), reply(miss), `prompt ${i}: hit != miss`);
        }
      }
    });
  });
}
