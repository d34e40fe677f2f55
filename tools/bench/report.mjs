#!/usr/bin/env node
// The benchmark report: reads the runs in DIR (NAME.summary.json + NAME.jsonl, written by
// tools/bench/run.mjs; NAME.engine.json, written by tools/bench/engine.mjs) and writes DIR/report.md (markdown tables, configurations side by side)
// and DIR/results.json (the summaries together).
//
//   node tools/bench/report.mjs DIR [--order name1,name2,...] [--excess-for NAME] [--title TEXT]
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { KINDS, loadRun, oracleTtft, percentile } from './summary.mjs';

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    order: { type: 'string' },
    'excess-for': { type: 'string', default: 'lineage' },
    'excess-max': { type: 'string', default: '25' },
    title: { type: 'string' },
  },
});
const dir = positionals[0];
if (!dir) {
  process.stderr.write('usage: report.mjs DIR [--order a,b,c] [--excess-for NAME]\n');
  process.exit(2);
}

const names = fs.readdirSync(dir).filter((f) => f.endsWith('.summary.json')).map((f) => f.slice(0, -'.summary.json'.length));
const order = opt.order ? opt.order.split(',').filter((n) => names.includes(n)) : [];
for (const n of names.sort()) if (!order.includes(n)) order.push(n);
const runs = order.map((name) => loadRun(dir, name));

const fmt = (x, d = 0) => (x === null || x === undefined || Number.isNaN(x) ? '-' : Number(x).toFixed(d));
const mib = (b) => (b === null || b === undefined ? '-' : (b / 1048576).toFixed(0));
const mib1 = (b) => (b === null || b === undefined ? '-' : (b / 1048576).toFixed(1));
const ms = (x) => (x === null || x === undefined ? '-' : x >= 10000 ? (x / 1000).toFixed(1) + ' s' : x.toFixed(0));
const table = (head, rows) => [
  `| ${head.join(' | ')} |`,
  `|${head.map((h, i) => (i === 0 ? '---' : '---:')).join('|')}|`,
  ...rows.map((r) => `| ${r.join(' | ')} |`),
].join('\n');

const out = [];
if (opt.title) out.push(`# ${opt.title}`, '');
const t = runs[0]?.summary.trace;
if (t) {
  out.push(`Trace: seed ${t.seed}, ${t.conversations} conversations (${t.concurrency} at a time, ${t.turnsMin}-${t.turnsMax} steps), ` +
    `${t.total_requests} requests planned, server restart after ${t.restart_after}; user messages ${t.userMin}-${t.userMax} tokens, ` +
    `tool results ${t.toolMin}-${t.toolMax}, max_tokens ${t.maxTokensMin}-${t.maxTokensMax}, ` +
    `regenerate ${t.pRegenerate}, edit ${t.pEdit}, dropped stream ${t.pDrop}, persona scale ${t.personaScale}` +
    `${t.systemVariation ? `, system variation ${t.systemVariation}` : ''}${t.thinkMs ? `, think time ${t.thinkMs} ms` : ''}` +
    `${t.coldPersonas ? ', every session a new persona (cold-heavy)' : ''}` +
    `${t.sideCalls ? `, ${t.sideCalls} side calls after each step (${['title', 'summary', 'classify', 'subagent'].slice(0, t.sideCalls).join(', ')}${t.sideCalls > 4 ? ', in turn' : ''}; ` +
      `quotes of ${t.sideQuoteMin}-${t.sideQuoteMax} tokens, max_tokens ${t.sideMaxTokensMin}-${t.sideMaxTokensMax})` : ''}. ` +
    `Model: \`${runs[0].summary.model}\`.`, '');
}

