#!/usr/bin/env node
// The soak driver (scripts/soak starts the server and calls it; docs/benchmarks/README.md "Soak: 30
// minutes of the agent trace, bench-qwen35"): replays the agent benchmark's traces
// (tools/bench/trace.mjs, a new seed each time one ends) against a running lineage-server in closed
// loop for a fixed time, and samples the server every --sample-s seconds: its RSS
// (/proc/PID/status), the bytes its cache holds in RAM and on disk and its disk files (GET
// /v1/cache/stats), the requests that ended in the interval, their errors and their latency
// percentiles. Writes DIR/soak.csv (one row a sample) and DIR/summary.json, and prints the summary;
// tools/bench/soak_plot.py draws DIR/soak.png.
//
//   node tools/bench/soak.mjs --url http://127.0.0.1:PORT --pid PID --out DIR --minutes N
//     [--sample-s 10] [--warmup-s S] [--budget-bytes B] [--concurrency 2] [--conversations 8]
//     [--max-tokens-max 32] [--hostile N] [--hostile-bodies all|constraints|sizes]
//   node tools/bench/soak.mjs --resummarize DIR [--warmup-s S]   # the summary again from DIR's files
//
// Columns of soak.csv: t_s (since the start), rss_mib, cache_ram_mib, cache_device_mib,
// cache_disk_mib, disk_files, entries, anchors, requests (ended in the interval), errors (of
// those), p50_ms, p95_ms (total latency of those; empty when none), load1.
// Warm-up: the first --warmup-s seconds (default: a quarter of the run, at most 5 minutes) are
// left out of the "after warm-up" figures. Budget: the RSS the process should stay within, the
// RSS before the first request (model, KV buffers) plus the cache's RAM budget (--budget-bytes).
// Hostile mode (--hostile N): N more clients send the bodies of tools/bench/hostile_bodies.mjs in
// turn beside the trace for the whole run (their statuses and times in the summary's `hostile`);
// compare the trace's latency with a run without them.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import { hostileBodies, hostileClient } from './hostile_bodies.mjs';
import { makeTrace } from './trace.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const OPENAI_ENTRY = path.resolve(HERE, '../../tests/e2e/node_modules/openai/index.mjs');

const { values: opt } = parseArgs({
  options: {
    url: { type: 'string' },
    pid: { type: 'string' },
    out: { type: 'string', default: 'build/soak' },
    minutes: { type: 'string', default: '30' },
    'sample-s': { type: 'string', default: '10' },
    'warmup-s': { type: 'string' },
    'budget-bytes': { type: 'string', default: '0' },
    concurrency: { type: 'string', default: '2' },
    conversations: { type: 'string', default: '8' },
    'max-tokens-max': { type: 'string', default: '32' },
    resummarize: { type: 'string' },
    hostile: { type: 'string', default: '0' },
    'hostile-bodies': { type: 'string', default: 'all' },
  },
});
/** Adds the memory figures of the samples after warm-up to `base` (rss_budget_mib, after_warmup:
 *  RSS min/max, its drift: the mean of the last quarter of those samples minus the first's,
 *  cache RAM and disk maxima, within budget + 10%), writes DIR/summary.json, prints it. */
