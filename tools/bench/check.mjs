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
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

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
const summary = Object.fromEntries(NAMES.map((n) => [n, (readJson('results.json') ?? []).find((r) => r.name === n) ?? null]));
const engine = Object.fromEntries(NAMES.map((n) => [n, readJson(`${n}.engine.json`)]));
if (!fs.existsSync(path.join(dir, 'report.md'))) problems.push('report.md is missing');

// Every request of the trace served, none failed.
const served = {};
for (const n of NAMES) {
  const s = summary[n];
  if (!s) { problems.push(`${n}: no trace results (${n}.summary.json / results.json)`); continue; }
  served[n] = { planned: s.trace?.total_requests ?? null, requests: s.requests, failures: s.failures,
    parse_errors_kept: s.parse_errors_kept ?? 0 };
  if (s.requests !== s.trace?.total_requests) problems.push(`${n}: ${s.requests} of ${s.trace?.total_requests} planned requests recorded`);
  if (s.failures !== 0) problems.push(`${n}: ${s.failures} failed requests (see ${n}.driver.log)`);
  if (s.oracle_errors) problems.push(`${n}: ${s.oracle_errors} prompts it would not render or tokenize for the oracle (see ${n}.driver.log)`);
}

const div = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? a / b : null);
const ratios = {};
const pairs = {};
const put = (key, a, b) => {
  ratios[key] = div(a, b);
  pairs[key] = [a, b];
  if (ratios[key] === null) problems.push(`ratio ${key} is not a number (lineage ${a}, llama-server ${b})`);
};
const [L, R] = NAMES;
if (summary[L] && summary[R]) {
  put('trace_wall_time', summary[L].run_seconds, summary[R].run_seconds);
  put('ttft_p50', summary[L].ttft?.all?.p50, summary[R].ttft?.all?.p50);
  put('ttft_p95', summary[L].ttft?.all?.p95, summary[R].ttft?.all?.p95);
  put('prefill_computed_tokens', summary[L].efficiency?.all?.computed, summary[R].efficiency?.all?.computed);
}
for (const n of NAMES) if (!engine[n]) problems.push(`${n}: no raw-engine results (${n}.engine.json; see ${n}.engine.log)`);
if (engine[L] && engine[R]) {
  put('decode_1_tok_s', engine[L].decode_1?.client_tok_s, engine[R].decode_1?.client_tok_s);
  put(`decode_${engine[L].streams}_aggregate_tok_s`, engine[L].decode_n?.aggregate_tok_s, engine[R].decode_n?.aggregate_tok_s);
  for (const p of engine[L].prefill ?? []) {
    const q = (engine[R].prefill ?? []).find((x) => x.target === p.target);
    put(`prefill_${p.target}_tok_s`, p.server_tok_s, q?.server_tok_s);
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
const out = { detected, served, ratios, figures: Object.fromEntries(NAMES.map((n) => [n, figure(engine[n], summary[n])])),
  problems };
fs.writeFileSync(path.join(dir, 'device-check.json'), JSON.stringify(out, null, 2) + '\n');

const f = (x, d = 2) => (x === null || x === undefined ? '-' : Number(x).toFixed(d));
const lines = ['lineage-server / llama-server (time: below 1 is faster; rate: above 1 is faster):'];
const g = (x) => (Number.isFinite(x) ? (Math.abs(x) >= 100 ? x.toFixed(0) : x.toPrecision(3)) : '-');
for (const [k, v] of Object.entries(ratios)) {
  lines.push(`  ${k.padEnd(28)} ${f(v).padStart(6)}   (lineage ${g(pairs[k][0])}, llama-server ${g(pairs[k][1])})`);
}
for (const n of NAMES) {
  const s = served[n];
  if (s) lines.push(`  ${n}: ${s.requests} of ${s.planned} requests, ${s.failures} failed` +
    `${s.parse_errors_kept ? ` (${s.parse_errors_kept} replies kept after a parse error)` : ''}`);
}
for (const p of problems) lines.push(`  problem: ${p}`);
process.stdout.write(lines.join('\n') + '\n');
process.exit(opt.assert && problems.length ? 1 : 0);
