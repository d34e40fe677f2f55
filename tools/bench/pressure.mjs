#!/usr/bin/env node
// The pressure benchmark's report (scripts/bench --pressure; docs/benchmarks/README.md "Under a
// tight budget (--pressure)"): reads the runs in DIR (NAME.summary.json, NAME.jsonl and
// NAME.server.log, written by tools/bench/run.mjs) and writes DIR/pressure.md and
// DIR/pressure.json: per disk mode a table of lineage (value eviction, the default), lineage-recency
// (--cache-eviction recency) and llama-server at the same RAM budget, with the ratios
// lineage / lineage-recency and lineage / llama-server.
//
//   node tools/bench/pressure.mjs DIR
//
// Runs read: disk tier off: lineage-nodisk, lineage-recency-nodisk; disk tier on (lineage's
// default): lineage, lineage-recency; llama-server (it has no disk tier: its one run stands in
// both tables). A run that is missing leaves its column empty.
//
// Measures: wall time (the whole trace, restart included); client-side TTFT p50/p95 over the
// conversations' own requests (turns: side calls apart) and over every request; prefill tokens
// computed against the oracle's (efficiency: computed / oracle, 1.00 the limit), every request
// and turns only; the conversations' next turns whose reported cached tokens reached their
// history boundary (run.mjs history_restored); evictions by reason and rejections by cause
// (lineage-server: GET /v1/cache/stats read before each stop, the counts before the trace's
// restart + after it; llama-server: its log's prompt-cache lines at -lv 4); disk-tier restores and
// files deleted; peak RSS.
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { loadRun } from './summary.mjs';

const { positionals } = parseArgs({ allowPositionals: true, options: {} });
const dir = positionals[0];
if (!dir) {
  process.stderr.write('usage: pressure.mjs DIR\n');
  process.exit(2);
}

const exists = (name) => fs.existsSync(path.join(dir, `${name}.summary.json`)) && fs.existsSync(path.join(dir, `${name}.jsonl`));
const load = (name) => (exists(name) ? loadRun(dir, name) : null);

/** A lineage-server run's counters by key (`evictions`, `rejections`, or `disk.evictions`, ...):
 *  the stats read before the trace's restart + those read at the end (they start at 0 again). */
function lineageCounts(run, pick) {
  const before = pick(run.summary.restart?.before?.cache?.stats ?? {});
  const after = pick(run.summary.after_run?.cache?.stats ?? {});
  if (before === undefined && after === undefined) return null;
  if (typeof before === 'number' || typeof after === 'number') return (before ?? 0) + (after ?? 0);
  const out = {};
  for (const src of [before ?? {}, after ?? {}]) {
    for (const [k, v] of Object.entries(src)) if (typeof v === 'number') out[k] = (out[k] ?? 0) + v;
  }
  return out;
}

/** llama-server's prompt-cache evictions, from its log (both starts): its lines at -lv 4. */
function llamaCounts(run) {
  let text;
  try { text = fs.readFileSync(path.join(dir, `${run.name}.server.log`), 'utf8'); } catch { return null; }
  const n = (re) => (text.match(re) ?? []).length;
  return {
    evictions: {
      capacity: n(/making room for prompt cache entry, removing oldest entry/g) + n(/cache size limit reached, removing oldest entry/g),
      token_limit: n(/cache token limit \(.*\) reached, removing oldest entry/g),
      contained: n(/removing obsolete cached prompt/g),
    },
    rejections: { too_large: n(/exceeds cache size limit .* skipping/g) },
  };
}