// Time first: a cache that computes fewer tokens but finishes later has lost. Ratios are to the
// reference configuration (llama-server when it ran).
const ref = runs.find((r) => r.name === 'llama-server');
const ratio = (a, b, d = 2) => (a && b ? (a / b).toFixed(d) : '-');
const generated = (r) => r.records.reduce((a, x) => a + (x.completion_tokens ?? 0), 0);
// With side calls: TTFT over the conversations' own requests too (side calls apart).
const withSide = runs.some((r) => r.agg.ttft.turns);
out.push('## Time', '');
out.push(table(['configuration', 'wall time s', 'generated tokens', 'streams ended by a reply parse error',
  'generated tokens/s over the wall time', 'TTFT p50 / p95 ms', ...(withSide ? ['TTFT p50 / p95 ms, turns only (no side calls)'] : []),
  ...(ref ? ['wall vs llama-server', 'TTFT p50 vs llama-server', 'TTFT p95 vs llama-server'] : [])],
runs.map((r) => {
  const s = r.summary;
  const g = generated(r);
  const row = [r.name, fmt(s.run_seconds, 1), fmt(g), fmt(s.parse_errors_kept ?? 0),
    fmt(s.run_seconds ? g / s.run_seconds : null, 1),
    `${ms(r.agg.ttft.all.p50)} / ${ms(r.agg.ttft.all.p95)}`];
  if (withSide) row.push(r.agg.ttft.turns ? `${ms(r.agg.ttft.turns.p50)} / ${ms(r.agg.ttft.turns.p95)}` : '-');
  if (ref) {
    row.push(`**${ratio(s.run_seconds, ref.summary.run_seconds)}**`, ratio(r.agg.ttft.all.p50, ref.agg.ttft.all.p50),
      ratio(r.agg.ttft.all.p95, ref.agg.ttft.all.p95));
  }
  return row;
})));
out.push('', 'Wall time is the whole trace, restart included; a ratio below 1 is faster than llama-server. ' +
  'A stream that its server ended with a reply parse error (llama-server, on a random-weight model\'s reply that ' +
  'never closes its reasoning: the parse of the whole reply fails after the last token) decoded its reply but ' +
  'reports no usage, so its tokens are missing from "generated tokens".', '');

