#!/usr/bin/env node
// The device check's verdict (scripts/device-check): reads a run directory of scripts/bench with
// the configurations lineage and llama-server (results.json, NAME.summary.json, NAME.engine.json),
// prints lineage-server's figures as ratios to llama-server's and writes DIR/device-check.json.
//
//   node tools/bench/check.mjs DIR [--detected FILE] [--assert]
//
// --detected FILE: a JSON object (what scripts/device-check detected: GPU, backend, model) copied
// into device-check.json as `detected`.
// --assert: exit 1 unless the run is whole: DIR/report.md exists; both servers ran the raw-engine
// part with a figure for every measure and served every request the trace planned, with no failed
// request; every ratio is a finite number. Timings are never asserted: the machine decides those.
//
// Ratios (lineage / llama-server): time ones (trace wall time, TTFT p50 / p95) are below 1 when
// lineage-server is faster; rate ones (decode tok/s, prefill tok/s) are above 1 when it is faster;
// computed prefill tokens are below 1 when it computes fewer.
//
// Rounds (BENCH_TRACE_ROUNDS=N: DIR/roundK/ each hold one round of the trace, DIR/rounds.md their
// table): every round must be whole as above; a trace ratio is the median of the ratios of the
// rounds both servers finished (each round's in `trace_ratios_by_round`, null for an unfinished
// one), and a server's trace figures are its median round's by wall time. The raw-engine part runs
// once, at the top of DIR.
//
// Raw-engine ratios: where the servers ran side by side, their runs alternating (engine.mjs with
// both names writes `interleaved_with`), each is the median of the ratios of run k to llama-server's
// run k (the best runs' ratios then in `engine_best_run_ratios`); otherwise the best runs' ratio.
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { percentile } from './summary.mjs';

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: { detected: { type: 'string' }, assert: { type: 'boolean', default: false } },
});
const dir = positionals[0];
if (!dir) {
  process.stderr.write('usage: check.mjs DIR [--detected FILE] [--assert]\n');
  process.exit(2);
}

const readJson = (f) => {
  try { return JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')); } catch { return null; }
};
const problems = [];
const NAMES = ['lineage', 'llama-server'];
const roundDirs = fs.readdirSync(dir).filter((d) => /^round\d+$/.test(d) && fs.statSync(path.join(dir, d)).isDirectory())
  .sort((a, b) => Number(a.slice(5)) - Number(b.slice(5)));
const traceDirs = roundDirs.length ? roundDirs : ['.'];
const summaries = traceDirs.map((d) => Object.fromEntries(NAMES.map((n) => [n,
  (readJson(path.join(d, 'results.json')) ?? []).find((r) => r.name === n) ?? null])));
const engine = Object.fromEntries(NAMES.map((n) => [n, readJson(`${n}.engine.json`)]));
if (!roundDirs.length && !fs.existsSync(path.join(dir, 'report.md'))) problems.push('report.md is missing');
if (roundDirs.length && !fs.existsSync(path.join(dir, 'rounds.md'))) problems.push('rounds.md is missing');

// Every request of the trace served, none failed, in every round.
const served = {};
traceDirs.forEach((d, i) => {
  const where = roundDirs.length ? `${d}: ` : '';
  for (const n of NAMES) {
    const s = summaries[i][n];
    if (!s) { problems.push(`${where}${n}: no trace results (${n}.summary.json / results.json)`); continue; }
    const row = { planned: s.trace?.total_requests ?? null, requests: s.requests, failures: s.failures,
      parse_errors_kept: s.parse_errors_kept ?? 0 };
    if (roundDirs.length) (served[n] ??= { rounds: {} }).rounds[d] = row; else served[n] = row;
    if (s.requests !== s.trace?.total_requests) problems.push(`${where}${n}: ${s.requests} of ${s.trace?.total_requests} planned requests recorded`);
    if (s.failures !== 0) problems.push(`${where}${n}: ${s.failures} failed requests (see ${n}.driver.log)`);
    if (s.oracle_errors) problems.push(`${where}${n}: ${s.oracle_errors} prompts it would not render or tokenize for the oracle (see ${n}.driver.log)`);
  }
});

const div = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? a / b : null);
const median = (xs) => percentile(xs, 50);
const ratios = {};
const pairs = {};
const put = (key, a, b) => {
  ratios[key] = div(a, b);
  pairs[key] = [a, b];
  if (ratios[key] === null) problems.push(`ratio ${key} is not a number (lineage ${a}, llama-server ${b})`);
};
const [L, R] = NAMES;
const TRACE = {
  trace_wall_time: (s) => s.run_seconds,
  ttft_p50: (s) => s.ttft?.all?.p50,
  ttft_p95: (s) => s.ttft?.all?.p95,
  prefill_computed_tokens: (s) => s.efficiency?.all?.computed,
};
const traceRatiosByRound = {};
const finished = summaries.filter((r) => r[L] && r[R]);
if (!roundDirs.length && finished.length) {
  for (const [key, get] of Object.entries(TRACE)) put(key, get(finished[0][L]), get(finished[0][R]));
} else if (finished.length) {
  for (const [key, get] of Object.entries(TRACE)) {
    traceRatiosByRound[key] = summaries.map((r) => (r[L] && r[R] ? div(get(r[L]), get(r[R])) : null));
    const done = finished.map((r) => div(get(r[L]), get(r[R])));
    ratios[key] = median(done);
    pairs[key] = [median(finished.map((r) => get(r[L]))), median(finished.map((r) => get(r[R])))];
    if (ratios[key] === null || done.includes(null)) {
      problems.push(`ratio ${key} is not a number in every finished round (${JSON.stringify(traceRatiosByRound[key])})`);
    }
  }
}
// A server's trace figures: its median round by wall time (its only round without rounds).
const summary = Object.fromEntries(NAMES.map((n) => {
  const runs = summaries.map((r) => r[n]).filter((s) => Number.isFinite(s?.run_seconds))
    .sort((a, b) => a.run_seconds - b.run_seconds);
  return [n, runs.length ? runs[(runs.length - 1) >> 1] : null];
}));
for (const n of NAMES) if (!engine[n]) problems.push(`${n}: no raw-engine results (${n}.engine.json; see engine.log)`);
// The raw-engine ratios: the best runs' (put), or, where the servers' runs alternated
// (engine.mjs with both names: interleaved_with), the median of run k's ratio to run k's.
const bestRatios = {};
const interleaved = (engine[L]?.interleaved_with ?? []).includes(R);
const putEngine = (key, a, b, aRuns, bRuns, field) => {
  put(key, a, b);
  if (!interleaved) return;
  bestRatios[key] = ratios[key];
  const n = Math.min(aRuns?.length ?? 0, bRuns?.length ?? 0);
  const paired = median(Array.from({ length: n }, (_, i) => div(aRuns[i][field], bRuns[i][field])));
  if (paired !== null) ratios[key] = paired;
};
if (engine[L] && engine[R]) {
  putEngine('decode_1_tok_s', engine[L].decode_1?.client_tok_s, engine[R].decode_1?.client_tok_s,
    engine[L].decode_1?.runs, engine[R].decode_1?.runs, 'client_tok_s');
  putEngine(`decode_${engine[L].streams}_aggregate_tok_s`, engine[L].decode_n?.aggregate_tok_s, engine[R].decode_n?.aggregate_tok_s,
    engine[L].decode_n?.runs, engine[R].decode_n?.runs, 'aggregate_tok_s');
  for (const p of engine[L].prefill ?? []) {
    const q = (engine[R].prefill ?? []).find((x) => x.target === p.target);
    putEngine(`prefill_${p.target}_tok_s`, p.server_tok_s, q?.server_tok_s, p.runs, q?.runs, 'server_tok_s');
  }
}

