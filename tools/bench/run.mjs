#!/usr/bin/env node
// The agent-workload benchmark driver (docs/benchmarks/README.md): starts a server, replays the
// trace of tools/bench/trace.mjs against its OpenAI API in closed loop with concurrent
// conversations, restarts the server once (two thirds of the way through), and records every
// request.
//
//   node tools/bench/run.mjs --name NAME --out DIR [trace flags] -- SERVER ARGV... ({port} is replaced)
//   node tools/bench/run.mjs --dry-run [trace flags]      # print the plan only
//
// Trace flags (defaults in trace.mjs): --seed --concurrency --conversations --turns-min
// --turns-max --user-min --user-max --tool-min --tool-max --max-tokens-min --max-tokens-max
// --p-tool --p-regenerate --p-edit --p-drop --restart-at --persona-scale,
// --system-variation none|end|mid (per-session lines at the end of every system text, or a
// per-project line at ~80% of it, as agents write them), --cold-personas 1 (every session a new
// persona: a system text of its own after the shared tool block; the cold-heavy trace), --think-ms (a pause before each user
// turn after the first, the user reading the reply and typing: 0, the default, is closed loop;
// agent-loop tool steps never pause), --side-calls N (after each step's requests, N short side
// requests of the same conversation's flow: a title, a summary, a classification, a subagent's
// first step, in turn; each kind with its own short system text, no tools, a user message quoting
// the conversation's latest text, max_tokens --side-max-tokens-min/max (8-16), quotes of
// --side-quote-min/max tokens (40-240); 0, the default, is the trace without them).
// A cluster (--replicas N, N > 1; tools/bench/cluster.mjs): a redis-server (no persistence,
// --redis-maxmemory, default 2gb, allkeys-lru), N servers from SERVER ARGV ({port}, {replica}
// (1-based) and {redis} (its redis:// URL) replaced per replica) and HAProxy with --haproxy-cfg
// (default deploy/haproxy.cfg: session-affine consistent hashing) in front; requests go through
// HAProxy, and the restart is rolling (each replica in turn, the next once HAProxy has it back).
// Every request carries its conversation's session key (prompt_cache_key; Messages:
// metadata.user_id), what HAProxy routes on, for one server too so that the traces are the same.
// Other flags: --port (default: a free one), --timeout-s (per request, 900), --ready-timeout-s (300),
// --dump-prompts (also write DIR/NAME.prompts.jsonl: every rendered prompt and reply, to debug misses),
// --api chat|messages|responses (default chat): the API the requests go through. messages and
// responses send the same conversation as an Anthropic Messages or an OpenAI Responses request
// (tools/bench/dialects.mjs), echo the assistant's blocks/items back verbatim as those clients
// do, and read usage in that API's terms; the oracle is the same (chat form, /apply-template).
//
// Every side call carries its kind's own key (bench-SEED-side-KIND), not its conversation's.
//
// Per request (DIR/NAME.jsonl, one JSON object a line): conversation, persona, step, kind
// (cold, sibling, new_session, warm, regenerate, edit, dropped, retry, after_restart, side; a side
// call has `side`: title, summary, classify or subagent), prompt
// tokens and cached tokens as reported (usage), prefill tokens computed (llama-server:
// timings.prompt_n; otherwise prompt - cached), TTFT (client side, to the first streamed delta
// with content, reasoning or a tool call), total latency, and the oracle: prompt length minus the
// longest common prefix with anything the server has seen before in this trace (earlier prompts,
// and earlier prompts followed by their generated replies), never below 1. The oracle needs token
// ids: after the run every prompt is rendered by the server (POST /apply-template) and tokenized
// (POST /tokenize); a reply's tokens are its text as the model emitted it, tokenized the same
// way (reconstructed from reasoning_content and content: see generatedText()).
// A conversation's next turn (base kind warm: a user message or a tool step after a reply) also
// gets `history_tokens`, its history boundary: the tokens before its own new messages (its
// history, the echoed replies included, as this prompt renders them: historyBoundary()), and
// `history_restored`: whether the cached tokens reported reached that boundary, or the oracle's
// reach where the oracle reaches less (a reply the template renders otherwise than the model
// emitted it).
// After the run (DIR/NAME.summary.json): RSS and peak RSS of the server (/proc; a cluster: summed
// over the replicas, and each replica's against its budget, RSS once ready + --cache-ram-bytes,
// in `memory`), bytes written to disk by it (/proc/PID/io), bytes held in RAM by its cache
// (lineage-server: GET /v1/cache/stats; llama-server: the last "cache state" line of its log,
// at -lv 4); a cluster's Redis memory (INFO memory) too.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import { Cluster, ServerProc, freePort, postJson as postJsonTo } from './cluster.mjs';
import { attachEcho, streamMessages, streamResponses } from './dialects.mjs';
import { summarize } from './summary.mjs';
import { DEFAULTS, makeTrace } from './trace.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const OPENAI_ENTRY = path.resolve(HERE, '../../tests/e2e/node_modules/openai/index.mjs');