// The raw-engine part (tools/bench/engine.mjs): NAME.engine.json per configuration.
const engines = order.map((name) => {
  const f = path.join(dir, `${name}.engine.json`);
  return fs.existsSync(f) ? { name, e: JSON.parse(fs.readFileSync(f, 'utf8')) } : null;
}).filter(Boolean);
for (const n of fs.readdirSync(dir).filter((f) => f.endsWith('.engine.json')).map((f) => f.slice(0, -'.engine.json'.length))) {
  if (!engines.some((x) => x.name === n)) engines.push({ name: n, e: JSON.parse(fs.readFileSync(path.join(dir, `${n}.engine.json`), 'utf8')) });
}
if (engines.length) {
  const eref = engines.find((x) => x.name === 'llama-server')?.e;
  const sizes = [...new Set(engines.flatMap((x) => x.e.prefill.map((p) => p.target)))].sort((a, b) => a - b);
  const pre = (e, k) => e.prefill.find((p) => p.target === k);
  const cell = (v, r, d = 1) => (v === null || v === undefined ? '-' : `${fmt(v, d)}${r && eref ? ` (**${ratio(v, r)}x**)` : ''}`);
  const e0 = engines[0].e;
  out.push('## Raw engine (cache out of the picture)', '');
  out.push(table(['configuration', `one stream, decode tok/s (${e0.decode_tokens} tokens)`, 'server-reported decode tok/s',
    `${e0.streams} streams, aggregate decode tok/s`, `${e0.streams} streams, while all decode, tok/s`, ...sizes.map((k) => `cold prefill ~${k} tokens, tok/s (prompt)`),
    'context switches/s while decoding', 'peak RSS MiB'],
  engines.map(({ name, e }) => [name, cell(e.decode_1?.client_tok_s, eref?.decode_1?.client_tok_s),
    cell(e.decode_1?.server_tok_s, eref?.decode_1?.server_tok_s), cell(e.decode_n?.aggregate_tok_s, eref?.decode_n?.aggregate_tok_s),
    cell(e.decode_n?.all_decoding_tok_s, eref?.decode_n?.all_decoding_tok_s),
    ...sizes.map((k) => { const p = pre(e, k); const rp = eref ? pre(eref, k) : null;
      return p ? `${cell(p.server_tok_s, rp?.server_tok_s)} (${p.prompt_tokens})` : '-'; }),
    fmt(e.decode_1?.ctx_switches_per_s), mib(e.memory?.peak_rss_bytes)])));
  out.push('', 'Each figure is the best of its runs; the ratio in bold is to llama-server\'s (above 1 is faster). One-stream ' +
    'decode is client side (completion tokens - 1 over first to last chunk); the aggregate spans the first stream\'s ' +
    'first token to the last stream\'s end (the streams\' prefills included, in whatever order the server ran them), ' +
    '"while all decode" counts the tokens between the last stream\'s first token and the first stream\'s last; ' +
    `decode prompts carry ~${e0.decode_context ?? 0} tokens of context (engine.mjs --decode-context). Prefill is the ` +
    'server\'s own timing (`timings.prompt_n / prompt_ms`) of a `cache_prompt: false` request.', '');
  // Runs that alternated with llama-server's (engine.mjs with several names): run k beside run k.
  const paired = engines.filter(({ name, e }) => name !== 'llama-server' && eref && (e.interleaved_with ?? []).includes('llama-server'));
  if (paired.length) {
    const pairs = (a, b, key) => {
      const rs = [];
      for (let i = 0; i < Math.min(a?.length ?? 0, b?.length ?? 0); i++) {
        if (a[i][key] > 0 && b[i][key] > 0) rs.push(a[i][key] / b[i][key]);
      }
      return rs.sort((x, y) => x - y);
    };
    const pcell = (rs) => {
      if (!rs.length) return '-';
      const mid = percentile(rs, 50);
      return `**${mid.toFixed(2)}x** (${rs[0].toFixed(2)}-${rs.at(-1).toFixed(2)}, ${rs.length})`;
    };
    out.push(table(['configuration, paired with llama-server', 'one stream, decode', `${e0.streams} streams, aggregate decode`,
      `${e0.streams} streams, while all decode`, ...sizes.map((k) => `cold prefill ~${k} tokens`),
      ...sizes.map((k) => `cold prefill ~${k} tokens, request time (client)`)],
    paired.map(({ name, e }) => [name, pcell(pairs(e.decode_1?.runs, eref.decode_1?.runs, 'client_tok_s')),
      pcell(pairs(e.decode_n?.runs, eref.decode_n?.runs, 'aggregate_tok_s')),
      pcell(pairs(e.decode_n?.runs, eref.decode_n?.runs, 'all_decoding_tok_s')),
      ...sizes.map((k) => pcell(pairs(pre(e, k)?.runs, pre(eref, k)?.runs, 'server_tok_s'))),
      // Time, so llama-server's over this one's: above 1 is faster here too.
      ...sizes.map((k) => pcell(pairs(pre(eref, k)?.runs, pre(e, k)?.runs, 'client_s')))])));
    out.push('', 'Paired: the servers ran at the same time, idle in turn, each measure\'s runs alternating (A B, B A, ...); ' +
      'each cell is the median of the ratios of run k to llama-server\'s run k (above 1 is faster), their range and ' +
      'count. On a machine whose speed drifts by more than the gap between the servers, read this table rather than ' +
      'the best runs above. "Request time (client)" is the whole `max_tokens: 1` request as the client waits for it, ' +
      'llama-server\'s over this server\'s: each server\'s own prompt timing covers a different part of the request ' +
      '(on bench-qwen35, llama-server\'s ~3k requests took ~100 ms longer than its own prompt timing, lineage-server\'s ' +
      '~20 ms), so the two prefill columns can differ by a few points.', '');
  }
}

out.push('## Overview', '');
out.push(table(
  ['configuration', 'requests (failed)', 'prompt tokens', 'computed', 'oracle', 'prefill efficiency (computed / oracle)', 'reported cached %', 'wall time (load avg)', 'RSS MiB (peak)', 'cache RAM MiB', 'disk written MiB (log excluded)'],
  runs.map(({ name, summary: s, agg }) => {
    const e = agg.efficiency.all;
    const cached = e.prompt ? (100 * (e.prompt - e.computed)) / e.prompt : null;
    const a = s.after_run ?? {};
    const peak = Math.max(a.peak_rss_bytes ?? 0, s.restart?.before?.peak_rss_bytes ?? 0);
    return [s.replicas > 1 ? `${name} (${s.replicas} replicas: sums)` : name,
      `${s.requests} (${s.failures})${s.side_calls ? `, ${s.side_calls} of them side calls` : ''}`, fmt(e.prompt), fmt(e.computed), fmt(e.oracle), `**${fmt(e.ratio, 2)}**`,
      fmt(cached, 1), `${fmt(s.run_seconds)} s (${fmt(s.load1_mean, 1)})`, `${mib(a.rss_bytes)} (${mib(peak)})`, mib(a.cache?.ram_bytes),
      (Math.max(0, (a.disk_write_bytes ?? 0) + (s.restart?.before?.disk_write_bytes ?? 0) - (s.server_log_bytes ?? 0)) / 1048576).toFixed(1)];
  })));
