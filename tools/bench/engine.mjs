#!/usr/bin/env node
// The raw-engine part of the benchmark (docs/benchmarks/README.md "Raw engine and time"): how fast
// the server's engine loop decodes and prefills, with the cache out of the picture, so that
// lineage-server and llama-server are compared on the same model, threads and parallelism.
//
//   node tools/bench/engine.mjs --name NAME --out DIR [flags] -- SERVER ARGV... ({port} is replaced)
//   node tools/bench/engine.mjs --name A,B --out DIR [flags] -- A's ARGV... -- B's ARGV...
//
// With several names, every server is started (each idle while another computes) and each measure's
// runs alternate between them, the order reversed run by run (A B, B A, ...): run k of one server
// and run k of another are then minutes apart at most, so a machine whose speed drifts (a shared
// VM) moves both alike, and report.mjs prints the median of the paired ratios beside the best runs.
//
// Measures, in this order, on freshly started servers:
//   decode_1   one streamed completion request decoding --decode-tokens tokens (a logit bias steers
//              it into plain word tokens and away from EOS, so every run decodes the same number:
//              wordTokenIds): decode tokens/s from the server's own timing line
//              (timings.predicted_per_second, both servers report it) and from the client
//              (completion tokens - 1 over first-to-last chunk).
//   decode_n   --streams concurrent such requests: aggregate decode tokens/s = all completion
//              tokens / (last stream's end - first stream's first chunk), client side.
//   prefill_K  for each K in --prefill (prompt sizes in tokens): a cold prefill of a ~K-token
//              prompt (`cache_prompt: false`, a nonce in front, max_tokens 1): tokens/s from
//              the server's timings (prompt_n / prompt_ms) and the client's time to the end.
// Each measure runs --repeats times; the best run is kept (the least disturbed by the machine),
// and every run is in the output. The server's threads' voluntary context switches per second
// during decode_1 are recorded too (/proc/PID/task/*/status): a computing thread that sleeps
// at every barrier shows here first (docs/architecture.md "One computing thread").
//
// Writes DIR/NAME.engine.json; tools/bench/report.mjs puts the figures of every configuration
// side by side, as ratios to llama-server's.
// Flags: --decode-tokens (300) --streams (3) --prefill (3000,12000) --repeats (2) --port
// --decode-context (0: tokens of filler in front of each decode prompt, so that decode reads a KV cache
// of that length, as the agent trace's replies do),
// --ready-timeout-s (300), --append (add this round's runs to an existing NAME.engine.json).
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { ServerProc, freePort, postJson as postJsonTo } from './cluster.mjs';

const dash = process.argv.indexOf('--');
const { values: opt } = parseArgs({
  args: dash < 0 ? process.argv.slice(2) : process.argv.slice(2, dash),
  options: {
    name: { type: 'string', default: 'server' },
    out: { type: 'string', default: 'build/bench' },
    port: { type: 'string' },
    'decode-tokens': { type: 'string', default: '300' },
    streams: { type: 'string', default: '3' },
    prefill: { type: 'string', default: '3000,12000' },
    'decode-context': { type: 'string', default: '0' },
    repeats: { type: 'string', default: '2' },
    append: { type: 'boolean', default: false },
    'ready-timeout-s': { type: 'string', default: '300' },
  },
});
// One server command line per name, each after its own `--`.
const names = opt.name.split(',').filter(Boolean);
const argvs = [];
for (let i = dash; i >= 0 && i < process.argv.length; i++) {
  if (process.argv[i] === '--') argvs.push([]);
  else argvs.at(-1).push(process.argv[i]);
}
if (names.length === 0 || argvs.length !== names.length || argvs.some((a) => a.length === 0)) {
  process.stderr.write('usage: engine.mjs --name NAME[,NAME...] --out DIR [flags] -- SERVER ARGV... [-- SERVER ARGV...]\n' +
    '  (one `--` and command line per name)\n');
  process.exit(2);
}
const positive = (flag) => {
  const v = Number(opt[flag]);
  if (!Number.isInteger(v) || v < 1) throw new Error(`--${flag} must be a positive integer, got ${opt[flag]}`);
  return v;
};
const DECODE = positive('decode-tokens');
const STREAMS = positive('streams');
const REPEATS = positive('repeats');
// Tokens (about) of filler text in front of every decode request's prompt: the agent trace decodes
// after 2-5k tokens of conversation, where each step's attention reads that much KV cache.
const DECODE_CONTEXT = Number(opt['decode-context']);
if (!Number.isInteger(DECODE_CONTEXT) || DECODE_CONTEXT < 0) {
  throw new Error(`--decode-context takes a number of tokens (>= 0), got ${opt['decode-context']}`);
}
const PREFILL = opt.prefill.split(',').filter(Boolean).map((x) => {
  const v = Number(x);
  if (!Number.isInteger(v) || v < 16) throw new Error(`--prefill takes prompt sizes in tokens (>= 16), got ${x}`);
  return v;
});

