// Every live conversation back after a restart (docs/prompt-cache.md "Tiers": shutdown), over real HTTP with the openai
// client, on each tiny model: qwen35 (Gated DeltaNet), kimi-linear (KDA), granite-hybrid (Mamba2)
// and qwen3 (dense). The servers run with the cache defaults, the warm-up of the next turn
// included (as in production; the other e2e files turn it off), `--parallel 2`, BASE_ARGS'
// context and debug log, and `--cache-trace` (server logs in build/e2e-logs/restart-*).
//
// Server 1 serves a long conversation A (three turns), then an unrelated shorter conversation B
// (its own system prompt, two turns, ~270 tokens), then a short one-line request C, and stops:
//  - SIGTERM right after C's reply (the graceful shutdown writes every entry), or
//  - SIGKILL once the warm-ups of B's second turn and of C are stored and every entry has been
//    written behind (`--cache-disk-idle-s 1`, then quiet): waited for, GET /v1/cache/stats.
// Server 2 on the same `--cache-dir` resumes A, B and C (the previous messages + the reply the
// server gave + a new user message). Each must restore at least its previous prompt's history
// boundary (hybrid: the `turn` checkpoint there; dense: any prefix, so at least as much): a
// restart may lose the tail of a warm-up that had not finished, never the conversation. Where
// nothing races the stop (A, whose warm-up ended before B began; all three after SIGKILL), the
// resume restores exactly the warmed prefix W, kind `full`: the conversation + the reply as the
// template re-renders it + the next user header (docs/prompt-cache.md "Warm-up of the next
// turn", "Tiers" T2), computed here as the warm-up computes it (/apply-template + /tokenize of
// the next turn with two different user texts, their common prefix).
//
// The third case stops server 1 with SIGTERM while B's next turn is still streaming its reply:
// after the restart that turn, sent again, restores at least what the cache held for B before it
// (B's warmed prefix) and its own history boundary (captured during its prefill), as it does
// when the client leaves before the SIGTERM (the request is then committed as cancelled).
//
// The race in the first case: B's warm-up is rendered while C runs and starts on the idle
// engine when C ends, which is when the SIGTERM comes. A hybrid warm-up prefills in two steps
// (up to its resend guard at W - 1, then the last token); the loop checks for the stop between
// steps, and fails what is in flight. So the SIGTERM lands before the warm-up starts, after it,
// or (about a third of the runs here) between its steps. The third case is not a race.
// Every check is a positive hit: with the cache off every resume restores 0 and fails.
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test --test-concurrency=1 restart.test.mjs
//   (LINEAGE_E2E_ARCHS=qwen35,qwen3 narrows the models; the default here is all four.) The same
//   SIGTERM case runs again with -ctk q8_0 -ctv q8_0 on qwen35 and qwen3.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';

import { chatTokens, lcp } from './lib/agents.mjs';
import { echo, usageOf, words } from './lib/chat.mjs';
import { blobFiles } from './lib/disk.mjs';
import { BASE_ARGS, SCENARIO_ARCHS, SYSTEM, askOn, detail, sys, user } from './lib/scenario.mjs';
import { modelPath, startServer } from './lib/server.mjs';
import { logMark, traceOf } from './lib/trace.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const IDLE_S = 1;
const ARGS = [...BASE_ARGS, '--cache-warmup=true', '--cache-trace'];

/** One conversation: its messages so far and its last completed request (askOn's result). */
class Conversation {
  constructor(name, messages) {
    this.name = name;
    this.messages = messages;
    this.last = null;
    this.turns = 0;
  }

  /** The next turn on `srv` (the previous reply echoed as returned, then `text`); with
   *  `waitWarmup`, returns once the warm-up of the turn after it has run. */
  async turn(srv, text, { waitWarmup = true } = {}) {
    if (this.last) this.messages = this.resume(text);
    const runs = (await srv.cacheStats()).warmup.runs;
    this.last = await askOn(srv, `${this.name} turn ${++this.turns}`, this.messages);
    if (waitWarmup) await srv.waitWarmup(runs, `${this.name} turn ${this.turns}`);
    return this.last;
  }

  /** The next turn's messages. */
  resume(text) {
    return [...this.messages, echo(this.last.res.choices[0].message), user(text)];
  }
}

const resumeText = (c) => `Resume ${c.name}: ${words(12, 900 + c.name.charCodeAt(0))}`;

/** W: the prefix the warm-up of `c`'s next turn stores (two renders of the next turn with
 *  different user texts, their common prefix). */
async function warmedPrefix(srv, c, text) {
  const a = await chatTokens(srv, { messages: c.resume(text) });
  const b = await chatTokens(srv, { messages: c.resume('Zq placeholder message, another text') });
  return lcp(a, b);
}

/** The resume of `c` on the restarted `srv`: {r, seen, bad}, `bad` saying what is wrong ('' when
 *  nothing): it restores at least `floor` tokens and at most `w`, exactly `exact` (kind full)
 *  when given. */