/** The figures of one run, or null. */
function figures(run) {
  if (!run) return null;
  const s = run.summary;
  const a = run.agg;
  const isLlama = !s.after_run?.cache?.stats;
  const counts = isLlama ? llamaCounts(run) : {
    evictions: lineageCounts(run, (st) => st.evictions),
    rejections: lineageCounts(run, (st) => st.rejections),
    by_uses: lineageCounts(run, (st) => st.evictions_by_uses),
  };
  const turnsT = a.ttft.turns ?? a.ttft.all;
  const turnsE = a.efficiency.turns ?? a.efficiency.all;
  return {
    name: run.name,
    llama: isLlama,
    requests: s.requests,
    side_calls: s.side_calls ?? 0,
    failures: s.failures,
    wall_s: s.run_seconds,
    ttft_turns_p50: turnsT.p50,
    ttft_turns_p95: turnsT.p95,
    ttft_all_p50: a.ttft.all.p50,
    ttft_all_p95: a.ttft.all.p95,
    computed_all: a.efficiency.all.computed,
    oracle_all: a.efficiency.all.oracle,
    efficiency_all: a.efficiency.all.ratio,
    computed_turns: turnsE.computed,
    oracle_turns: turnsE.oracle,
    efficiency_turns: turnsE.ratio,
    history: a.history,
    evictions: counts?.evictions ?? null,
    rejections: counts?.rejections ?? null,
    evictions_by_uses: counts?.by_uses ?? null,
    disk_hits: isLlama ? null : lineageCounts(run, (st) => st.disk_hits),
    disk_evictions: isLlama ? null : lineageCounts(run, (st) => st.disk?.evictions),
    disk_on: !isLlama && Boolean(s.after_run?.cache?.stats?.disk?.enabled),
    policy: isLlama ? 'oldest first (its prompt cache)' : s.after_run?.cache?.stats?.eviction?.policy ?? '-',
    peak_rss_bytes: Math.max(s.after_run?.peak_rss_bytes ?? 0, s.restart?.before?.peak_rss_bytes ?? 0) || null,
    largest_lineage_bytes: s.after_run?.cache?.stats?.largest_lineage?.bytes ?? null,
    budget_bytes: s.after_run?.cache?.stats?.budget_bytes ?? null,
    server_argv: s.server_argv,
  };
}

const MODES = [
  { title: 'Disk tier off', lineage: 'lineage-nodisk', recency: 'lineage-recency-nodisk' },
  { title: 'Disk tier on (lineage\'s default)', lineage: 'lineage', recency: 'lineage-recency' },
];
const llama = figures(load('llama-server'));

const fmt = (x, d = 0) => (x === null || x === undefined || Number.isNaN(x) ? '-' : Number(x).toFixed(d));
const ms = (x) => (x === null || x === undefined ? '-' : x >= 10000 ? `${(x / 1000).toFixed(1)} s` : x.toFixed(0));
const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? `**${(a / b).toFixed(2)}**` : '-');
const table = (head, rows) => [
  `| ${head.join(' | ')} |`,
  `|${head.map((h, i) => (i === 0 ? '---' : '---:')).join('|')}|`,
  ...rows.map((r) => `| ${r.join(' | ')} |`),
].join('\n');
const countsCell = (c) => {
  if (!c) return '-';
  const parts = Object.entries(c).filter(([, v]) => v > 0).map(([k, v]) => `${k} ${v}`);
  return parts.length ? parts.join(', ') : 'none';
};

const out = ['# Under a tight budget: lineage (value eviction) against recency and llama-server', ''];
const any = MODES.flatMap((m) => [m.lineage, m.recency]).map((n) => load(n)).find(Boolean) ?? (llama ? load('llama-server') : null);
if (!any) {
  process.stderr.write(`pressure.mjs: no runs in ${dir}\n`);
  process.exit(1);
}
const t = any.summary.trace;
const budget = (() => {
  for (const r of [llama, ...MODES.flatMap((m) => [figures(load(m.lineage)), figures(load(m.recency))])]) {
    if (!r) continue;
    const argv = r.server_argv ?? [];
    const i = argv.lastIndexOf('--cache-ram-bytes');
    if (i >= 0) return Number(argv[i + 1]) / 1048576;
    const j = argv.lastIndexOf('--cache-ram');
    if (j >= 0) return Number(argv[j + 1]);
  }
  return null;
})();
out.push(`Trace: seed ${t.seed}, ${t.conversations} conversations (${t.concurrency} at a time, ${t.turnsMin}-${t.turnsMax} steps), ` +
  `${t.total_requests} requests planned (${t.sideCalls ? `${t.sideCalls} side calls after each step` : 'no side calls'}), ` +
  `server restart after ${t.restart_after}. Model: \`${any.summary.model}\`. RAM budget: **${fmt(budget)} MiB** for every server ` +
  '(lineage-server `--cache-ram-bytes`, llama-server `--cache-ram`).', '');
