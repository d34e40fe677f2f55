// Shared by scenarios.test.mjs and scenarios-modes.test.mjs: their request sequences
// against lineage-server, with exact expectations derived from the cache rules below.
//
// The rules relied on (lineage mode, defaults; src/cache/store/store.cpp, src/scheduler/scheduler.cpp):
//  - a restore always leaves >= 1 token to prefill: cached <= prompt - 1;
//  - dense models restore any prefix of a stored sequence (prompt + generated tokens):
//    cached = min(longest common prefix, prompt - 1), kind "prefix";
//  - hybrid models restore only at a stored length: an entry's whole length (kind "full"), one
//    of its checkpoints (turn, guard, divergence), or a pinned anchor (kind "anchor");
//  - a hybrid request captures during its prefill: its history boundary (prompt minus the
//    generation prompt, "turn"), the resend checkpoint at prompt - 1 ("guard"; with
//    --cache-resend-checkpoint=false the guard at prompt - 16 instead, and only when the
//    uncached suffix is >= 256 tokens), and a divergence point where it leaves its closest
//    sibling when that gains >= 256 tokens over its restore point; every family pins the anchor
//    (the anchor hint minus 2 tokens of slack, >= 32 tokens) once per distinct prefix;
//  - entries and restore points shorter than --prompt-cache-min-prefix (32) are not used;
//  - the cache key (bucket) covers the template, its kwargs, tool_choice and the tools; the
//    session key only orders candidates (cross-session when strictly longer);
//  - exact mode (--lineage=false): whole-prompt snapshots only, no checkpoints, no anchors, no
//    absorption;
//  - these suites pin the base capture set (the anchors, turn, guard and divergence points above),
//    so their servers run with the later additions off (BASE_CAPTURE_ARGS: no anchor ladder,
//    divergence checkpoints at the exact token, no last-user-message checkpoint, no message rungs,
//    the entry ends at the prompt end, the guard beside a history boundary GEN tokens before it
//    rather than merged into it); scenarios-ladder.test.mjs asserts those with the defaults.
//
// Token facts of the tiny models' tokenizer (the Qwen3.5 vocab) and template (Qwen3.5), checked
// against the server's own hints where it reports them:
//  - GEN: the generation prompt "<|im_start|>assistant\n<think>\n" is 6 tokens (the server's
//    history hint is prompt - 6);
//  - RERENDER_SHARED: once a newer user message follows it, an assistant turn is re-rendered as
//    "<|im_start|>assistant\n" + content, without the <think> opener, so the next prompt shares
//    only the first 3 tokens of the previous generation prompt;
//  - the anchor hint of a prompt whose first turn is a user message ends after that turn's
//    "<|im_start|>user\n" (the template refuses a render without a user query; the server
//    renders a placeholder user turn), so two prompts with the same system prompt and user
//    messages that differ from their first token share exactly the anchor hint, which is the
//    pinned anchor + ANCHOR_SLACK.
import assert from 'node:assert/strict';

import { assertCompletion, echo, usageOf, words } from './chat.mjs';
import { ARCHS } from './server.mjs';
import { HitTally, logMark, traceOf } from './trace.mjs';

export const ALL_ARCHS = ['qwen35', 'kimi-linear', 'granite-hybrid', 'qwen3'];
export const FAMILY = { qwen35: 'hybrid', 'kimi-linear': 'hybrid', 'granite-hybrid': 'hybrid', qwen3: 'dense' };
/** The architectures whose recurrent state llama.cpp can roll back (llm_arch_supports_rs_rollback
 *  in the engine pin): there the resend guard is taken by rollback, not by a prefill split. */
export const ROLLBACK = { qwen35: true, 'kimi-linear': false, 'granite-hybrid': false, qwen3: false };
export const SCENARIO_ARCHS = process.env.LINEAGE_E2E_ARCHS ? ARCHS : ALL_ARCHS;

export const MAX_TOKENS = 4;
export const GEN = 6;
export const RERENDER_SHARED = 3;
export const ANCHOR_SLACK = 2;
export const GUARD_DISTANCE = 16;
/** The base capture set exactly: the later restore points off (tested in scenarios-ladder). */
export const BASE_CAPTURE_ARGS = ['--cache-ladder-step', '0', '--cache-divergence-slack', '0',
  '--cache-last-user-checkpoint=false', '--cache-message-rungs', '0', '--cache-keep-reply=false',
  '--cache-reply-step', '0', '--cache-guard-merge', '0'];
