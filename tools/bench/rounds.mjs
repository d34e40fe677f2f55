#!/usr/bin/env node
// Several rounds of the same trace, read together: DIR/roundK/ each hold one round of
// scripts/bench (NAME.summary.json + NAME.jsonl per configuration, tools/bench/run.mjs). Writes
// DIR/rounds.md and DIR/rounds.json: per round and measure the ratio of each configuration to
// the reference (llama-server), and the median of those ratios over the rounds.
//
//   node tools/bench/rounds.mjs DIR [--ref llama-server]
//
// Why rounds: on a shared 2-core machine the speed of the same binary drifts by more than 20%
// within minutes (docs/benchmarks/README.md "One forward pass less per user turn"), so one round
// of two servers run one after the other says little at the 10% level. scripts/bench runs the
// configurations of round K in the reverse order of round K-1 (A B, B A, A B, ...), so that a
// steady drift falls on both sides, and the median ratio of an odd number of rounds is one
// round's figure, not an average of unlike rounds.
//
// Measures (each a ratio, this configuration / the reference; below 1 is faster or smaller):
//   wall       the trace's wall time (run_seconds, restart included)
//   ttft_p50   client-side TTFT p50 over every request (tools/bench/summary.mjs)
//   ttft_p95   client-side TTFT p95
//   decode     generated tokens / wall time, as a ratio of reference / this (below 1 is faster,
//              like the others)
//   peak_rss   the largest VmHWM over the process's starts
// and, not a ratio: each configuration's prefill efficiency (computed / oracle tokens) per round.
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { loadRun, oracleTtft, percentile } from './summary.mjs';

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: { ref: { type: 'string', default: 'llama-server' } },
});
const dir = positionals[0];
if (!dir) {
  process.stderr.write('usage: rounds.mjs DIR [--ref NAME]\n');
  process.exit(2);
}

const roundDirs = fs.readdirSync(dir).filter((d) => /^round\d+$/.test(d) && fs.statSync(path.join(dir, d)).isDirectory())
  .sort((a, b) => Number(a.slice(5)) - Number(b.slice(5)));
if (roundDirs.length === 0) {
  process.stderr.write(`rounds.mjs: no round1, round2, ... folders in ${dir}\n`);
  process.exit(1);
}

/** One configuration's figures in one round, or null when its files are missing. */
function figures(roundDir, name) {
  const sf = path.join(roundDir, `${name}.summary.json`);
  const jf = path.join(roundDir, `${name}.jsonl`);
  if (!fs.existsSync(sf) || !fs.existsSync(jf)) return null;
  const { summary: s, records, agg } = loadRun(roundDir, name);
  const generated = records.reduce((a, r) => a + (r.completion_tokens ?? 0), 0);
  return {
    wall: s.run_seconds,
    ttft_p50: agg.ttft.all.p50,
    ttft_p95: agg.ttft.all.p95,
    decode: s.run_seconds ? generated / s.run_seconds : null,
    peak_rss: s.after_run?.peak_rss_bytes ?? null,
    efficiency: agg.efficiency.all.ratio,
    failures: s.failures,
    oracle_ttft: oracleTtft(records),
  };
}

const names = new Set();
for (const d of roundDirs) {
  for (const f of fs.readdirSync(path.join(dir, d))) if (f.endsWith('.summary.json')) names.add(f.slice(0, -'.summary.json'.length));
}
if (!names.has(opt.ref)) {
  process.stderr.write(`rounds.mjs: the reference ${opt.ref} ran in no round\n`);
  process.exit(1);
}
const others = [...names].filter((n) => n !== opt.ref).sort();
const MEASURES = ['wall', 'ttft_p50', 'ttft_p95', 'decode', 'peak_rss'];
// decode is a rate: the reference over this configuration, so that below 1 is faster everywhere.
// Ratios and medians are kept to 4 decimals (rounds.json), more than any figure here can tell.
const round4 = (v) => (v === null || v === undefined ? null : Math.round(v * 1e4) / 1e4);
const ratioOf = (m, x, r) => (x?.[m] && r?.[m] ? round4(m === 'decode' ? r[m] / x[m] : x[m] / r[m]) : null);