out.push('lineage is lineage-server with its defaults (`--cache-eviction value`: what leaves RAM first is the copy whose ' +
  'restore saves the least prefill time per byte, weighted by how likely it is to be restored again); lineage-recency ' +
  'is the same with `--cache-eviction recency` (the least recently used leaves first); llama-server is llama.cpp\'s ' +
  'server from the same engine build, its prompt cache at the same MiB. llama-server has no disk tier: its one run ' +
  'stands in both tables. Ratios below 1: lineage is faster, or computes fewer tokens; for the next turns that restored ' +
  'their history, above 1 is better.', '');

const rowsFor = (L, R, M) => {
  const cols = [L, R, M];
  const row = (label, get, show, better = 'lower') => {
    const v = cols.map((c) => (c ? get(c) : null));
    return [label, ...v.map((x, i) => (cols[i] ? show(x, cols[i]) : '-')), ratio(v[0], v[1]), ratio(v[0], v[2])]
      .map((x, i) => (i === 0 && better === 'higher' ? `${x} (higher is better)` : x));
  };
  const eff = (c, k) => `${fmt(c[`computed_${k}`])} / ${fmt(c[`oracle_${k}`])} (${fmt(c[`efficiency_${k}`], 2)})`;
  const rows = [
    ['requests (of them side calls), failed', ...cols.map((c) => (c ? `${c.requests} (${c.side_calls}), ${c.failures}` : '-')), '', ''],
    ['eviction policy (as the server reports it)', ...cols.map((c) => (c ? c.policy : '-')), '', ''],
    row('wall time s', (c) => c.wall_s, (x) => fmt(x, 1)),
    row('TTFT p50 ms, turns', (c) => c.ttft_turns_p50, ms),
    row('TTFT p95 ms, turns', (c) => c.ttft_turns_p95, ms),
    row('TTFT p50 ms, all requests', (c) => c.ttft_all_p50, ms),
    row('TTFT p95 ms, all requests', (c) => c.ttft_all_p95, ms),
    row('prefill computed / oracle tokens (efficiency), turns', (c) => c.computed_turns, (x, c) => eff(c, 'turns')),
    row('prefill computed / oracle tokens (efficiency), all requests', (c) => c.computed_all, (x, c) => eff(c, 'all')),
    row('next turns that restored their history', (c) => c.history?.fraction,
      (x, c) => (c.history?.n ? `${c.history.restored} / ${c.history.n} (${fmt(100 * x, 0)}%)` : '-'), 'higher'),
    ['of the others: entry kept, reply recomputed / entry lost', ...cols.map((c) => (!c?.history?.n ? '-'
      : `${c.history.reply_only ?? 0} / ${c.history.n - c.history.restored - (c.history.reply_only ?? 0)}`)), '', ''],
    ['evictions by reason', ...cols.map((c) => (c ? countsCell(c.evictions) : '-')), '', ''],
    ['evicted by budget: restored before / never', ...cols.map((c) => (!c ? '-' : c.evictions_by_uses
      ? `${c.evictions_by_uses.reused ?? 0} / ${c.evictions_by_uses.unused ?? 0}` : '-')), '', ''],
    ['rejections by cause', ...cols.map((c) => (c ? countsCell(c.rejections) : '-')), '', ''],
    ['disk tier: restores, files deleted', ...cols.map((c) => (!c ? '-' : c.llama ? 'no disk tier'
      : c.disk_on ? `${fmt(c.disk_hits)}, ${fmt(c.disk_evictions)}` : 'off')), '', ''],
    row('peak RSS MiB', (c) => c.peak_rss_bytes, (x) => (x ? (x / 1048576).toFixed(0) : '-')),
  ];
  return rows;
};