// --- Flags ------------------------------------------------------------------------------------

const TRACE_FLAGS = {
  seed: 'seed', concurrency: 'concurrency', conversations: 'conversations', 'turns-min': 'turnsMin',
  'turns-max': 'turnsMax', 'user-min': 'userMin', 'user-max': 'userMax', 'tool-min': 'toolMin',
  'tool-max': 'toolMax', 'max-tokens-min': 'maxTokensMin', 'max-tokens-max': 'maxTokensMax', 'p-tool': 'pTool',
  'p-regenerate': 'pRegenerate', 'p-edit': 'pEdit', 'p-drop': 'pDrop', 'restart-at': 'restartAt',
  'persona-scale': 'personaScale', 'system-variation': 'systemVariation', 'think-ms': 'thinkMs',
  'cold-personas': 'coldPersonas', 'side-calls': 'sideCalls', 'side-quote-min': 'sideQuoteMin',
  'side-quote-max': 'sideQuoteMax', 'side-max-tokens-min': 'sideMaxTokensMin', 'side-max-tokens-max': 'sideMaxTokensMax',
};

const dash = process.argv.indexOf('--');
const ownArgs = dash < 0 ? process.argv.slice(2) : process.argv.slice(2, dash);
const serverArgv = dash < 0 ? [] : process.argv.slice(dash + 1);
const { values: opt } = parseArgs({
  args: ownArgs,
  options: {
    name: { type: 'string', default: 'server' },
    out: { type: 'string', default: 'build/bench' },
    port: { type: 'string' },
    'timeout-s': { type: 'string', default: '900' },
    'ready-timeout-s': { type: 'string', default: '300' },
    'dry-run': { type: 'boolean', default: false },
    'dump-prompts': { type: 'boolean', default: false },
    api: { type: 'string', default: 'chat' },
    replicas: { type: 'string', default: '1' },
    'haproxy-cfg': { type: 'string' },
    'redis-maxmemory': { type: 'string', default: '2gb' },
    help: { type: 'boolean', short: 'h', default: false },
    ...Object.fromEntries(Object.keys(TRACE_FLAGS).map((k) => [k, { type: 'string' }])),
  },
});
if (opt.help) {
  process.stdout.write(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(1)
    .filter((l) => l.startsWith('//')).map((l) => l.slice(3)).join('\n') + '\n');
  process.exit(0);
}
if (!['chat', 'messages', 'responses'].includes(opt.api)) {
  throw new Error(`--api must be chat, messages or responses, got ${opt.api}`);
}
const traceOpts = {};
for (const [flag, key] of Object.entries(TRACE_FLAGS)) {
  if (opt[flag] !== undefined) {
    if (key === 'systemVariation') {
      traceOpts[key] = opt[flag];
      continue;
    }
    const v = Number(opt[flag]);
    if (!Number.isFinite(v)) throw new Error(`--${flag} must be a number`);
    traceOpts[key] = v;
  }
}
const trace = makeTrace(traceOpts);

const log = (s) => process.stderr.write(`[bench ${opt.name}] ${s}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

if (opt['dry-run']) {
  const t = trace;
  process.stdout.write(`trace: ${t.conversations.length} conversations, ${t.totalRequests} requests, restart after ${t.restartAfter}\n`);
  process.stdout.write(`options: ${JSON.stringify(t.options)}\n`);
  for (const c of t.conversations) {
    const ev = c.steps.map((s) => `${s.turn === 'user' ? 'U' : 'T'}${s.event ? `(${s.event})` : ''}${s.side?.length ? `+${s.side.length}s` : ''}`).join(' ');
    process.stdout.write(`  #${c.id} ${c.persona}/${c.session} system ${c.system.length} chars: ${ev}\n`);
  }
  if (t.sideSystems) {
    process.stdout.write(`side calls (+Ns: N after the step): ${Object.entries(t.sideSystems).map(([k, v]) => `${k} (system ${v.length} chars)`).join(', ')}\n`);
  }
  process.exit(0);
}
if (serverArgv.length === 0) {
  process.stderr.write('usage: run.mjs --name NAME --out DIR [trace flags] -- SERVER ARGV... (see --help)\n');
  process.exit(2);
}