fs.mkdirSync(opt.out, { recursive: true });
if (opt.port && names.length > 1) throw new Error('--port takes one server; leave it out with several names');
const servers = [];
for (const [i, name] of names.entries()) {
  const port = opt.port ? Number(opt.port) : await freePort();
  const base = `http://127.0.0.1:${port}`;
  const log = (s) => process.stderr.write(`[engine ${name}] ${s}\n`);
  servers.push({ name, base, log, argv: argvs[i],
    proc: new ServerProc(argvs[i].map((a) => a.replaceAll('{port}', String(port))),
      path.join(opt.out, `${name}.engine.server.log`), { base, log }) });
}

const postJson = (srv, pathname, body) => postJsonTo(srv.base, pathname, body, 900_000);

/** Deterministic filler text (a linear congruential generator over a small word list). */
function filler(seed, words) {
  const vocab = ['alpha', 'river', 'stone', 'window', 'seven', 'quick', 'table', 'market', 'signal', 'orange',
    'thread', 'engine', 'garden', 'silver', 'number', 'planet', 'copper', 'winter', 'camera', 'pocket'];
  let x = seed >>> 0;
  const out = [];
  for (let i = 0; i < words; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length] + (x % 7 === 0 ? '.' : ''));
  }
  return out.join(' ');
}

/** One streamed completion (POST /v1/completions: a raw prompt, no chat template or reply parser,
 *  whose end-of-stream parse of a random-weight model's text can fail); returns client times
 *  (ms) and the server's usage and timings. A request that fails before any answer (fetch's
 *  "fetch failed": a kept-alive connection that the server closed after its idle timeout as the
 *  client reused it, seen from llama-server between two runs of the other server; undici does not
 *  retry a POST) is sent again, up to 2 more times, its clock started again. */
