#!/usr/bin/env node
// The raw-engine part of the benchmark (docs/benchmarks/README.md "Raw engine and time"): how fast
// the server's engine loop decodes and prefills, with the cache out of the picture, so that
// lineage-server and llama-server are compared on the same model, threads and parallelism.
//
//   node tools/bench/engine.mjs --name NAME --out DIR [flags] -- SERVER ARGV... ({port} is replaced)
//
// Measures, in this order, on one freshly started server:
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
const serverArgv = dash < 0 ? [] : process.argv.slice(dash + 1);
if (serverArgv.length === 0) {
  process.stderr.write('usage: engine.mjs --name NAME --out DIR [flags] -- SERVER ARGV...\n');
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

const log = (s) => process.stderr.write(`[engine ${opt.name}] ${s}\n`);
fs.mkdirSync(opt.out, { recursive: true });
const port = opt.port ? Number(opt.port) : await freePort();
const BASE = `http://127.0.0.1:${port}`;
const server = new ServerProc(serverArgv.map((a) => a.replaceAll('{port}', String(port))),
  path.join(opt.out, `${opt.name}.engine.server.log`), { base: BASE, log });

const postJson = (pathname, body) => postJsonTo(BASE, pathname, body, 900_000);

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
 *  (ms) and the server's usage and timings. */
async function stream(body) {
  const t0 = performance.now();
  const r = await fetch(`${BASE}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true }, timings_per_token: true }),
    signal: AbortSignal.timeout(900_000) });
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
async function wordTokenIds() {
  const ids = new Set();
  const words = ['alpha', 'river', 'stone', 'window', 'seven', 'quick', 'table', 'market', 'signal', 'orange',
    'thread', 'engine', 'garden', 'silver', 'number', 'planet', 'copper', 'winter', 'camera', 'pocket', 'the', 'and',
    'house', 'water', 'light', 'green', 'small', 'large', 'north', 'south', 'paper', 'music', 'story', 'field'];
  for (const w of words) {
    const r = await postJson('/tokenize', { content: ` ${w}`, add_special: false, parse_special: false });
    const toks = (r.tokens ?? []).map((t) => (typeof t === 'number' ? t : t.id));
    if (toks.length === 1) ids.add(toks[0]);
  }
  return [...ids];
}

/** Token ids that end a reply (suppressed so that every run decodes the same number). */
async function stopTokenIds() {
  const ids = new Set();
  for (const piece of ['<|im_end|>', '<|endoftext|>', '</s>', '<|eot_id|>']) {
    try {
      const r = await postJson('/tokenize', { content: piece, add_special: false, parse_special: true });
      const toks = (r.tokens ?? []).map((t) => (typeof t === 'number' ? t : t.id));
      if (toks.length === 1) ids.add(toks[0]);
    } catch { /* not in this vocabulary */ }
  }
  return [...ids];
}

/** Voluntary context switches summed over the server's threads. */
function contextSwitches() {
  let n = 0;
  try {
    for (const t of fs.readdirSync(`/proc/${server.proc.pid}/task`)) {
      const st = fs.readFileSync(`/proc/${server.proc.pid}/task/${t}/status`, 'utf8');
      n += Number((st.match(/^voluntary_ctxt_switches:\s+(\d+)/m) || [])[1] ?? 0);
    }
  } catch { /* gone */ }
  return n;
}

const best = (runs, key) => runs.reduce((a, b) => (b[key] > a[key] ? b : a));

async function main() {
  const readyMs = await server.start(Number(opt['ready-timeout-s']) * 1000);
  log(`ready in ${readyMs} ms`);
  const stops = await stopTokenIds();
  const words = await wordTokenIds();
  if (words.length < 8) throw new Error(`only ${words.length} single-token words in this vocabulary`);
  const bias = Object.fromEntries([...stops.map((id) => [String(id), -100]), ...words.map((id) => [String(id), 100])]);
  // Each request's own filler (its nonce first), so that no request reuses another's prefix.
  const decodePrompt = (nonce) => (DECODE_CONTEXT > 0
    ? `${nonce}: ${filler([...nonce].reduce((h, c) => Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0, 2166136261),
      Math.round(DECODE_CONTEXT / 1.3))}\n\n` : '')
    + `Write a story, ${nonce}.`;
  const decodeBody = (nonce) => ({ model: 'default', prompt: decodePrompt(nonce),
    max_tokens: DECODE, temperature: 0, logit_bias: bias, ignore_eos: true, cache_prompt: false });
  await stream({ ...decodeBody('warm-up'), max_tokens: 8 });  // first-use costs (page faults of the weights)

  const out = { name: opt.name, argv: serverArgv, decode_tokens: DECODE, decode_context: DECODE_CONTEXT, streams: STREAMS, repeats: REPEATS,
    stop_token_ids: stops, word_token_ids: words, decode_1: null, decode_n: null, prefill: [] };

  const d1 = [];
  for (let k = 0; k < REPEATS; k++) {
    const cs0 = contextSwitches();
    const r = await stream(decodeBody(`one ${k}`));
    const n = r.usage?.completion_tokens ?? r.timings?.predicted_n ?? 0;
    const wall = (r.end - r.t0) / 1000;
    d1.push({ completion_tokens: n,
      server_tok_s: r.timings?.predicted_per_second ?? null,
      client_tok_s: n > 1 && r.end > r.first ? (n - 1) / ((r.end - r.first) / 1000) : null,
      ctx_switches_per_s: wall > 0 ? (contextSwitches() - cs0) / wall : null });
    log(`decode_1 run ${k + 1}: ${JSON.stringify(d1.at(-1))}`);
  }
  out.decode_1 = { ...best(d1, 'client_tok_s'), runs: d1 };

  const dn = [];
  for (let k = 0; k < REPEATS; k++) {
    const rs = await Promise.all(Array.from({ length: STREAMS }, (_, i) => stream(decodeBody(`many ${k} ${i}`))));
    const n = rs.reduce((a, r) => a + (r.usage?.completion_tokens ?? r.timings?.predicted_n ?? 0), 0);
    const span = (Math.max(...rs.map((r) => r.end)) - Math.min(...rs.map((r) => r.first))) / 1000;
    // While every stream decodes (from the last stream's first token to the first stream's last):
    // the streams' prefills are out of this window, whatever order the server ran them in.
    const from = Math.max(...rs.map((r) => r.first));
    const to = Math.min(...rs.map((r) => (r.chunks.length ? r.chunks.at(-1) : r.end)));
    const inside = rs.reduce((a, r) => a + r.chunks.filter((t) => t > from && t <= to).length, 0);
    dn.push({ completion_tokens: n, aggregate_tok_s: span > 0 ? n / span : null,
      all_decoding_tok_s: to > from ? inside / ((to - from) / 1000) : null,
      server_tok_s_each: rs.map((r) => r.timings?.predicted_per_second ?? null) });
    log(`decode_${STREAMS} run ${k + 1}: ${JSON.stringify(dn.at(-1))}`);
  }
  out.decode_n = { ...best(dn, 'aggregate_tok_s'), runs: dn };

  for (const target of PREFILL) {
    // ~1.3 tokens a word for this filler with BPE vocabularies; measured below, not assumed.
    const text = filler(target, Math.round(target / 1.3));
    const runs = [];
    for (let k = 0; k < REPEATS; k++) {
      const r = await stream({ model: 'default', prompt: `${k} ${opt.name} ${text}`,
        max_tokens: 1, temperature: 0, cache_prompt: false });
      const n = r.usage?.prompt_tokens ?? r.timings?.prompt_n ?? 0;
      const ms = r.timings?.prompt_ms ?? null;
      runs.push({ prompt_tokens: n, computed: r.timings?.prompt_n ?? null, server_prompt_ms: ms,
        server_tok_s: ms ? (r.timings.prompt_n / (ms / 1000)) : null, client_s: (r.end - r.t0) / 1000 });
      log(`prefill ~${target} run ${k + 1}: ${JSON.stringify(runs.at(-1))}`);
    }
    out.prefill.push({ target, ...runs.reduce((a, b) => (b.client_s < a.client_s ? b : a)), runs });
  }
  out.memory = server.memory();
  await server.stop();
  const file = path.join(opt.out, `${opt.name}.engine.json`);
  if (opt.append && fs.existsSync(file)) {
    // Another round of the same measures (scripts/bench alternates the servers round by round,
    // so that a slow minute of a shared machine does not land on one server only): keep every
    // run, and the best of all of them.
    const old = JSON.parse(fs.readFileSync(file, 'utf8'));
    out.rounds = (old.rounds ?? 1) + 1;
    const d1 = [...old.decode_1.runs, ...out.decode_1.runs];
    out.decode_1 = { ...best(d1, 'client_tok_s'), runs: d1 };
    const dn = [...old.decode_n.runs, ...out.decode_n.runs];
    out.decode_n = { ...best(dn, 'aggregate_tok_s'), runs: dn };
    out.prefill = out.prefill.map((p) => {
      const runs = [...(old.prefill.find((q) => q.target === p.target)?.runs ?? []), ...p.runs];
      return { target: p.target, ...runs.reduce((a, b) => (b.client_s < a.client_s ? b : a)), runs };
    });
    out.memory.peak_rss_bytes = Math.max(out.memory.peak_rss_bytes ?? 0, old.memory?.peak_rss_bytes ?? 0) || null;
  }
  fs.writeFileSync(file, JSON.stringify(out, null, 2) + '\n');
  log(`wrote ${path.join(opt.out, `${opt.name}.engine.json`)}`);
}

main().catch(async (e) => {
  log(`failed: ${e.stack ?? e}`);
  await server.stop();
  process.exit(1);
});