// --- The server process (or the cluster) -----------------------------------------------------

const replicas = Number(opt.replicas);
if (!Number.isInteger(replicas) || replicas < 1) throw new Error(`--replicas must be a positive integer, got ${opt.replicas}`);
fs.mkdirSync(opt.out, { recursive: true });
let server;
let BASE;
if (replicas > 1) {
  server = new Cluster({ argv: serverArgv, replicas, outDir: opt.out, name: opt.name, log,
    haproxyCfg: opt['haproxy-cfg'] ?? path.resolve(HERE, '../../deploy/haproxy.cfg'), redisMaxmemory: opt['redis-maxmemory'] });
} else {
  const port = opt.port ? Number(opt.port) : await freePort();
  BASE = `http://127.0.0.1:${port}`;
  server = new ServerProc(serverArgv.map((a) => a.replaceAll('{port}', String(port))),
    path.join(opt.out, `${opt.name}.server.log`), { base: BASE, log });
}

async function getJson(pathname) {
  try {
    const r = await fetch(BASE + pathname, { signal: AbortSignal.timeout(10_000) });
    return r.status === 200 ? await r.json() : null;
  } catch { return null; }
}
const postJson = (pathname, body) => postJsonTo(BASE, pathname, body, 120_000);

/** Bytes the server's cache holds (a cluster: summed over the replicas, and each one's). */
const cacheBytes = () => server.cacheBytes();

// --- Requests ---------------------------------------------------------------------------------

const { default: OpenAI } = await import(pathToFileURL(OPENAI_ENTRY).href);
let client = null;  // once the server (or the load balancer) is up: BASE is known then
let MODEL = 'default';
const T0 = performance.now();
const now = () => performance.now() - T0;