out.push('', 'Prefill efficiency sums the prefill tokens each server computed and divides by the oracle\'s: the tokens no ' +
  'earlier prompt or reply of the trace had covered (1.00 is the limit). Dropped streams are left out (no usage comes back).', '');
if (runs.some((r) => r.agg.history?.n > 0)) {
  out.push(`Next turns of a conversation (a user message or a tool step after a reply) whose reported cached tokens ` +
    `reached their history boundary (the prefix their conversation had sent before their own new messages; where the ` +
    `oracle reaches less, its reach less a message header): ${runs.map((r) => { const h = r.agg.history;
      return `${r.name} ${h?.n ? `${h.restored} of ${h.n} (${fmt(100 * h.fraction, 0)}%)` : '-'}`; }).join('; ')}.`, '');
}
if (withSide) {
  out.push(`Side calls apart: prefill efficiency of the conversations' own requests ${runs.map((r) => { const e = r.agg.efficiency.turns;
    return `${r.name} ${e ? `${fmt(e.ratio, 2)} (${fmt(e.computed)} / ${fmt(e.oracle)})` : '-'}`; }).join('; ')}; ` +
    `of the side calls, by kind: ${runs.map((r) => `${r.name} ${Object.entries(r.agg.efficiency.side ?? {}).map(([k, e]) =>
      `${k} ${fmt(e.ratio, 2)} (n=${e.n})`).join(', ') || '-'}`).join('; ')}.`, '');
}

// Memory against the budget: per process (each replica of a cluster), RSS once first ready +
// its cache RAM budget; and a cluster's Redis.
const withMemory = runs.filter((r) => r.summary.memory?.some((m) => m.rss_budget_bytes));
if (withMemory.length) {
  out.push('## Memory per process against its budget (RSS once ready + cache RAM budget)', '');
  const pct = (a, b) => (a && b ? `${a > b ? '+' : ''}${((100 * (a - b)) / b).toFixed(1)}%` : '-');
  const rows = [];
  for (const r of withMemory) {
    for (const m of r.summary.memory) {
      const b = m.before_restart;
      const both = (x, y) => (b ? `${x ?? 0} + ${y ?? 0}` : `${y ?? '-'}`);
      const tier3 = m.redis ? `${both(b?.redis_hits, m.redis_hits)} restores, ${both(b?.redis_writes, m.redis.writes)} written, ` +
        `${both(b?.redis_errors, m.redis.errors)} errors` : '-';
      rows.push([`${r.name}${r.summary.memory.length > 1 ? ` r${m.replica}` : ''}`, mib(m.rss_at_ready_bytes?.[0]),
        mib(m.cache_budget_bytes), mib(m.rss_budget_bytes), mib(m.peak_rss_bytes), pct(m.peak_rss_bytes, m.rss_budget_bytes),
        `${mib1(m.cache_ram_bytes ?? r.summary.after_run?.cache?.ram_bytes)} / ${mib(m.cache_budget_bytes)}`,
        m.lookups === undefined ? '-' : both(b?.lookups, m.lookups), tier3]);
    }
  }
  out.push(table(['process', 'RSS once ready MiB', 'cache RAM budget MiB', 'RSS budget MiB', 'peak RSS MiB', 'peak vs budget',
    'cache RAM at the end / budget MiB', 'lookups', 'tier 3 (Redis)'], rows));
  for (const r of withMemory) {
    const rd = r.summary.after_run?.cache?.redis;
    if (rd) {
      out.push('', `${r.name}: Redis (maxmemory ${rd.maxmemory}, allkeys-lru) holds ${rd.keys} keys, ` +
        `${mib(rd.used_memory_bytes)} MiB used (peak ${mib(rd.used_memory_peak_bytes)} MiB) at the end.`);
    }
  }
  out.push('', 'Peak RSS is the largest VmHWM over the process\'s starts (before and after the restart); the counters ' +
    'of the last two columns are "before the restart + after it".', '');
}