const result = { ref: opt.ref, rounds: roundDirs, configurations: {} };
for (const name of others) {
  const perRound = roundDirs.map((d) => {
    const x = figures(path.join(dir, d), name);
    const r = figures(path.join(dir, d), opt.ref);
    return { round: d, figures: x, ref: r, ratios: Object.fromEntries(MEASURES.map((m) => [m, ratioOf(m, x, r)])) };
  });
  const median = Object.fromEntries(MEASURES.map((m) => [m, round4(percentile(perRound.map((p) => p.ratios[m]), 50))]));
  result.configurations[name] = { per_round: perRound, median };
}
// What the oracle allows at the reference's own speed (summary.mjs oracleTtft, an estimate), as
// ratios to the reference's measured TTFT.
{
  const perRound = roundDirs.map((d) => {
    const r = figures(path.join(dir, d), opt.ref);
    const o = r?.oracle_ttft;
    return { round: d, ttft_p50: o && r.ttft_p50 ? round4(o.p50 / r.ttft_p50) : null,
      ttft_p95: o && r.ttft_p95 ? round4(o.p95 / r.ttft_p95) : null };
  });
  result.oracle_allows = { per_round: perRound, median: {
    ttft_p50: round4(percentile(perRound.map((p) => p.ttft_p50), 50)),
    ttft_p95: round4(percentile(perRound.map((p) => p.ttft_p95), 50)) } };
}
fs.writeFileSync(path.join(dir, 'rounds.json'), JSON.stringify(result, null, 2) + '\n');

const f2 = (x) => (x === null || x === undefined ? '-' : x.toFixed(2));
const out = [`# ${roundDirs.length} rounds against ${opt.ref}`, '',
  'Each ratio is this configuration / the reference in the same round (decode: the reference\'s ' +
  'generated tokens/s over this one\'s), so below 1 is faster or smaller; the last row is the ' +
  'median over the rounds. Rounds alternate the order in which the servers ran. Decode counts the ' +
  'generated tokens each server reported: a stream that llama-server ended with a reply parse error ' +
  'reports none (each round\'s report.md counts them), so there this ratio favours lineage. Written by ' +
  '`tools/bench/rounds.mjs`.', ''];
for (const name of others) {
  const c = result.configurations[name];
  out.push(`## ${name}`, '',
    '| round | wall | TTFT p50 | TTFT p95 | decode (time a token) | peak RSS | prefill efficiency (this / reference) | wall s (this / reference) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const p of c.per_round) {
    out.push(`| ${p.round} | ${MEASURES.map((m) => f2(p.ratios[m])).join(' | ')} | ` +
      `${f2(p.figures?.efficiency)} / ${f2(p.ref?.efficiency)} | ${p.figures?.wall?.toFixed(1) ?? '-'} / ${p.ref?.wall?.toFixed(1) ?? '-'} |`);
  }
  out.push(`| **median** | ${MEASURES.map((m) => `**${f2(c.median[m])}**`).join(' | ')} | | |`, '');
}
const oa = result.oracle_allows;
out.push(`## What the oracle allows (TTFT, at ${opt.ref}'s speed)`, '',
  `${opt.ref}'s TTFT with each request's prompt time scaled to the oracle's tokens (at least one pass), over its ` +
  'measured TTFT (`tools/bench/summary.mjs` oracleTtft). An estimate, not a bound: it scales each request\'s own ' +
  'prefill, not the time it waited behind other requests\' prefills, which a cache shortens too (most in the tail).', '',
  '| round | TTFT p50 | TTFT p95 |', '|---|---:|---:|',
  ...oa.per_round.map((p) => `| ${p.round} | ${f2(p.ttft_p50)} | ${f2(p.ttft_p95)} |`),
  `| **median** | **${f2(oa.median.ttft_p50)}** | **${f2(oa.median.ttft_p95)}** |`, '');
fs.writeFileSync(path.join(dir, 'rounds.md'), out.join('\n'));
process.stdout.write(out.join('\n') + '\n');