function report(base, samples, dir) {
  const after = samples.filter((r) => r.t_s >= base.warmup_s && Number.isFinite(r.rss_mib));
  const mean = (xs) => xs.reduce((a, r) => a + r.rss_mib, 0) / xs.length;
  const q = Math.max(1, Math.floor(after.length / 4));
  const budgetMib = base.idle_rss_mib + base.cache_ram_budget_mib;
  const rssMin = Math.min(...after.map((r) => r.rss_mib));
  const rssMax = Math.max(...after.map((r) => r.rss_mib));
  const summary = {
    ...base, rss_budget_mib: budgetMib,
    after_warmup: {
      samples: after.length, rss_min_mib: rssMin, rss_max_mib: rssMax,
      rss_drift_mib: mean(after.slice(-q)) - mean(after.slice(0, q)),
      cache_ram_max_mib: Math.max(...after.map((r) => r.cache_ram_mib)),
      cache_disk_max_mib: Math.max(...after.map((r) => r.cache_disk_mib)),
      rss_within_budget_plus_10pct: rssMax <= budgetMib * 1.1,
    },
  };
  fs.writeFileSync(path.join(dir, 'summary.json'), JSON.stringify(summary, null, 2) + '\n');
  const r0 = (v) => (Number.isFinite(v) ? v.toFixed(0) : '?');
  const a = summary.after_warmup;
  process.stdout.write([
    `soak: ${summary.minutes} min, ${summary.requests} requests (${summary.traces} traces), ${summary.errors} errors`,
    `latency: p50 ${r0(summary.latency_ms.p50)} ms, p95 ${r0(summary.latency_ms.p95)} ms ` +
      `(after warm-up: p50 ${r0(summary.latency_ms.after_warmup_p50)} ms, p95 ${r0(summary.latency_ms.after_warmup_p95)} ms)`,
    `RSS after warm-up (${a.samples} samples from ${r0(summary.warmup_s)} s): min ${r0(rssMin)} MiB / max ${r0(rssMax)} MiB ` +
      `vs budget ${r0(budgetMib)} MiB (RSS before the first request ${r0(summary.idle_rss_mib)} + cache RAM budget ` +
      `${r0(summary.cache_ram_budget_mib)}): ${a.rss_within_budget_plus_10pct ? 'within' : 'NOT within'} budget + 10%; ` +
      `drift ${a.rss_drift_mib >= 0 ? '+' : ''}${a.rss_drift_mib.toFixed(1)} MiB (last quarter of those samples vs the first)`,
    ...(summary.hostile ? [`hostile: ${summary.hostile.clients} clients sent ${summary.hostile.sent} bodies (` +
      `${summary.hostile.bodies}), statuses ${JSON.stringify(summary.hostile.statuses)}, p50 ${r0(summary.hostile.ms_p50)} ms, ` +
      `max ${r0(summary.hostile.ms_max)} ms`] : []),
    `cache after warm-up: RAM max ${r0(a.cache_ram_max_mib)} MiB, disk max ${r0(a.cache_disk_max_mib)} MiB`,
    `files: ${path.join(dir, 'soak.csv')}, ${path.join(dir, 'summary.json')}`,
  ].join('\n') + '\n');
}

/** --resummarize DIR: the summary again from DIR/soak.csv and DIR/summary.json (e.g. after the
 *  warm-up or the figures changed), without a run. */
if (opt.resummarize) {
  const base = JSON.parse(fs.readFileSync(path.join(opt.resummarize, 'summary.json'), 'utf8'));
  const [head, ...lines] = fs.readFileSync(path.join(opt.resummarize, 'soak.csv'), 'utf8').trim().split('\n');
  const cols = head.split(',');
  const samples = lines.map((l) => Object.fromEntries(l.split(',').map((v, i) => [cols[i], v === '' ? NaN : Number(v)])));
  delete base.after_warmup;
  if (opt['warmup-s'] !== undefined) base.warmup_s = Number(opt['warmup-s']);
  report(base, samples, opt.resummarize);
  process.exit(0);
}

if (!opt.url || !opt.pid) {
  process.stderr.write('usage: soak.mjs --url URL --pid PID --out DIR --minutes N (see the header)\n');
  process.exit(2);
}
const durationMs = Number(opt.minutes) * 60_000;
const sampleMs = Number(opt['sample-s']) * 1000;
const warmupMs = opt['warmup-s'] !== undefined ? Number(opt['warmup-s']) * 1000 : Math.min(durationMs / 4, 300_000);
const budgetBytes = Number(opt['budget-bytes']);
const concurrency = Number(opt.concurrency);
fs.mkdirSync(opt.out, { recursive: true });