const kinds = KINDS.filter(([k]) => runs.some((r) => r.agg.efficiency.by_kind[k] || r.agg.ttft.by_kind[k]));
out.push('## Prefill efficiency per request kind (computed / oracle tokens)', '');
out.push(table(['request kind', ...runs.map((r) => r.name)], kinds.filter(([k]) => k !== 'dropped').map(([k, label]) => [
  `${label} (n=${runs[0].agg.efficiency.by_kind[k]?.n ?? 0})`,
  ...runs.map((r) => {
    const e = r.agg.efficiency.by_kind[k];
    return e ? `${fmt(e.ratio, 2)} (${fmt(e.computed)} / ${fmt(e.oracle)})` : '-';
  }),
])));
out.push('');

const withPasses = runs.filter((r) => r.agg.passes?.all.n > 0);
if (withPasses.length > 0) {
  out.push('## Prefill passes per request kind (lineage-server\'s timing line: passes, of which splits)', '');
  out.push('A split is a pass cut short at a restore point the cache captures: one more forward pass ' +
    '(docs/architecture.md "What a split costs").', '');
  out.push(table(['request kind', ...withPasses.map((r) => r.name)], kinds.map(([k, label]) => [
    `${label} (n=${withPasses[0].agg.passes.by_kind[k]?.n ?? 0})`,
    ...withPasses.map((r) => {
      const x = r.agg.passes.by_kind[k];
      return x ? `${fmt(x.passes)}, ${fmt(x.splits)} (${fmt(x.splits / x.n, 1)} a request)` : '-';
    }),
  ])));
  out.push('', `All requests: ${withPasses.map((r) => `${r.name} ${fmt(r.agg.passes.all.passes)} passes, ` +
    `${fmt(r.agg.passes.all.splits)} splits`).join('; ')}.`, '');
}

// What each kind of restore point cost and returned (lineage-server's GET /v1/cache/stats, summed
// over the server's starts: the stats before the restart and at the end of the run).
const statsOf = (r) => [r.summary.restart?.before?.cache?.stats, r.summary.after_run?.cache?.stats].filter((x) => x?.captures);
const withPoints = runs.filter((r) => statsOf(r).length > 0);
if (withPoints.length > 0) {
  out.push('## Restore points by kind (lineage-server\'s /v1/cache/stats, summed over its starts)', '');
  out.push('Captured: states copied out of the engine, of which splits (a pass cut short there: one more ' +
    'forward pass) and their MiB; restored: the hits that took a point of that kind and the prompt tokens ' +
    'they restored (docs/prompt-cache.md "What a restore point costs").', '');
  for (const r of withPoints) {
    const sum = (field) => {
      const m = {};
      for (const st of statsOf(r)) for (const [k, v] of Object.entries(st[field] ?? {})) m[k] = (m[k] ?? 0) + v;
      return m;
    };
    const [cap, splits, bytes, hits, toks] = ['captures', 'capture_splits', 'capture_bytes', 'hits', 'tokens_restored'].map(sum);
    const kinds = [...new Set([...Object.keys(cap), ...Object.keys(hits)])].filter((k) => (cap[k] ?? 0) + (hits[k] ?? 0) > 0);
    out.push(`${r.name}:`, '');
    out.push(table(['kind', 'captured', 'of which splits', 'MiB captured', 'restored (hits)', 'tokens restored',
      'tokens restored per split'], kinds.map((k) => [k, fmt(cap[k]), fmt(splits[k]), mib1(bytes[k]), fmt(hits[k]),
      fmt(toks[k]), splits[k] ? fmt((toks[k] ?? 0) / splits[k]) : '-'])));
    out.push('');
  }
}