const json = { budget_mib: budget, trace: t, modes: [] };
for (const m of MODES) {
  const L = figures(load(m.lineage));
  const R = figures(load(m.recency));
  if (!L && !R) continue;
  out.push(`## ${m.title}`, '');
  out.push(table([`measure (runs: ${m.lineage}, ${m.recency}, llama-server)`, 'lineage', 'lineage-recency', 'llama-server',
    'lineage / lineage-recency', 'lineage / llama-server'], rowsFor(L, R, llama)));
  out.push('');
  json.modes.push({ title: m.title, lineage: L, recency: R, llama_server: llama });
}

// Side calls per kind: TTFT and prefill efficiency.
const all = [...MODES.flatMap((m) => [m.lineage, m.recency]), 'llama-server'].map((n) => load(n)).filter(Boolean);
const kinds = [...new Set(all.flatMap((r) => Object.keys(r.agg.ttft.side ?? {})))];
if (kinds.length) {
  out.push('## Side calls by kind: TTFT p50 / p95 ms, prefill efficiency (computed / oracle)', '');
  out.push(table(['side call', ...all.map((r) => r.name)], kinds.map((k) => [
    `${k} (n=${all[0].agg.ttft.side?.[k]?.n ?? 0})`,
    ...all.map((r) => {
      const x = r.agg.ttft.side?.[k];
      const e = r.agg.efficiency.side?.[k];
      return x ? `${ms(x.p50)} / ${ms(x.p95)}, ${fmt(e?.ratio, 2)}` : '-';
    }),
  ])));
  out.push('');
}

const largest = all.map((r) => figures(r)).filter((f) => f && f.largest_lineage_bytes);
out.push('Turns are the conversations\' own requests (every request but the side calls). A next turn (a user message or ' +
  'a tool step after a reply) restored its history when the cached tokens it reported ' +
  '(`usage.prompt_tokens_details.cached_tokens`; llama-server\'s `cache_n` where no usage came back) reached its ' +
  'history boundary: the prefix its conversation had sent before its own new messages, echoed replies included ' +
  '(where no earlier prompt or reply covered all of it, as when the template renders an earlier reply otherwise now: ' +
  'the oracle\'s reach less a message header, 4 tokens, since that reach ends inside the header of the first message ' +
  'rendered otherwise, where no cache has a restore point). Of the next turns that did not, "entry kept, reply ' +
  'recomputed" restored at least their conversation\'s previous prompt (or its resend guard, one token before its ' +
  'end): what they recomputed is the reply, whose ' +
  'text the random-weight bench model does not decode to the tokens that text tokenizes to (a real model\'s mostly ' +
  'does), so that no copy reaches past it but a warm-up of the reply as rendered, which runs only on an idle engine; ' +
  '"entry lost" restored less (the anchor, or nothing after the restart): the eviction policy\'s misses. ' +
  'lineage-server\'s evictions ' +
  '(`/v1/cache/stats` `evictions`: capacity is the RAM budget, lru the entry cap, released an idle entry already on ' +
  'disk giving its RAM back, superseded a twin replaced; `evictions_by_uses`: the budget\'s victims that had been ' +
  'restored at least once, and those never restored) and rejections (`not_admitted`: a state leaving the device ' +
  'worth less than what it would push out) are counted before the trace\'s restart and after it; llama-server\'s come ' +
  'from its log (capacity: "removing oldest entry" at its size limit; contained: a cached prompt the new one contains, ' +
  'replaced; too_large: a state over the whole limit, not stored).' +
  (largest.length ? ` The largest conversation entry at the end held ${largest.map((f) => `${fmt(f.largest_lineage_bytes / 1048576, 1)} MiB (${f.name})`).join(', ')}.` : ''), '');

fs.writeFileSync(path.join(dir, 'pressure.md'), out.join('\n'));
fs.writeFileSync(path.join(dir, 'pressure.json'), JSON.stringify(json, null, 2) + '\n');
process.stdout.write(out.join('\n') + '\n');