export const BASE_ARGS = ['--parallel', '2', '--ctx-size', '8192', '--log-level', 'debug'];
export const SERVER_ARGS = [...BASE_ARGS, ...BASE_CAPTURE_ARGS];

export const TOOLS = [
  { type: 'function', function: { name: 'read_file', description: 'Read a file of the repository.',
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } },
  { type: 'function', function: { name: 'run_shell', description: 'Run a shell command in the repository root.',
    parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } } },
];

/** ~300 tokens of system prompt (words() gives ~1.1 tokens a word with this vocab). */
export const SYSTEM = (seed, n = 240) => `You are a careful software engineer working in a C++ repository.\n\n${words(n, seed)}`;
export const sys = (content) => ({ role: 'system', content });
export const user = (content) => ({ role: 'user', content });

/** What two greedy replies must agree on. */
export function replyOf(res) {
  const m = res.choices[0].message;
  return {
    content: m.content ?? null,
    reasoning_content: m.reasoning_content ?? null,
    tool_calls: m.tool_calls ?? null,
    finish_reason: res.choices[0].finish_reason,
    completion_tokens: res.usage.completion_tokens,
  };
}

/** A request (greedy, MAX_TOKENS unless `extra` says otherwise) to `srv`; checks the response
 *  shape and returns {where, body, res, u: {prompt, cached, completion}, hit, trace}. */
export async function askOn(srv, where, messages, extra = {}) {
  const body = { model: 'tiny', messages, max_tokens: MAX_TOKENS, temperature: 0, ...extra };
  const mark = logMark(srv);
  let res;
  try {
    res = await srv.openai.chat.completions.create(body);
  } catch (e) {
    srv.assertAlive();
    throw new Error(`${where}: request failed: ${e.message}; request ${JSON.stringify(body)}`);
  }
  assertCompletion(res, { maxTokens: body.max_tokens, tools: body.tools ?? [] }, where);
  const u = usageOf(res);
  const trace = await traceOf(srv, mark, u);
  assert.equal(trace.hit, res.timings.cache_hit, `${where}: log and timings disagree on the restore kind`);
  return { where, body, res, u, hit: res.timings.cache_hit, trace };
}

/** One lineage-server and the requests of a scenario against it; `ref`, when given, is a server
 *  with the same model and --no-cache-prompt: "a server that never cached anything" (every
 *  request on it prefills from token 0 into an empty KV pool). */
export class Scenario {
  constructor(srv, arch, ref = null) {
    this.srv = srv;
    this.arch = arch;
    this.ref = ref;
    this.hybrid = FAMILY[arch] === 'hybrid';
    this.rollback = false;  // the server takes the resend guard by rollback (--cache-guard-rollback here)
  }

  ask(where, messages, extra = {}) {
    return askOn(this.srv, where, messages, extra);
  }

  /** The request on the never-cached reference server, what "== cold" compares with. */
  async cold(where, messages, extra = {}) {
    assert.ok(this.ref, 'no reference server');
    const r = await askOn(this.ref, `${where} (never-cached server)`, messages, extra);
    assert.equal(r.u.cached, 0, `${where}: the --no-cache-prompt server reported cached tokens`);
    return r;
  }

  /** The request with cache_prompt:false on the server under test. */
  async uncached(where, messages, extra = {}) {
    const r = await this.ask(where, messages, { ...extra, cache_prompt: false });
    assert.equal(r.u.cached, 0, `${where}: cache_prompt:false reported cached tokens`);
    return r;
  }

  async reset() {
    const r = await this.srv.post('/v1/cache/reset', {});
    assert.equal(r.status, 200, `POST /v1/cache/reset -> ${r.status} ${r.text}`);
    const s = await this.stats();
    assert.equal(s.entries + s.anchors, 0, `cache not empty after a reset: ${JSON.stringify(s)}`);
  }

  stats() {
    return this.srv.cacheStats();
  }
}