async function resumeOn(srv, c, floor, { w, exact }) {
  const r = await askOn(srv, `${c.name} resumed after the restart`, c.resume(resumeText(c)));
  const want = exact !== undefined ? `exactly ${exact} (full)` : `${floor}..${w}`;
  const seen = `${c.name}: restored ${r.u.cached} (${r.hit}), want ${want} (previous prompt ${c.last.u.prompt} ` +
    `tokens, history boundary ${c.last.trace.hints.history}, warmed prefix ${w})`;
  const ok = r.u.cached >= floor && r.u.cached <= w && (exact === undefined || (r.u.cached === exact && r.hit === 'full'));
  return { r, seen, bad: ok ? '' : `${seen}${detail(r)}` };
}

/** Polls GET /v1/cache/stats until the write-behind is quiet: `warmups` warm-ups stored (stats
 *  warmup.runs) and none running, nothing queued for the disk thread, a file for every entry and
 *  anchor (at least `atLeast`), and no write for IDLE_S + 1 s (an entry a late warm-up changed is
 *  written again before that). */
async function waitWrittenBehind(srv, atLeast, warmups, where) {
  const t0 = Date.now();
  let writes = -1;
  let since = Date.now();
  for (;;) {
    const s = await srv.cacheStats();
    if (s.disk.writes !== writes) { writes = s.disk.writes; since = Date.now(); }
    if (s.warmup.runs >= warmups && s.warmup.active === 0 && s.disk.queued === 0 &&
        s.disk.files >= Math.max(atLeast, s.entries + s.anchors) && Date.now() - since > (IDLE_S + 1) * 1000) return s;
    if (Date.now() - t0 > 20_000) {
      assert.fail(`${where}: the write-behind did not settle in 20 s: ${JSON.stringify(s.disk)} entries ${s.entries} ` +
        `anchors ${s.anchors} warmup ${JSON.stringify(s.warmup)}\n${srv.logTail(30)}`);
    }
    await sleep(100);
  }
}

/** Server 1's turns shared by the cases: A three turns and B one, each warm-up waited for. */
async function conversationsAandB(srv) {
  const A = new Conversation('A', [sys(SYSTEM(2501)), user(`Alpha question: ${words(40, 2502)}`)]);
  await A.turn(srv);
  await A.turn(srv, `Alpha follow-up one: ${words(30, 2503)}`);
  await A.turn(srv, `Alpha follow-up two: ${words(30, 2504)}`);
  const B = new Conversation('B', [sys(`You are a terse release manager.\n\n${words(180, 2511)}`),
    user(`Beta question: ${words(25, 2512)}`)]);
  await B.turn(srv);
  return { A, B };
}

/** C: one line, no system prompt, more than --prompt-cache-min-prefix tokens (it is stored). */
const C_TEXT = `One line: name three ways to make a C++ build faster, ${words(18, 2521)}`;

// The variants: the defaults on every family; a quantized KV cache (-ctk q8_0 -ctv q8_0)
// on qwen35 and qwen3, SIGTERM only (a state restores only into its own KV types; the file
// format is the same for every type).
const VARIANTS = [
  ...SCENARIO_ARCHS.map((arch) => ({ arch, tag: '', args: [], modes: ['SIGTERM', 'SIGKILL'], inflight: true })),
  ...SCENARIO_ARCHS.filter((a) => a === 'qwen35' || a === 'qwen3').map((arch) => ({
    arch, tag: '-q8_0', args: ['-ctk', 'q8_0', '-ctv', 'q8_0'], modes: ['SIGTERM'], inflight: false })),
];

