// Sequence placement (--place-sequences, docs/architecture.md "One micro-batch per step"), on the
// tiny hybrid (qwen35) and dense (qwen3) models: with a KV buffer per sequence llama.cpp computes
// the sequences of a step in one micro-batch only when their ids are consecutive, and a next turn
// continues its parked sequence in place, so two conversations parked on ids 0 and 2 used to
// decode side by side as two graphs a step for the rest of their lives.
//  - Three conversations are parked on ids 0, 1, 2 (--parallel 2 and one spare sequence: three
//    ids), then the next turns of the first and the third run at once: one of them is moved next
//    to the other (exactly one move in GET /v1/cache/stats `sequence_moves` and /metrics), the
//    second conversation's entry leaves the device for RAM to make room, and its own next turn
//    restores from there what it restores from the device without the move. Whether the second
//    of the two is admitted while the first still runs is timing's choice (a fast machine can
//    end the first before the second's body is parsed; then nothing runs to be moved next to):
//    every try asserts that all three next turns restore their conversation, and the scenario
//    runs again on a fresh server until a try moved a sequence (3 tries; the pool's choice of
//    the id is unit-tested in tests/scheduler/test_lifecycle.cpp);
//  - every reply and usage equals a server's with --place-sequences=false (no move there: the
//    control, so that the test cannot pass with placement off), so a move copies the state
//    exactly.
//
//   cd tests/e2e && node --test placement.test.mjs
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { usageOf, words } from './lib/chat.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const KW = { chat_template_kwargs: { enable_thinking: false } };
// --batch-size 16: each next turn's ~1,000 new tokens take ~60 steps (100-450 ms on 2 EPYC cores,
// where the second of the two sent at once was admitted 10-20 ms after the first), so that the
// first still runs when the second is admitted. No warm-ups: they would take the ids. No disk
// tier: an entry written behind (idle, or unwritten for 10 s under load) leaves RAM 5 s later
// on the CPU (--cache-ram-release-s), so the tier the middle conversation restores from would be
// timing's choice (a loaded machine restored it from disk).
const ARGS = ['--parallel', '2', '--cache-device-slots', '1', '--ctx-size', '4096', '--batch-size', '16',
  '--cache-warmup=false', '--cache-disk=false', '--metrics'];

async function send(srv, messages) {
  const res = await srv.openai.chat.completions.create({ model: 'tiny', messages, max_tokens: 6, temperature: 0, ...KW });
  return { text: res.choices[0].message.content ?? '', usage: usageOf(res), tier: res.timings?.cache_tier ?? null };
}

function firstTurn(k) {
  return [{ role: 'system', content: `You are assistant ${k}.\n\n${words(150, 10 + k)}` },
    { role: 'user', content: words(40, 20 + k) }];
}

/** Runs the whole scenario on a fresh server; returns the replies, stats and metrics. */
async function scenario(arch, place) {
  const srv = await startServer({ model: modelPath(arch), name: `placement-${arch}-${place}`,
    args: [...ARGS, `--place-sequences=${place}`] });
  try {
    const convs = [0, 1, 2].map(firstTurn);
    const first = [];
    for (const m of convs) {  // one at a time: parked on 0, 1, 2
      first.push(await send(srv, m));
    }
    const next = convs.map((m, k) => [...m, { role: 'assistant', content: first[k].text },
      { role: 'user', content: words(900, 40 + k) }]);
    const s0 = await srv.cacheStats();
    const both = await Promise.all([send(srv, next[0]), send(srv, next[2])]);
    const s1 = await srv.cacheStats();
    const middle = await send(srv, next[1]);  // the conversation whose entry made room
    const metrics = (await srv.get('/metrics')).text;
    return { first, both, middle, s0, s1, metrics };
  } finally {
    await srv.stopGracefully();
  }
}

for (const arch of ARCHS) {
  describe(`sequence placement [${arch}]`, { timeout: 300_000 }, () => {
    let on;
    let off;

    it('two next turns parked on ids 0 and 2: one moves next to the other, the entry there goes to RAM', async () => {
      const tries = [];
      for (let t = 0; t < 3 && !on; t++) {
        const r = await scenario(arch, true);
        // Both next turns and the middle one restored their conversation, moved or not.
        for (const x of [...r.both, r.middle]) {
          assert.ok(x.usage.cached > 0, JSON.stringify(x.usage));
        }
        const moves = r.s1.sequence_moves.moves - r.s0.sequence_moves.moves;
        tries.push(moves);
        if (moves !== 0) on = r;
      }
      assert.ok(on, `no sequence moved in ${tries.length} tries: the first next turn ended before the second was ` +
        'admitted every time, or nothing is moved next to a running sequence');
      const moves = on.s1.sequence_moves.moves - on.s0.sequence_moves.moves;
      assert.equal(moves, 1, JSON.stringify(on.s1.sequence_moves));
      assert.ok(on.s1.sequence_moves.tokens > on.s0.sequence_moves.tokens);
      assert.match(on.metrics, /^lineage_sequence_moves_total 1$/m);
      // The middle conversation restored from RAM, where the move put its entry.
      assert.equal(on.middle.tier, 'ram');
    });

    it('every reply equals a server\'s that never moves a sequence', async () => {
      off = await scenario(arch, false);
      assert.equal(off.s1.sequence_moves.moves, 0);
      assert.match(off.metrics, /^lineage_sequence_moves_total 0$/m);
      const sameWork = (r) => ({ text: r.text, usage: r.usage });
      assert.deepEqual(on.first.map(sameWork), off.first.map(sameWork));
      assert.deepEqual(on.both.map(sameWork), off.both.map(sameWork));
      assert.deepEqual(sameWork(on.middle), sameWork(off.middle));
      assert.equal(off.middle.tier, 'device');  // there it stayed parked
    });
  });
}