const figure = (e, s) => ({
  decode_1_tok_s: e?.decode_1?.client_tok_s ?? null,
  decode_n_aggregate_tok_s: e?.decode_n?.aggregate_tok_s ?? null,
  prefill_tok_s: Object.fromEntries((e?.prefill ?? []).map((p) => [p.target, p.server_tok_s ?? null])),
  prefill_prompt_tokens: Object.fromEntries((e?.prefill ?? []).map((p) => [p.target, p.prompt_tokens ?? null])),
  trace_wall_time_s: s?.run_seconds ?? null,
  ttft_p50_ms: s?.ttft?.all?.p50 ?? null,
  ttft_p95_ms: s?.ttft?.all?.p95 ?? null,
  prefill_efficiency: s?.efficiency?.all?.ratio ?? null,
  prompt_tokens: s?.efficiency?.all?.prompt ?? null,
});
const detected = opt.detected ? JSON.parse(fs.readFileSync(opt.detected, 'utf8')) : null;
const out = { detected, served, ratios, ...(interleaved ? { engine_best_run_ratios: bestRatios } : {}), figures: Object.fromEntries(NAMES.map((n) => [n, figure(engine[n], summary[n])])),
  problems };
if (roundDirs.length) {
  out.rounds = roundDirs;
  out.trace_ratios_by_round = traceRatiosByRound;
}
fs.writeFileSync(path.join(dir, 'device-check.json'), JSON.stringify(out, null, 2) + '\n');

const f = (x, d = 2) => (x === null || x === undefined ? '-' : Number(x).toFixed(d));
const lines = ['lineage-server / llama-server (time: below 1 is faster; rate: above 1 is faster):'];
const g = (x) => (Number.isFinite(x) ? (Math.abs(x) >= 100 ? x.toFixed(0) : x.toPrecision(3)) : '-');
for (const [k, v] of Object.entries(ratios)) {
  lines.push(`  ${k.padEnd(28)} ${f(v).padStart(6)}   (lineage ${g(pairs[k][0])}, llama-server ${g(pairs[k][1])})`);
}
if (roundDirs.length) {
  lines.push(`  (trace ratios: the median over ${finished.length} finished of ${roundDirs.length} rounds, the figures in ` +
    'brackets each side\'s own median; each round\'s ratio in device-check.json and rounds.md)');
}
if (interleaved) {
  lines.push('  (raw-engine ratios: the median of the paired runs, the servers alternating; the figures in brackets ' +
    'each side\'s best run; the best runs\' ratios in device-check.json engine_best_run_ratios)');
}
for (const n of NAMES) {
  for (const [where, s] of Object.entries(served[n]?.rounds ?? (served[n] ? { '': served[n] } : {}))) {
    lines.push(`  ${n}${where ? ` ${where}` : ''}: ${s.requests} of ${s.planned} requests, ${s.failures} failed` +
      `${s.parse_errors_kept ? ` (${s.parse_errors_kept} replies kept after a parse error)` : ''}`);
  }
}
for (const p of problems) lines.push(`  problem: ${p}`);
process.stdout.write(lines.join('\n') + '\n');
process.exit(opt.assert && problems.length ? 1 : 0);