const log = (s) => process.stderr.write(`[soak] ${s}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const MIB = 1048576;

// --- The server's figures ---------------------------------------------------------------------

function rssBytes() {
  try {
    const st = fs.readFileSync(`/proc/${opt.pid}/status`, 'utf8');
    return Number((st.match(/^VmRSS:\s+(\d+) kB/m) || [])[1]) * 1024;
  } catch {
    return null;  // the server is gone
  }
}

async function cacheStats() {
  try {
    const r = await fetch(`${opt.url}/v1/cache/stats`, { signal: AbortSignal.timeout(30_000) });
    return r.status === 200 ? await r.json() : null;
  } catch {
    return null;
  }
}

function loadavg() {
  try { return Number(fs.readFileSync('/proc/loadavg', 'utf8').split(' ')[0]); } catch { return null; }
}

// --- The load ---------------------------------------------------------------------------------

const { default: OpenAI } = await import(pathToFileURL(OPENAI_ENTRY).href);
const client = new OpenAI({ baseURL: `${opt.url}/v1`, apiKey: 'sk-none', maxRetries: 0, timeout: 900_000 });
const models = await (await fetch(`${opt.url}/v1/models`)).json();
const MODEL = models?.data?.[0]?.id ?? 'default';

const T0 = performance.now();
const now = () => performance.now() - T0;
const ended = [];  // {t, ms, error}
let stopping = false;

/** One streamed chat completion; the reply's message to send back, or null on an error. */
async function ask(messages, tools, maxTokens) {
  const t0 = performance.now();
  let content = '';
  let reasoning = null;
  const calls = [];
  let error = null;
  try {
    const s = await client.chat.completions.create({ model: MODEL, messages, tools, max_tokens: maxTokens,
      temperature: 0, stream: true });
    for await (const chunk of s) {
      for (const ch of chunk.choices ?? []) {
        const d = ch.delta ?? {};
        if (d.content) content += d.content;
        if (d.reasoning_content) reasoning = (reasoning ?? '') + d.reasoning_content;
        for (const tc of d.tool_calls ?? []) {
          const slot = (calls[tc.index ?? 0] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
          if (tc.id) slot.id = tc.id;
          if (tc.function?.name) slot.function.name += tc.function.name;
          if (tc.function?.arguments) slot.function.arguments += tc.function.arguments;
        }
      }
    }
  } catch (e) {
    error = `${e.status ? `HTTP ${e.status}: ` : ''}${e.message}`;
    log(`request failed: ${error}`);
  }
  ended.push({ t: now(), ms: performance.now() - t0, error });
  if (error) return null;
  const m = { role: 'assistant', content };
  if (calls.length) m.tool_calls = calls;
  if (reasoning !== null) m.reasoning_content = reasoning;
  return m;
}

function stepMessages(step) {
  if (step.turn === 'user') return [{ role: 'user', content: step.user }];
  const { preamble, call, result } = step.tool;
  return [{ role: 'assistant', content: preamble, tool_calls: [call] }, { role: 'tool', tool_call_id: call.id, content: result }];
}

async function conversation(conv) {
  let history = [{ role: 'system', content: conv.system }];
  for (const step of conv.steps) {
    if (stopping) return;
    const messages = [...history, ...stepMessages(step)];
    const reply = await ask(messages, conv.tools, step.maxTokens);
    if (!reply) return;
    history = [...messages, reply];
  }
}

/** Conversations of trace after trace (seeds 1, 2, ...), `concurrency` at a time, until stopped. */
async function load() {
  let seed = 0;
  let queue = [];
  const next = () => {
    if (queue.length === 0) {
      seed++;
      queue = makeTrace({ seed, conversations: Number(opt.conversations), concurrency,
        maxTokensMax: Number(opt['max-tokens-max']), pRegenerate: 0, pEdit: 0, pDrop: 0, restartAt: 0 }).conversations
        .map((c) => ({ ...c, id: `${seed}.${c.id}` }));
    }
    return queue.shift();
  };
  const worker = async () => {
    while (!stopping) await conversation(next());
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return seed;
}

// --- Sampling ---------------------------------------------------------------------------------

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

const csvPath = path.join(opt.out, 'soak.csv');
fs.writeFileSync(csvPath, 't_s,rss_mib,cache_ram_mib,cache_device_mib,cache_disk_mib,disk_files,entries,anchors,' +
  'requests,errors,p50_ms,p95_ms,load1\n');
const rows = [];
const idleRss = rssBytes();
log(`server pid ${opt.pid}, RSS before the first request ${(idleRss / MIB).toFixed(0)} MiB; ` +
  `cache RAM budget ${(budgetBytes / MIB).toFixed(0)} MiB; ${opt.minutes} min, a sample every ${opt['sample-s']} s`);

let taken = 0;
async function sample() {
  const t = now();
  const batch = ended.slice(taken);
  taken += batch.length;
  const ms = batch.map((e) => e.ms).sort((a, b) => a - b);
  const st = await cacheStats();
  const row = {
    t_s: t / 1000, rss_mib: (rssBytes() ?? NaN) / MIB,
    cache_ram_mib: (st?.bytes?.ram ?? NaN) / MIB, cache_device_mib: (st?.bytes?.device ?? NaN) / MIB,
    cache_disk_mib: (st?.bytes?.disk ?? NaN) / MIB, disk_files: st?.disk?.files ?? NaN,
    entries: st?.entries ?? NaN, anchors: st?.anchors ?? NaN,
    requests: batch.length, errors: batch.filter((e) => e.error).length,
    p50_ms: percentile(ms, 0.5), p95_ms: percentile(ms, 0.95), load1: loadavg(),
  };
  rows.push(row);
  const f = (v, d = 1) => (v === null || Number.isNaN(v) ? '' : Number(v).toFixed(d));
  fs.appendFileSync(csvPath, [f(row.t_s), f(row.rss_mib), f(row.cache_ram_mib), f(row.cache_device_mib),
    f(row.cache_disk_mib), f(row.disk_files, 0), f(row.entries, 0), f(row.anchors, 0), row.requests, row.errors,
    f(row.p50_ms, 0), f(row.p95_ms, 0), f(row.load1, 2)].join(',') + '\n');
  log(`t ${f(row.t_s, 0)} s: RSS ${f(row.rss_mib, 0)} MiB, cache RAM ${f(row.cache_ram_mib, 0)} MiB, disk ` +
    `${f(row.cache_disk_mib, 0)} MiB (${f(row.disk_files, 0)} files), ${row.requests} requests, ${row.errors} errors, ` +
    `p50 ${f(row.p50_ms, 0)} ms, p95 ${f(row.p95_ms, 0)} ms`);
  return row;
}

const loading = load();
const hostileTally = { sent: 0, statuses: {}, ms: [] };
const hostileBodyList = Number(opt.hostile) > 0 ? hostileBodies(opt['hostile-bodies']) : [];
const hostiles = Array.from({ length: Number(opt.hostile) },
  (_, i) => hostileClient(opt.url, hostileBodyList, i, () => stopping, hostileTally));
while (now() < durationMs) {
  await sleep(Math.min(sampleMs, durationMs - now()));
  const row = await sample();
  if (Number.isNaN(row.rss_mib)) {
    log('the server is gone: stopping');
    break;
  }
}
stopping = true;
const traces = await loading;
await Promise.all(hostiles);
await sample();

// --- Summary ---------------------------------------------------------------------------------

const all = ended.map((e) => e.ms).sort((a, b) => a - b);
const warm = ended.filter((e) => e.t >= warmupMs).map((e) => e.ms).sort((a, b) => a - b);
report({
  minutes: Number(opt.minutes), sample_s: Number(opt['sample-s']), warmup_s: warmupMs / 1000, traces,
  requests: ended.length, errors: ended.filter((e) => e.error).length,
  latency_ms: { p50: percentile(all, 0.5), p95: percentile(all, 0.95), after_warmup_p50: percentile(warm, 0.5),
    after_warmup_p95: percentile(warm, 0.95) },
  idle_rss_mib: idleRss / MIB, cache_ram_budget_mib: budgetBytes / MIB,
  hostile: hostiles.length === 0 ? null : {
    clients: hostiles.length, bodies: opt['hostile-bodies'], sent: hostileTally.sent, statuses: hostileTally.statuses,
    ms_p50: percentile([...hostileTally.ms].sort((a, b) => a - b), 0.5), ms_max: Math.max(0, ...hostileTally.ms) },
}, rows, opt.out);
