// Aggregates of one benchmark run's per-request records (tools/bench/run.mjs): prefill
// efficiency (computed prefill tokens / oracle tokens; 1.0 is the limit) and TTFT percentiles,
// overall and per request kind, and the requests that computed far more than the oracle.
import fs from 'node:fs';
import path from 'node:path';

/** Request kinds in report order, with their labels; docs/benchmarks/README.md "What the trace is"
 *  describes them. */
export const KINDS = [
  ['warm', 'warm next turn'],
  ['new_session', 'new session, known persona'],
  ['sibling', 'sibling persona'],
  ['edit', 'edit of the last user message'],
  ['regenerate', 'regenerate'],
  ['retry', 'retry after a dropped stream'],
  ['after_restart', 'first requests after restart'],
  ['cold', 'cold (first sight of a persona)'],
  ['dropped', 'dropped stream (aborted by the client)'],
  ['side', 'side call (title, summary, classification, subagent)'],
];

/** Linear-interpolated percentile `p` (0-100) of `xs`; null when empty. */
export function percentile(xs, p) {
  const s = xs.filter((x) => x !== null && x !== undefined && Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return null;
  const k = ((s.length - 1) * p) / 100;
  const lo = Math.floor(k);
  const hi = Math.ceil(k);
  return s[lo] + (s[hi] - s[lo]) * (k - lo);
}

/** An estimate of the TTFT percentiles (ms) the oracle allows a server running at the speed of
 *  `records`' server: each request's TTFT with its server-reported prompt time scaled by oracle / computed
 *  tokens, at least the shortest prompt time of the run (one pass, the fixed cost of a forward
 *  pass); a request without server figures (a dropped stream) keeps its TTFT. A linear model:
 *  prefill time proportional to tokens above one pass, and the time a request waited behind
 *  other requests kept as measured, so no bound. null without server prompt times. */
export function oracleTtft(records) {
  const timed = records.filter((x) => x.ttft_ms && x.server_prompt_ms > 0 && x.computed > 0 && x.oracle !== null &&
    x.oracle !== undefined);
  if (!timed.length) return null;
  const passMs = Math.min(...timed.map((x) => x.server_prompt_ms));
  const est = records.filter((x) => x.ttft_ms).map((x) => {
    if (!timed.includes(x)) return x.ttft_ms;
    const fixed = x.ttft_ms - x.server_prompt_ms;
    return fixed + Math.max(passMs, (x.server_prompt_ms * x.oracle) / x.computed);
  });
  return { p50: percentile(est, 50), p95: percentile(est, 95), pass_ms: passMs };
}

function eff(rs) {
  // Dropped streams are left out: not every server reports what they computed.
  const ok = rs.filter((r) => !r.dropped && r.computed !== null && r.computed !== undefined && r.oracle);
  const computed = ok.reduce((a, r) => a + r.computed, 0);
  const oracle = ok.reduce((a, r) => a + r.oracle, 0);
  const prompt = ok.reduce((a, r) => a + (r.prompt_tokens ?? 0), 0);
  return { n: ok.length, prompt, computed, oracle, ratio: oracle ? computed / oracle : null };
}

function ttft(rs) {
  const xs = rs.filter((r) => !r.error && r.ttft_ms !== null).map((r) => r.ttft_ms);
  return { n: xs.length, p50: percentile(xs, 50), p95: percentile(xs, 95), mean: xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null };
}

/** The conversations' next turns (base kind warm, side calls apart) that reached their history
 *  boundary (run.mjs: history_restored): {n, restored, fraction, reply_only}; n 0 without the
 *  figure. reply_only: of those that did not, the ones whose cached tokens still reached their
 *  conversation's previous prompt, or its resend guard one token before its end (the entry was kept; what was recomputed is the reply, which a
 *  random-weight model's text does not give back as the tokens it decoded, so only a warm-up of
 *  the reply as rendered restores past it); the others lost their conversation's entry. */
export function historyRestored(records) {
  const xs = records.filter((r) => !r.side && typeof r.history_restored === 'boolean' && !r.error);
  const restored = xs.filter((r) => r.history_restored).length;
  const previousPrompt = (r) => {
    let best = null;
    for (const q of records) {
      if (q.conv === r.conv && !q.side && q.i < r.i && Number.isFinite(q.prompt_tokens) && (!best || q.i > best.i)) best = q;
    }
    return best?.prompt_tokens ?? null;
  };
  const replyOnly = xs.filter((r) => {
    if (r.history_restored || !Number.isFinite(r.cached_tokens)) return false;
    const previous = previousPrompt(r);
    // previous - 1: a hybrid's resend guard of that prompt (its state one token before its end)
    // is the entry kept as well.
    return Number.isFinite(previous) && r.cached_tokens >= previous - 1;
  }).length;
  return { n: xs.length, restored, fraction: xs.length ? restored / xs.length : null, reply_only: replyOnly };
}

/** {warm_user_turns: {n, own_only, p50, p95, server_all, server_warmed}, efficiency: {all, by_kind}, ttft: {all, by_kind},
 *  passes: {all, by_kind} ({n, passes, splits}: prefill passes and splits, lineage-server's timing line),
 *  excess: [...]} for `records`. warm_user_turns: warm user turns' TTFT / the prefill time of their
 *  own tokens, client side (own_only: how many computed no more than their own tokens, i.e. came
 *  after a warmed reply); server_all / server_warmed: {n, p50, p95} of the server's own TTFT (its
 *  timing line) over the same, for all of them and for the own_only ones.
 *  With side calls (run.mjs --side-calls), efficiency and ttft also hold `turns` (the conversations'
 *  own requests) and `side` (by side-call kind); history: historyRestored(records).
 *  `excessMin`: the smallest computed - oracle (tokens) listed as an avoidable recompute. */
export function summarize(records, { excessMin = 64 } = {}) {
  const byKind = (f) => Object.fromEntries(KINDS.map(([k]) => [k, f(records.filter((r) => r.kind === k))])
    .filter(([, v]) => v.n > 0));
  const excess = records
    .filter((r) => !r.dropped && r.computed !== null && r.computed !== undefined && Number.isFinite(r.oracle) &&
      r.computed - r.oracle >= excessMin)
    .map((r) => ({ i: r.i, kind: r.kind, base: r.base, conv: r.conv, persona: r.persona, step: r.step, turn: r.turn,
      prompt: r.prompt_tokens, cached: r.cached_tokens, computed: r.computed, oracle: r.oracle,
      excess: r.computed - r.oracle, oracle_from: r.oracle_from, hit: r.server_hit, ttft_ms: r.ttft_ms }))
    .sort((a, b) => b.excess - a.excess);
  // Warm user turns: TTFT over the prefill time of the turn's own tokens (the target: <= 1.1 after
  // a warmed reply; the next turn then prefills only its own message). Client side over all warm
  // user turns; server side (the timing line's ttft_ms, lineage-server only) over all of them and
  // over the turns after a warmed reply (those that computed no more than their own tokens).
  const own = records.filter((r) => !r.error && Number.isFinite(r.ttft_over_own_prefill));
  const ratios = own.map((r) => r.ttft_over_own_prefill);
  const warmed = own.filter((r) => r.computed <= r.own_tokens);
  const server = (rs) => {
    const v = rs.map((r) => r.server_ttft_over_own_prefill).filter(Number.isFinite);
    return { n: v.length, p50: percentile(v, 50), p95: percentile(v, 95) };
  };
  const warmUser = {
    n: own.length,
    own_only: warmed.length,
    p50: percentile(ratios, 50),
    p95: percentile(ratios, 95),
    server_all: server(own),
    server_warmed: server(warmed),
  };
  // Prefill passes and splits (passes cut short at a restore point) from the server's timing line
  // (lineage-server only; docs/architecture.md "What a split costs"): each split is one more
  // forward pass.
  const passes = (rs) => {
    const v = rs.filter((r) => Number.isFinite(r.server_prefill_passes) && Number.isFinite(r.server_prefill_splits));
    return { n: v.length, passes: v.reduce((a, r) => a + r.server_prefill_passes, 0),
      splits: v.reduce((a, r) => a + r.server_prefill_splits, 0) };
  };
  // With side calls (trace --side-calls): the same figures for the conversations' own requests
  // (`turns`) and for the side calls by their kind (`side`), beside those over every request.
  const sides = records.filter((r) => r.side);
  const turns = records.filter((r) => !r.side);
  const bySide = (f) => Object.fromEntries([...new Set(sides.map((r) => r.side))].map((k) => [k, f(sides.filter((r) => r.side === k))]));
  return {
    warm_user_turns: warmUser,
    passes: { all: passes(records), by_kind: byKind(passes) },
    efficiency: { all: eff(records), by_kind: byKind(eff), ...(sides.length ? { turns: eff(turns), side: bySide(eff) } : {}) },
    ttft: { all: ttft(records), by_kind: byKind(ttft), ...(sides.length ? { turns: ttft(turns), side: bySide(ttft) } : {}) },
    history: historyRestored(records),
    excess,
  };
}

/** One configuration's run in `dir` as tools/bench/run.mjs wrote it: {name, summary (NAME.summary.json),
 *  records (NAME.jsonl, one per request), agg (summarize(records))}. Throws when a file is missing. */
export function loadRun(dir, name) {
  const summary = JSON.parse(fs.readFileSync(path.join(dir, `${name}.summary.json`), 'utf8'));
  const records = fs.readFileSync(path.join(dir, `${name}.jsonl`), 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
  return { name, summary, records, agg: summarize(records) };
}