async function stream(srv, body) {
  let t0;
  let r;
  for (let attempt = 1; ; attempt++) {
    t0 = performance.now();
    try {
      r = await fetch(`${srv.base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true }, timings_per_token: true }),
        signal: AbortSignal.timeout(900_000) });
      break;
    } catch (e) {
      const why = e.cause ? `${e.message}: ${e.cause.code ?? ''} ${e.cause.message ?? e.cause}` : e.message;
      if (attempt >= 3 || e.name === 'TimeoutError') throw e;
      srv.log(`completion: ${why}; sending it again`);
      await new Promise((res) => setTimeout(res, 200));
    }
  }
  if (r.status !== 200) throw new Error(`completion -> ${r.status}: ${(await r.text()).slice(0, 300)}`);
  let first = null;
  const chunks = [];  // arrival time (ms) of each chunk that carries a token
  let usage = null;
  let timings = null;
  let buf = '';
  const dec = new TextDecoder();
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]') continue;
      const ev = JSON.parse(data);
      // llama-server parses a random-weight model's text at the end of the stream and may answer
      // that parse with an error event after every token was streamed: the per-chunk timings
      // (timings_per_token) already say what was computed.
      if (ev.error) {
        if (first === null || timings === null) throw new Error(`stream error: ${JSON.stringify(ev.error)}`);
        continue;
      }
      if ((ev.choices ?? []).length > 0) {
        const now = performance.now();
        if (first === null) first = now;
        if (ev.choices.some((c) => c.text)) chunks.push(now);
      }
      if (ev.usage) usage = ev.usage;
      if (ev.timings) timings = ev.timings;
    }
  }
  const end = performance.now();
  return { t0, first: first ?? end, end, usage, timings, chunks };
}

/** Token ids of plain ASCII words (" alpha", " river", ...), each one token in this vocabulary.
 *  Decoding is steered into them by a logit bias: a random-weight model otherwise emits byte
 *  tokens that make invalid UTF-8 and special tokens, and llama-server's reply parser then ends
 *  the stream with an error after a few dozen tokens, so no two runs decoded the same number. */
async function wordTokenIds(srv) {
  const ids = new Set();
  const words = ['alpha', 'river', 'stone', 'window', 'seven', 'quick', 'table', 'market', 'signal', 'orange',
    'thread', 'engine', 'garden', 'silver', 'number', 'planet', 'copper', 'winter', 'camera', 'pocket', 'the', 'and',
    'house', 'water', 'light', 'green', 'small', 'large', 'north', 'south', 'paper', 'music', 'story', 'field'];
  for (const w of words) {
    const r = await postJson(srv, '/tokenize', { content: ` ${w}`, add_special: false, parse_special: false });
    const toks = (r.tokens ?? []).map((t) => (typeof t === 'number' ? t : t.id));
    if (toks.length === 1) ids.add(toks[0]);
  }
  return [...ids];
}

/** Token ids that end a reply (suppressed so that every run decodes the same number). */
async function stopTokenIds(srv) {
  const ids = new Set();
  for (const piece of ['<|im_end|>', '<|endoftext|>', '</s>', '<|eot_id|>']) {
    try {
      const r = await postJson(srv, '/tokenize', { content: piece, add_special: false, parse_special: true });
      const toks = (r.tokens ?? []).map((t) => (typeof t === 'number' ? t : t.id));
      if (toks.length === 1) ids.add(toks[0]);
    } catch { /* not in this vocabulary */ }
  }
  return [...ids];
}

/** Voluntary context switches summed over the server's threads. */
function contextSwitches(srv) {
  const pid = srv.proc.proc.pid;
  let n = 0;
  try {
    for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
      const st = fs.readFileSync(`/proc/${pid}/task/${t}/status`, 'utf8');
      n += Number((st.match(/^voluntary_ctxt_switches:\s+(\d+)/m) || [])[1] ?? 0);
    }
  } catch { /* gone */ }
  return n;
}

const best = (runs, key) => runs.reduce((a, b) => (b[key] > a[key] ? b : a));
const fastest = (runs) => runs.reduce((a, b) => (b.client_s < a.client_s ? b : a));

/** Runs fn(srv, k) for k in 0..REPEATS-1 on every server, the order reversed run by run, and
 *  returns each server's runs (by name). */
async function interleaved(fn) {
  const runs = Object.fromEntries(servers.map((x) => [x.name, []]));
  for (let k = 0; k < REPEATS; k++) {
    for (const srv of (k % 2 === 0 ? servers : [...servers].reverse())) {
      runs[srv.name].push(await fn(srv, k));
    }
  }
  return runs;
}

async function main() {
  for (const srv of servers) {
    const readyMs = await srv.proc.start(Number(opt['ready-timeout-s']) * 1000);
    srv.log(`ready in ${readyMs} ms`);
    srv.stops = await stopTokenIds(srv);
    srv.words = await wordTokenIds(srv);
    if (srv.words.length < 8) throw new Error(`only ${srv.words.length} single-token words in this vocabulary`);
    srv.bias = Object.fromEntries([...srv.stops.map((id) => [String(id), -100]), ...srv.words.map((id) => [String(id), 100])]);
  }
  // Each request's own filler (its nonce first), so that no request reuses another's prefix.
  const decodePrompt = (nonce) => (DECODE_CONTEXT > 0
    ? `${nonce}: ${filler([...nonce].reduce((h, c) => Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0, 2166136261),
      Math.round(DECODE_CONTEXT / 1.3))}\n\n` : '')
    + `Write a story, ${nonce}.`;
  const decodeBody = (srv, nonce) => ({ model: 'default', prompt: decodePrompt(nonce),
    max_tokens: DECODE, temperature: 0, logit_bias: srv.bias, ignore_eos: true, cache_prompt: false });
  for (const srv of servers) {
    await stream(srv, { ...decodeBody(srv, 'warm-up'), max_tokens: 8 });  // first-use costs (page faults of the weights)
  }

  const d1 = await interleaved(async (srv, k) => {
    const cs0 = contextSwitches(srv);
    const r = await stream(srv, decodeBody(srv, `one ${k}`));
    const n = r.usage?.completion_tokens ?? r.timings?.predicted_n ?? 0;
    const wall = (r.end - r.t0) / 1000;
    const run = { completion_tokens: n,
      server_tok_s: r.timings?.predicted_per_second ?? null,
      client_tok_s: n > 1 && r.end > r.first ? (n - 1) / ((r.end - r.first) / 1000) : null,
      ctx_switches_per_s: wall > 0 ? (contextSwitches(srv) - cs0) / wall : null };
    srv.log(`decode_1 run ${k + 1}: ${JSON.stringify(run)}`);
    return run;
  });

  const dn = await interleaved(async (srv, k) => {
    const rs = await Promise.all(Array.from({ length: STREAMS }, (_, i) => stream(srv, decodeBody(srv, `many ${k} ${i}`))));
    const n = rs.reduce((a, r) => a + (r.usage?.completion_tokens ?? r.timings?.predicted_n ?? 0), 0);
    const span = (Math.max(...rs.map((r) => r.end)) - Math.min(...rs.map((r) => r.first))) / 1000;
    // While every stream decodes (from the last stream's first token to the first stream's last):
    // the streams' prefills are out of this window, whatever order the server ran them in.
    const from = Math.max(...rs.map((r) => r.first));
    const to = Math.min(...rs.map((r) => (r.chunks.length ? r.chunks.at(-1) : r.end)));
    const inside = rs.reduce((a, r) => a + r.chunks.filter((t) => t > from && t <= to).length, 0);
    const run = { completion_tokens: n, aggregate_tok_s: span > 0 ? n / span : null,
      all_decoding_tok_s: to > from ? inside / ((to - from) / 1000) : null,
      server_tok_s_each: rs.map((r) => r.timings?.predicted_per_second ?? null) };
    srv.log(`decode_${STREAMS} run ${k + 1}: ${JSON.stringify(run)}`);
    return run;
  });

  const pre = [];
  for (const target of PREFILL) {
    // ~1.3 tokens a word for this filler with BPE vocabularies; measured below, not assumed.
    const text = filler(target, Math.round(target / 1.3));
    pre.push({ target, runs: await interleaved(async (srv, k) => {
      const r = await stream(srv, { model: 'default', prompt: `${k} ${srv.name} ${text}`,
        max_tokens: 1, temperature: 0, cache_prompt: false });
      const n = r.usage?.prompt_tokens ?? r.timings?.prompt_n ?? 0;
      const ms = r.timings?.prompt_ms ?? null;
      const run = { prompt_tokens: n, computed: r.timings?.prompt_n ?? null, server_prompt_ms: ms,
        server_tok_s: ms ? (r.timings.prompt_n / (ms / 1000)) : null, client_s: (r.end - r.t0) / 1000 };
      srv.log(`prefill ~${target} run ${k + 1}: ${JSON.stringify(run)}`);
      return run;
    }) });
  }

  for (const srv of servers) {
    const file = path.join(opt.out, `${srv.name}.engine.json`);
    // Another round of the same measures (--append: scripts/bench runs rounds, each with fresh
    // servers and the order reversed) adds its runs to the file's; the best of all of them is kept.
    const old = opt.append && fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : null;
    const r1 = [...(old?.decode_1.runs ?? []), ...d1[srv.name]];
    const rn = [...(old?.decode_n.runs ?? []), ...dn[srv.name]];
    const out = { name: srv.name, argv: srv.argv, decode_tokens: DECODE, decode_context: DECODE_CONTEXT, streams: STREAMS,
      repeats: REPEATS, stop_token_ids: srv.stops, word_token_ids: srv.words,
      // The servers whose runs alternated with this one's (run k beside run k): report.mjs pairs them.
      interleaved_with: servers.filter((x) => x !== srv).map((x) => x.name),
      ...(old ? { rounds: (old.rounds ?? 1) + 1 } : {}),
      decode_1: { ...best(r1, 'client_tok_s'), runs: r1 },
      decode_n: { ...best(rn, 'aggregate_tok_s'), runs: rn },
      prefill: pre.map(({ target, runs }) => {
        const all = [...(old?.prefill.find((q) => q.target === target)?.runs ?? []), ...runs[srv.name]];
        return { target, ...fastest(all), runs: all };
      }) };
    out.memory = srv.proc.memory();
    await srv.proc.stop();
    if (old) out.memory.peak_rss_bytes = Math.max(out.memory.peak_rss_bytes ?? 0, old.memory?.peak_rss_bytes ?? 0) || null;
    fs.writeFileSync(file, JSON.stringify(out, null, 2) + '\n');
    srv.log(`wrote ${file}`);
  }
}

main().catch(async (e) => {
  process.stderr.write(`[engine ${names.join(',')}] failed: ${e.stack ?? e}\n`);
  for (const srv of servers) await srv.proc.stop();
  process.exit(1);
});