/** One streamed request. `dropAfter`: abort after that many content chunks (a dropped stream). */
async function stream(messages, tools, maxTokens, dropAfter = 0, sessionKey = undefined) {
  const ac = new AbortController();
  const r = { content: null, reasoning: null, toolCalls: [], usage: null, timings: null, finish: null,
    ttftMs: null, totalMs: null, chunks: 0, dropped: false, error: null };
  const t0 = performance.now();
  try {
    const s = await client.chat.completions.create({
      model: MODEL, messages, tools, max_tokens: maxTokens, temperature: 0,
      stream: true, stream_options: { include_usage: true }, prompt_cache_key: sessionKey,
      // llama-server: timings (prompt_n, cache_n) in every chunk, so that a stream that ends
      // in an error, or that the client drops, still says what was computed. Others ignore it.
      timings_per_token: true,
    }, { signal: ac.signal });
    for await (const chunk of s) {
      if (chunk.usage) r.usage = chunk.usage;
      if (chunk.timings) r.timings = chunk.timings;
      for (const ch of chunk.choices ?? []) {
        const d = ch.delta ?? {};
        const reasoning = d.reasoning_content ?? d.reasoning;
        if (d.content) r.content = (r.content ?? '') + d.content;
        if (reasoning) r.reasoning = (r.reasoning ?? '') + reasoning;
        for (const tc of d.tool_calls ?? []) {
          const slot = (r.toolCalls[tc.index ?? 0] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
          if (tc.id) slot.id = tc.id;
          if (tc.function?.name) slot.function.name += tc.function.name;
          if (tc.function?.arguments) slot.function.arguments += tc.function.arguments;
        }
        if (d.content || reasoning || d.tool_calls?.length) {
          if (r.ttftMs === null) r.ttftMs = performance.now() - t0;
          r.chunks++;
        }
        if (ch.finish_reason) r.finish = ch.finish_reason;
      }
      if (dropAfter && r.chunks >= dropAfter) { r.dropped = true; ac.abort(); break; }
    }
  } catch (e) {
    const msg = `${e.status ? `HTTP ${e.status}: ` : ''}${e.message}`;
    // An error after the reply streamed (llama-server's final parse of a random-weight model's
    // text, e.g. invalid UTF-8, fails with "does not match the expected ... format"): keep the
    // streamed reply, as a client that shows the stream would, and go on.
    if (!r.dropped && /does not match the expected/.test(msg)) r.parseError = msg;
    else if (!r.dropped) r.error = msg;
  }
  r.totalMs = performance.now() - t0;
  return r;
}

/** The assistant message to send back: exactly what the server returned. */
function echoOf(reply) {
  const m = { role: 'assistant', content: reply.content };
  if (reply.toolCalls.length) m.tool_calls = reply.toolCalls;
  else if (m.content === null) m.content = '';
  if (reply.reasoning !== null) m.reasoning_content = reply.reasoning;
  return attachEcho(m, reply.echo);
}

/** The text the model emitted after the prompt's generation prompt, reconstructed from the
 *  parsed reply for Qwen3.5-style templates (the prompt ends in "<think>\n"): the reasoning,
 *  then "\n</think>\n\n" and the content when there is content. Tool calls are not
 *  reconstructed (the random-weight bench models do not make them). An approximation: the
 *  parser may have trimmed whitespace, and re-tokenizing text need not give the sampled ids. */
function generatedText(reply, promptText) {
  const thinking = /<think>\n$/.test(promptText);
  if (thinking) {
    if (reply.content) return `${reply.reasoning ?? ''}\n</think>\n\n${reply.content}`;
    return reply.reasoning ?? '';
  }
  return reply.content ?? '';
}

// --- The closed loop --------------------------------------------------------------------------

const records = [];
const seenPersonas = new Set();       // personas (families by name) with a first request issued
const seenSinceRestart = new Set();
let issued = 0;
let inflight = 0;
let restarted = false;
let restartPromise = null;
let restartInfo = null;
let failures = 0;
let oracleErrors = 0;                // records whose prompt the server would not render or tokenize
let parseErrors = 0;                  // streams that ended in a parse error after the reply (kept)
const running = new Set();            // conversations started and not finished

async function restartServer() {
  while (inflight > 0) await sleep(50);
  // The conversations live now get their first request after the restart marked.
  for (const c of running) c.liveAtRestart = true;
  const before = { ...server.procStats(), cache: await cacheBytes(), at_request: issued, t_ms: now() };
  log(`restarting the server after ${issued} requests`);
  const t0 = performance.now();
  const readyMs = await server.restart(Number(opt['ready-timeout-s']) * 1000);
  restartInfo = { before, stop_start_ms: performance.now() - t0, ready_ms: readyMs };
  restarted = true;
  log(`server back in ${(restartInfo.stop_start_ms / 1000).toFixed(1)} s`);
}

async function gate() {
  if (!restarted && issued >= trace.restartAfter && trace.restartAfter > 0) {
    restartPromise ??= restartServer();
    await restartPromise;
  }
}

/** The 1-minute load average of the machine (other work competes for the same cores). */
function loadavg() {
  try { return Number(fs.readFileSync('/proc/loadavg', 'utf8').split(' ')[0]); } catch { return null; }
}

/** The conversation's session key, sent with each of its requests as agents do (chat and
 *  responses: prompt_cache_key; messages: metadata.user_id): the key HAProxy routes a
 *  conversation on (deploy/haproxy.cfg), sent to every configuration so that the traces are the
 *  same. A new session on a persona has a new key. */
const sessionKeyOf = (conv) => `bench-${trace.options.seed}-conv-${conv.id}`;
/** A side call's key: its kind's own (agents send these beside the session, not in it). */
const sideKeyOf = (side) => `bench-${trace.options.seed}-side-${side}`;

/** Sends one request of conversation `conv` and records it. `side`: a side call of that kind (no
 *  tools, its kind's key, never marked after_restart); `historyLen`: how many of `messages` come
 *  before the step's own (the history boundary of a next turn). */
async function send(conv, step, kind, messages, maxTokens, dropAfter = 0, { side = null, historyLen = null } = {}) {
  await gate();
  let base = kind;
  if (!side && restarted && !conv.afterRestartMarked && (conv.liveAtRestart || !seenSinceRestart.has(conv.persona))) {
    kind = 'after_restart';
    conv.afterRestartMarked = true;
  }
  if (restarted && !side) seenSinceRestart.add(conv.persona);
  const rec = {
    i: issued++, conv: conv.id, persona: conv.persona, session: conv.session, step: step.index, turn: side ? 'side' : step.turn,
    kind, base, ...(side ? { side } : {}), after_restart: restarted, t_send_ms: now(), max_tokens: maxTokens, load1: loadavg(),
  };
  inflight++;
  const sessionKey = side ? sideKeyOf(side) : sessionKeyOf(conv);
  const tools = side ? undefined : conv.tools;
  const r = opt.api === 'chat' ? await stream(messages, tools, maxTokens, dropAfter, sessionKey)
    : await (opt.api === 'messages' ? streamMessages : streamResponses)(BASE, { model: MODEL, messages,
      tools, maxTokens, dropAfter, sessionKey, timeoutMs: Number(opt['timeout-s']) * 1000 });
  inflight--;
  rec.t_done_ms = now();
  rec.ttft_ms = r.ttftMs;
  rec.total_ms = r.totalMs;
  rec.finish = r.finish;
  rec.error = r.error;
  rec.dropped = r.dropped;
  rec.parse_error = r.parseError ?? null;
  const u = r.usage;
  const t = r.timings;
  // Without a usage chunk (a dropped stream, a parse error), llama-server's per-chunk timings.
  const cacheN = t?.cache_n ?? t?.cached_n ?? null;
  rec.prompt_tokens = u?.prompt_tokens ?? (t?.prompt_n !== undefined && cacheN !== null ? t.prompt_n + cacheN : null);
  rec.cached_tokens = u?.prompt_tokens_details?.cached_tokens ?? cacheN;
  rec.completion_tokens = u?.completion_tokens ?? null;
  rec.server_prompt_n = t?.prompt_n ?? null;
  rec.server_cache_n = cacheN;
  rec.server_hit = t?.cache_hit ?? null;
  rec.server_prompt_ms = t?.prompt_ms ?? null;
  // lineage-server's own TTFT (request in -> first token sampled); llama-server reports none.
  rec.server_ttft_ms = t?.ttft_ms ?? null;
  // lineage-server's prefill passes and, of those, the ones cut short at a restore point (splits).
  rec.server_prefill_passes = t?.prefill_passes ?? null;
  rec.server_prefill_splits = t?.prefill_splits ?? null;
  // Prefill tokens actually computed: llama-server reports it (timings.prompt_n); lineage-server's
  // prompt_n is prompt - cached too.
  rec.computed = t?.prompt_n ?? (rec.prompt_tokens !== null && rec.cached_tokens !== null
    ? rec.prompt_tokens - rec.cached_tokens : null);
  if (r.error) { failures++; log(`request ${rec.i} (${kind}, conv ${conv.id}) failed: ${r.error}`); }
  if (r.parseError) { parseErrors++; }
  records.push(rec);
  rec._messages = messages;
  rec._tools = tools;
  rec._historyLen = historyLen;
  rec._reply = r;
  const pct = rec.prompt_tokens ? (100 * (rec.cached_tokens ?? 0) / rec.prompt_tokens).toFixed(0) : '-';
  log(`#${rec.i} conv ${conv.id} ${conv.persona} step ${step.index} ${side ? `side ${side}` : kind}: prompt ${rec.prompt_tokens} cached ${rec.cached_tokens} (${pct}%) ` +
    `ttft ${r.ttftMs?.toFixed(0)} ms total ${r.totalMs.toFixed(0)} ms${r.dropped ? ' (dropped)' : ''}${r.parseError ? ' (parse error after the reply: kept)' : ''}`);
  return r;
}

function stepMessages(step) {
  if (step.turn === 'user') return [{ role: 'user', content: step.user }];
  const { preamble, call, result } = step.tool;
  return [{ role: 'assistant', content: preamble, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: result }];
}

async function runConversation(conv, onFirstDone) {
  let history = [{ role: 'system', content: conv.system }];
  const firstKind = seenPersonas.has(conv.persona) ? 'new_session'
    : (conv.persona === 'forge2' && seenPersonas.has('forge')) || (conv.persona === 'forge' && seenPersonas.has('forge2'))
      ? 'sibling' : 'cold';
  seenPersonas.add(conv.persona);
  for (const step of conv.steps) {
    if (step.index > 0 && step.turn === 'user' && (trace.options.thinkMs ?? 0) > 0) await sleep(trace.options.thinkMs);
    const messages = [...history, ...stepMessages(step)];
    const kind = step.index === 0 ? firstKind : 'warm';
    let r;
    if (step.event === 'drop') {
      await send(conv, step, 'dropped', messages, step.maxTokens, step.dropAfter);
      r = await send(conv, step, 'retry', messages, step.maxTokens);
    } else {
      r = await send(conv, step, kind, messages, step.maxTokens, 0, { historyLen: kind === 'warm' ? history.length : null });
    }
    if (step.index === 0) onFirstDone();
    if (r.error) return;
    history = [...messages, echoOf(r)];
    if (step.event === 'regenerate') {
      const r2 = await send(conv, step, 'regenerate', messages, step.eventMaxTokens);
      if (r2.error) return;
      history = [...messages, echoOf(r2)];
    } else if (step.event === 'edit') {
      let u = messages.length - 1;
      while (u > 0 && messages[u].role !== 'user') u--;
      const edited = [...messages.slice(0, u), { role: 'user', content: step.edit }];
      const r2 = await send(conv, step, 'edit', edited, step.eventMaxTokens);
      if (r2.error) return;
      history = [...edited, echoOf(r2)];
    }
    // Side calls: sequential, after the step's requests and before its next step; a failed one
    // is counted and the conversation goes on.
    for (const call of step.side ?? []) {
      const sideMessages = [{ role: 'system', content: trace.sideSystems[call.kind] }, { role: 'user', content: call.user }];
      await send(conv, step, 'side', sideMessages, call.maxTokens, 0, { side: call.kind });
    }
  }
}

async function runAll() {
  const queue = [...trace.conversations];
  const C = trace.options.concurrency;
  let active = 0;
  let ramping = true;  // the first C conversations start one after another's first reply
  let wake;
  const done = new Promise((r) => { wake = r; });
  const startNext = () => {
    if (queue.length === 0 || active >= C) return;
    const conv = queue.shift();
    active++;
    let firstDone = false;
    const p = runConversation(conv, () => {
      if (!firstDone) { firstDone = true; if (ramping) { if (active >= C) ramping = false; startNext(); } }
    }).finally(() => {
      active--;
      running.delete(conv);
      startNext();
      if (active === 0 && queue.length === 0) wake();
    });
    running.add(conv);
    p.catch((e) => log(`conversation ${conv.id}: ${e.stack || e.message}`));
  };
  startNext();
  await done;
}

// --- Oracle -----------------------------------------------------------------------------------

function lcp(a, b) {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

async function tokenizeAll() {
  const cache = new Map();
  const tokenize = async (content) => {
    if (cache.has(content)) return cache.get(content);
    const t = (await postJson('/tokenize', { content, add_special: true, parse_special: true })).tokens
      .map((x) => (typeof x === 'number' ? x : x.id));
    cache.set(content, t);
    return t;
  };
  for (const rec of records) {
    try {
      await tokenizeOne(rec, tokenize);
    } catch (e) {
      // One prompt the server would not render or tokenize: that request has no oracle figure
      // (counted in the summary's oracle_errors); the others still do.
      oracleErrors++;
      rec._tokens = null;
      rec._continuation = null;
      rec.oracle_error = e.message;
      log(`oracle: request ${rec.i}: ${e.message}`);
    }
  }
}

/** The tokens of `rec`'s prompt before its step's own new messages (null when the template does
 *  not show where, or the server would not render it): the prompt's messages with the text of the
 *  step's first one replaced by a marker (so that the history renders as in the prompt: a template
 *  renders earlier turns by where the last user message is, Qwen3.5 drops the reasoning of
 *  assistant turns before it), rendered, cut before that message's header (the last special token
 *  `<|...|>` before the marker, chat-ML's `<|im_start|>`), tokenized, and at most the prefix it
 *  shares with the prompt. */
async function historyBoundary(rec, tools, tokenize) {
  const first = rec._messages[rec._historyLen];
  if (!first) return null;
  const marker = '\u0001';
  const other = [...rec._messages.slice(0, rec._historyLen), { ...first, content: marker }, ...rec._messages.slice(rec._historyLen + 1)];
  try {
    const { prompt } = await postJson('/apply-template', { model: MODEL, messages: other, tools });
    const at = prompt.indexOf(marker);
    if (at < 0) return null;
    const head = prompt.slice(0, at);
    const header = [...head.matchAll(/<\|[A-Za-z0-9_]+\|>/g)].at(-1);
    if (!header) return null;
    return lcp(rec._tokens, await tokenize(head.slice(0, header.index)));
  } catch (e) {
    log(`history boundary: request ${rec.i}: ${e.message}`);
    return null;
  }
}

/** Renders and tokenizes `rec`'s prompt (and its continuation) with the server under test. */
async function tokenizeOne(rec, tokenize) {
  const tools = rec._tools;
  const { prompt } = await postJson('/apply-template', { model: MODEL, messages: rec._messages, tools });
  rec._tokens = await tokenize(prompt);
  if (opt['dump-prompts']) rec._prompt = prompt;
  rec.prompt_tokens_local = rec._tokens.length;
  // A next turn's history boundary: where its own new messages start.
  if (rec._historyLen !== null && rec._historyLen !== undefined) {
    rec.history_tokens = await historyBoundary(rec, tools, tokenize);
  }
  // A warm user turn's own tokens: where its prompt leaves the same conversation whose last
  // (user) message says something else, to the end (the message and the generation prompt).
  if (rec.kind === 'warm' && rec.turn === 'user' && rec._messages.at(-1)?.role === 'user') {
    const other = [...rec._messages.slice(0, -1), { role: 'user', content: '\u0001' }];
    const p2 = (await postJson('/apply-template', { model: MODEL, messages: other, tools })).prompt;
    rec.own_tokens = rec._tokens.length - lcp(rec._tokens, await tokenize(p2));
    // The prefill time of those tokens at this request's own prefill rate (its timing line).
    if (rec.server_prompt_ms !== null && rec.computed > 0 && rec.ttft_ms !== null) {
      rec.own_prefill_ms = (rec.own_tokens * rec.server_prompt_ms) / rec.computed;
      rec.ttft_over_own_prefill = rec.ttft_ms / rec.own_prefill_ms;
      // The same from the server's timing line: no HTTP, no streaming, no
      // wait for a first token that the chat parser shows (a random-weight model often starts
      // its reasoning with whitespace, which the parser holds back).
      if (rec.server_ttft_ms !== null) rec.server_ttft_over_own_prefill = rec.server_ttft_ms / rec.own_prefill_ms;
    }
  }
  if (!rec.dropped && !rec.error && rec._reply) {
    const gen = generatedText(rec._reply, prompt);
    rec._continuation = gen ? rec._tokens.concat(await tokenize(gen)) : null;
  }
}

/** Tokens of a message header that the oracle's reach may end in (history_restored). */
const HEADER_SLACK = 4;

function computeOracle() {
  // Events in time order: a prompt is seen when it is sent, its continuation when it is done.
  const seen = [];  // {t, tokens, i}
  for (const rec of records) {
    if (!rec._tokens) continue;
    seen.push({ t: rec.t_send_ms, tokens: rec._tokens, i: rec.i, what: 'prompt' });
    if (rec._continuation) seen.push({ t: rec.t_done_ms, tokens: rec._continuation, i: rec.i, what: 'reply' });
  }
  seen.sort((a, b) => a.t - b.t);
  for (const rec of records) {
    if (!rec._tokens) { rec.oracle = null; continue; }
    let best = 0;
    let from = null;
    for (const s of seen) {
      if (s.t >= rec.t_send_ms || s.i === rec.i) { if (s.t >= rec.t_send_ms) break; continue; }
      const n = lcp(rec._tokens, s.tokens);
      if (n > best) { best = n; from = { i: s.i, what: s.what }; }
    }
    rec.oracle_lcp = best;
    rec.oracle = Math.max(1, rec._tokens.length - best);
    rec.oracle_from = from;
    // A next turn restored its history when the cached tokens reached its boundary, or, where no
    // earlier prompt or reply covers the whole boundary (the template renders an earlier reply
    // otherwise now), the oracle's reach less a message header: that reach ends a header into the
    // first message rendered otherwise (chat-ML's `<|im_start|>assistant\n`, 3 tokens), where no
    // cache has a restore point.
    if (Number.isFinite(rec.history_tokens)) {
      rec.history_target = best < rec.history_tokens ? Math.max(0, best - HEADER_SLACK) : rec.history_tokens;
      rec.history_restored = rec.cached_tokens === null || rec.cached_tokens === undefined ? null
        : rec.cached_tokens >= rec.history_target;
    }
  }
}

// --- Main -------------------------------------------------------------------------------------

async function main() {
  log(`trace: ${trace.conversations.length} conversations, ${trace.totalRequests} requests, ` +
    `concurrency ${trace.options.concurrency}, restart after ${trace.restartAfter}`);
  log(`server: ${server.argv.join(' ')}`);
  const readyMs = await server.start(Number(opt['ready-timeout-s']) * 1000);
  BASE = server.base;
  client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'sk-none', maxRetries: 0, timeout: Number(opt['timeout-s']) * 1000 });
  log(`server ready in ${(readyMs / 1000).toFixed(1)} s${replicas > 1 ? `: ${replicas} replicas and Redis behind HAProxy at ${BASE}` : ''}`);
  const models = await getJson('/v1/models');
  MODEL = models?.data?.[0]?.id ?? 'default';
  const tRun = performance.now();
  // The server's RSS over the trace, every 500 ms, to NAME.rss.tsv (ms since the driver started,
  // MiB; a cluster: each replica's): where the peak RSS falls against the request log.
  const rssLog = fs.openSync(path.join(opt.out, `${opt.name}.rss.tsv`), 'w');
  fs.writeSync(rssLog, 'ms\trss_mib\n');
  const procs = replicas > 1 ? server.replicas : [server];
  const sampler = setInterval(() => {
    const mib = procs.map((p) => ((p.procStats().rss_bytes ?? 0) / 1048576).toFixed(1));
    fs.writeSync(rssLog, `${now().toFixed(0)}\t${mib.join('\t')}\n`);
  }, 500);
  try {
    await runAll();
  } finally {
    clearInterval(sampler);
    fs.closeSync(rssLog);
  }
  const runS = (performance.now() - tRun) / 1000;
  const after = { ...server.procStats(), cache: await cacheBytes() };
  const memory = replicas > 1 ? await server.replicaReport() : [{ replica: 1, ...server.memory() }];
  // What each replica's cache did before the restart (its counters start again at 0).
  for (const [i, m] of memory.entries()) {
    const st = (replicas > 1 ? restartInfo?.before?.cache?.replicas?.[i] : restartInfo?.before?.cache)?.stats;
    if (st) {
      m.before_restart = { lookups: st.lookups, misses: st.misses, disk_hits: st.disk_hits, redis_hits: st.redis_hits,
        redis_writes: st.redis?.writes ?? null, redis_errors: st.redis?.errors ?? null };
    }
  }
  log(`trace done in ${runS.toFixed(0)} s; tokenizing ${records.length} prompts for the oracle`);
  if (server.exit) log(`the server had exited during the trace: ${JSON.stringify(server.exit)} (log ${server.logPath})`);
  await tokenizeAll();
  computeOracle();
  await server.stop();

  const file = path.join(opt.out, `${opt.name}.jsonl`);
  fs.writeFileSync(file, records.map((r) => JSON.stringify(Object.fromEntries(
    Object.entries(r).filter(([k]) => !k.startsWith('_'))))).join('\n') + '\n');
  if (opt['dump-prompts']) {
    fs.writeFileSync(path.join(opt.out, `${opt.name}.prompts.jsonl`), records.map((r) => JSON.stringify({ i: r.i,
      prompt: r._prompt, reply: r._reply ? { content: r._reply.content, reasoning: r._reply.reasoning } : null })).join('\n') + '\n');
  }
  const mismatched = records.filter((r) => r.prompt_tokens !== null && !r.oracle_error &&
    r.prompt_tokens !== r.prompt_tokens_local);
  const summary = {
    name: opt.name,
    server_argv: server.argv,
    model: MODEL,
    trace: { ...trace.options, total_requests: trace.totalRequests, restart_after: trace.restartAfter },
    run_seconds: runS,
    load1_mean: records.reduce((a, r) => a + (r.load1 ?? 0), 0) / Math.max(1, records.length),
    server_log_bytes: server.logBytes(),
    replicas,
    // Per process (each replica of a cluster): RSS once ready, now and at its peak (over its
    // starts), against its budget: the RSS once first ready + its cache RAM budget.
    memory,
    requests: records.length,
    side_calls: records.filter((r) => r.side).length,
    failures,
    parse_errors_kept: parseErrors,
    oracle_errors: oracleErrors,
    prompt_token_mismatches: mismatched.length,
    restart: restartInfo,
    after_run: after,
    ...summarize(records),
  };
  fs.writeFileSync(path.join(opt.out, `${opt.name}.summary.json`), JSON.stringify(summary, null, 2) + '\n');
  log(`wrote ${file} and ${opt.name}.summary.json: efficiency ${summary.efficiency.all?.ratio?.toFixed(3)}, ` +
    `${failures} failures, ${mismatched.length} prompt-token mismatches${oracleErrors ? `, ${oracleErrors} prompts without an oracle` : ''}`);
  return failures ? 1 : 0;
}

try {
  process.exitCode = await main();
} catch (e) {
  log(`error: ${e.stack || e.message}`);
  // A server that died under the driver (a crash, or a signal from outside) says how here.
  if (server.exit) log(`the server had exited: ${JSON.stringify(server.exit)} (log ${server.logPath})`);
  await server.stop();
  process.exitCode = 1;
}