/** Everything about a request, for a failure message (the evidence for a bug report). */
export function detail(r) {
  return `\n  ${r.where}: prompt_tokens ${r.u.prompt}, cached_tokens ${r.u.cached}, cache_hit ${r.hit}` +
    `\n  server log:\n    ${r.trace.lines.join('\n    ')}` +
    `\n  request: ${JSON.stringify(r.body)}\n  response: ${JSON.stringify(r.res)}`;
}

/** cached_tokens and the restore kind, exactly; also counts the lookup in `tally`. */
export function expectHit(r, cached, kind, tally) {
  const msg = `${r.where}: want cached_tokens ${cached} (${kind})${detail(r)}`;
  assert.equal(r.u.cached, cached, msg);
  assert.equal(r.hit, kind, msg);
  assert.equal(r.res.timings.prompt_n, r.u.prompt - cached, `${r.where}: timings.prompt_n`);
  tally?.add(kind);
}

/** The checkpoints the request captured during its prefill, exactly (in the order taken). */
export function expectCaptures(r, want, anchors = []) {
  assert.deepEqual(r.trace.captures, want, `${r.where}: checkpoints captured${detail(r)}`);
  assert.deepEqual(r.trace.anchors, anchors, `${r.where}: anchors pinned${detail(r)}`);
}

/** A new hybrid request's own captures in lineage mode: its history boundary and prompt - 1. */
export const ownCaptures = (r) => [{ kind: 'turn', n: r.u.prompt - GEN }, { kind: 'guard', n: r.u.prompt - 1 }];
/** A prompt that ends with a tool result takes no history-boundary checkpoint (the next request
 *  either extends it whole or re-renders from an earlier boundary): only the resend guard. */
export const loopStepCaptures = (r) => [{ kind: 'guard', n: r.u.prompt - 1 }];

export function expectSame(a, b, what) {
  assert.deepEqual(replyOf(a.res), replyOf(b.res),
    `${what}: ${a.where} and ${b.where} differ (cached_tokens ${a.u.cached} vs ${b.u.cached})${detail(a)}${detail(b)}`);
}

export async function expectTally(sc, tally, where) {
  const s = await sc.stats();
  assert.deepEqual(tally.delta(s), tally.expected(), `${where}: GET /v1/cache/stats hits by kind: ${JSON.stringify(s)}`);
  return s;
}

/** The verbatim resend and its follow-up on one server: P with max_tokens 1; P again (all but
 *  one token restored); P + reply + a new user message (at least the history of P restored). */
export async function resendAndFollowUp(sc, label) {
  await sc.reset();
  const tally = new HitTally(await sc.stats());
  const P = [sys(SYSTEM(31)), user(`Summarise the build failure below.\n\n${words(60, 32)}`)];
  const r1 = await sc.ask(`${label} P (max_tokens 1)`, P, { max_tokens: 1 });
  expectHit(r1, 0, 'miss', tally);
  const p = r1.u.prompt;
  const r2 = await sc.ask(`${label} P again`, P);
  // The resend checkpoint at |P| - 1 (hybrid), any prefix (dense): all but one token. With the
  // guard taken by rollback, P (max_tokens 1) ended before its last token was decoded again: its
  // entry ends at |P| - 1 and the resend continues it whole.
  expectHit(r2, p - 1, sc.hybrid ? (sc.rollback ? 'full' : 'guard') : 'prefix', tally);
  expectCaptures(r2, []);
  if (sc.ref) expectSame(r2, await sc.cold(`${label} P cold`, P), `${label}: P through the cache vs cold`);
  const r3 = await sc.ask(`${label} P + reply + user`, [...P, echo(r2.res.choices[0].message), user('And the root cause?')]);
  // The Qwen3.5 template re-renders the previous assistant turn without the <think> opener of
  // the generation prompt, so the third prompt leaves P inside P's generation prompt: a hybrid
  // restores P's history boundary |P| - GEN, a dense model the common prefix |P| - GEN + 3.
  expectHit(r3, sc.hybrid ? p - GEN : p - GEN + RERENDER_SHARED, sc.hybrid ? 'turn' : 'prefix', tally);
  await expectTally(sc, tally, label);
  return { p, cached: [r1.u.cached, r2.u.cached, r3.u.cached] };
}