for (const { arch, tag, args, modes, inflight } of VARIANTS) {
  describe(`every live conversation back after a restart [${arch}${args.length ? ` ${args.join(' ')}` : ''}]`, { timeout: 120_000 }, () => {
    const started = [];
    const dirs = [];
    const start = async (d, name, extra = []) => {
      const srv = await startServer({ model: modelPath(arch), name: name + tag, args: [...ARGS, ...args, '--cache-dir', d, ...extra] });
      started.push(srv);
      return srv;
    };
    const newDir = (name) => {
      const d = fs.mkdtempSync(path.join(os.tmpdir(), `lineage-restart-${arch}-${name}-`));
      dirs.push(d);
      return d;
    };
    after(async () => {
      for (const srv of started.splice(0)) await srv.stop();
      for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
    });

    for (const mode of modes) {
      const how = mode === 'SIGTERM' ? 'SIGTERM right after C' : `SIGKILL once written behind (--cache-disk-idle-s ${IDLE_S})`;
      it(`A, then B, then C, ${how}: A, B and C resume from at least their history boundary`, async () => {
        const d = newDir(mode);
        const extra = mode === 'SIGKILL' ? ['--cache-disk-idle-s', String(IDLE_S)] : [];
        const srv1 = await start(d, `restart-${mode}-a-${arch}`, extra);
        const { A, B } = await conversationsAandB(srv1);
        const runs = (await srv1.cacheStats()).warmup.runs;
        // B's second turn, then at once C: B's warm-up, rendered while C runs, starts when C ends.
        await B.turn(srv1, `Beta follow-up: ${words(10, 2513)}`, { waitWarmup: false });
        // C straight to the API: the SIGTERM follows its reply without waiting for the log.
        const C = new Conversation('C', [user(C_TEXT)]);
        const mark = logMark(srv1);
        const resC = await srv1.openai.chat.completions.create({ model: 'tiny', messages: C.messages, max_tokens: 16, temperature: 0 });
        if (mode === 'SIGTERM') {
          const exit = await srv1.stop();
          assert.equal(exit.code, 0, `server 1 did not stop gracefully: ${JSON.stringify(exit)}`);
          assert.match(srv1.log(), /disk tier: writing \d+ cache entries to .* before exit/);
        } else {
          // A, B, C and the anchors of A and B (C has no system prompt) at least, once the
          // warm-ups of B's second turn and of C are stored (the resumes below restore exactly
          // what they stored): waited for, as they start when C has ended.
          await waitWrittenBehind(srv1, 5, runs + 2, `${arch} before SIGKILL`);
          srv1.proc.kill('SIGKILL');
          await srv1.exited;
          await srv1.stop();
        }
        const files = blobFiles(d);
        C.last = { res: resC, u: usageOf(resC), trace: await traceOf(srv1, mark, usageOf(resC)) };

        const srv = await start(d, `restart-${mode}-b-${arch}`, extra);
        let s = await srv.cacheStats();
        assert.equal(s.entries + s.anchors, 0, 'memory starts empty');
        const out = [];
        for (const c of [A, B, C]) {
          const w = await warmedPrefix(srv, c, resumeText(c));
          const exact = c === A || mode === 'SIGKILL' ? w : undefined;
          out.push(await resumeOn(srv, c, c.last.trace.hints.history, { w, exact }));
        }
        console.log(`[${arch} ${mode}] ${out.map((x) => x.seen).join('; ')}; server 1 left ${files.join(' ')}`);
        const bad = out.filter((x) => x.bad).map((x) => x.bad);
        assert.equal(bad.length, 0, `${arch} ${mode}: server 1 left ${files.length} files (${files.join(' ')}), ` +
          `log ${srv1.logPath}\n${bad.join('\n')}`);
        s = await srv.cacheStats();
        assert.equal(s.disk_hits, 3, `${arch} ${mode}: every resume restored from disk: ${JSON.stringify(s.disk)}`);
        await srv.stopGracefully();
      });
    }

    if (inflight) it('SIGTERM while B\'s next turn streams its reply: sent again, it restores at least what the cache held for B', async () => {
      const d = newDir('inflight');
      const srv1 = await start(d, `restart-inflight-a-${arch}`);
      const { A, B } = await conversationsAandB(srv1);
      await B.turn(srv1, `Beta follow-up: ${words(10, 2513)}`);  // its warm-up waited for
      const next = `Beta second follow-up: ${words(10, 2514)}`;
      const held = await warmedPrefix(srv1, B, next);  // what the cache holds for B now
      const msgs = B.resume(next);
      const stream = await srv1.openai.chat.completions.create({
        model: 'tiny', messages: msgs, max_tokens: 2000, temperature: 0, stream: true,
      });
      let chunks = 0;
      let finished = null;
      let stopping = null;
      try {
        for await (const chunk of stream) {
          const delta = chunk.choices?.[0]?.delta ?? {};
          if ((delta.content ?? '') !== '' || (delta.reasoning_content ?? '') !== '') chunks++;
          finished ??= chunk.choices?.[0]?.finish_reason ?? null;
          if (chunks === 3 && !stopping) stopping = srv1.stop();  // SIGTERM mid-reply
        }
      } catch { /* the shutdown cuts the stream */ }
      assert.ok(stopping, `${arch}: the reply ended after ${chunks} chunks, before the SIGTERM`);
      const exit = await stopping;
      assert.equal(exit.code, 0, `server 1 did not stop gracefully: ${JSON.stringify(exit)}`);
      assert.equal(finished, null, 'the stream was cut by the shutdown');
      const files = blobFiles(d);

      const srv = await start(d, `restart-inflight-b-${arch}`);
      const w = await warmedPrefix(srv, A, resumeText(A));
      const a = await resumeOn(srv, A, A.last.trace.hints.history, { w, exact: w });
      const r = await askOn(srv, 'B\'s cut turn sent again after the restart', msgs);
      const own = r.trace.hints.history;
      console.log(`[${arch} in flight] ${a.seen}; B's cut turn sent again: restored ${r.u.cached} (${r.hit}), want >= ` +
        `${Math.max(held, own)} (B's warmed prefix ${held}, the turn's history boundary ${own}); server 1 left ${files.join(' ')}`);
      assert.equal(a.bad, '', a.bad);
      assert.ok(r.u.cached >= held, `${arch}: B held ${held} tokens before the SIGTERM; the turn sent again restored ` +
        `${r.u.cached} (${r.hit}); server 1 left ${files.join(' ')}, log ${srv1.logPath}${detail(r)}`);
      assert.ok(r.u.cached >= own, `${arch}: the turn sent again restored ${r.u.cached}, less than its history ` +
        `boundary ${own}${detail(r)}`);
      await srv.stopGracefully();
    });
  });
}