out.push('## TTFT per request kind, p50 / p95 (ms, client side, streaming)', '');
out.push(table(['request kind', ...runs.map((r) => r.name)], kinds.map(([k, label]) => [
  `${label} (n=${runs[0].agg.ttft.by_kind[k]?.n ?? 0})`,
  ...runs.map((r) => {
    const x = r.agg.ttft.by_kind[k];
    return x ? `${ms(x.p50)} / ${ms(x.p95)}` : '-';
  }),
])));
out.push('', `All requests: ${runs.map((r) => `${r.name} ${ms(r.agg.ttft.all.p50)} / ${ms(r.agg.ttft.all.p95)}`).join('; ')}.`, '');
const allowed = ref ? oracleTtft(ref.records) : null;
if (allowed) {
  const rel = (x, y) => (x !== null && y ? (x / y).toFixed(2) : '-');
  out.push(`What the oracle allows, estimated: llama-server's TTFT with each request's prompt time scaled to the oracle's ` +
    `tokens (at least its shortest prefill in this run, ${ms(allowed.pass_ms)} ms, one pass): p50 / p95 ${ms(allowed.p50)} / ` +
    `${ms(allowed.p95)} ms, ${rel(allowed.p50, ref.agg.ttft.all.p50)} / ${rel(allowed.p95, ref.agg.ttft.all.p95)} of llama-server's ` +
    `(${runs.filter((r) => r !== ref).map((r) => `${r.name} ${rel(r.agg.ttft.all.p50, ref.agg.ttft.all.p50)} / ` +
      `${rel(r.agg.ttft.all.p95, ref.agg.ttft.all.p95)}`).join('; ')}). An estimate, not a bound: it scales each ` +
    'request\'s own prefill, not the time it waited behind other requests\' prefills (which a cache shortens too, most ' +
    'in the tail), and a short pass costs more a token than this linear scaling says.', '');
}
if (runs.some((r) => r.agg.warm_user_turns.n > 0)) {
  out.push(`Warm user turns${t?.thinkMs ? ` (${t.thinkMs} ms think time before each)` : ' (closed loop: no think time)'}: ` +
    'TTFT / the prefill time of the turn\'s own tokens (its message and the generation prompt, at the request\'s own ' +
    `prefill rate), p50 / p95: ${runs.map((r) => { const w = r.agg.warm_user_turns; return `${r.name} ${fmt(w.p50, 2)} / ${fmt(w.p95, 2)} ` +
    `(n=${w.n}, ${w.own_only} computed only their own tokens)`; }).join('; ')}. ` +
    'The same from the server\'s timing line (its own TTFT: lineage-server only), all of them / after a warmed reply ' +
    `(those that computed only their own tokens): ${runs.map((r) => { const w = r.agg.warm_user_turns;
      const f = (x) => (x?.n ? `${fmt(x.p50, 2)} / ${fmt(x.p95, 2)} (n=${x.n})` : '-');
      return `${r.name} ${f(w.server_all)}; ${f(w.server_warmed)}`; }).join(' · ')}.`, '');
}

const ex = runs.find((r) => r.name === opt['excess-for']);
if (ex) {
  const list = ex.agg.excess;
  out.push(`## Requests where ${ex.name} computed >= 64 tokens more than the oracle (${list.length})`, '');
  if (list.length) {
    out.push(table(['#', 'kind', 'conv/step', 'persona', 'prompt', 'cached', 'computed', 'oracle', 'excess', 'oracle reuses', 'server hit', 'TTFT ms'],
      list.slice(0, Number(opt['excess-max'])).map((x) => [x.i, x.kind === x.base ? x.kind : `${x.kind} (${x.base})`, `${x.conv}/${x.step}`, x.persona,
        x.prompt, x.cached, x.computed, x.oracle, x.excess, x.oracle_from ? `#${x.oracle_from.i} ${x.oracle_from.what}` : '-',
        x.hit ?? '-', fmt(x.ttft_ms)])));
    if (list.length > Number(opt['excess-max'])) out.push('', `(${list.length - Number(opt['excess-max'])} more in ${ex.name}.summary.json)`);
  }
  out.push('');
}

fs.writeFileSync(path.join(dir, 'report.md'), out.join('\n'));
fs.writeFileSync(path.join(dir, 'results.json'), JSON.stringify(runs.map((r) => ({ name: r.name, ...r.summary,
  efficiency: r.agg.efficiency, ttft: r.agg.ttft, excess: r.agg.excess })), null, 2) + '\n');
process.stdout.write(out.join('\n') + '\n');
