#!/usr/bin/env node
// The real-agent replay (issue 53, item 3; docs/benchmarks/README.md "Real agents, replayed"):
// replays the agent sessions the e2e suite recorded (build/agent-sessions/<agent>-<arch>.json,
// written by tests/e2e/agent-*.test.mjs: every generating request as the client sent it, in order)
// against one server, all agents at once, each agent's requests in their recorded order (closed
// loop: the next one is sent when the one before it has answered; requests that arrived together
// in the recording are sent together), and records per request its prompt, cached and computed
// tokens, TTFT and total time, and the oracle (the prompt less the longest prefix it shares with
// any earlier prompt or prompt + reply of the replay).
//
//   node tools/bench/agents.mjs --kind lineage --out DIR --name lineage [--arch qwen35] [--agents pi,opencode] \
//        -- build/bin/lineage-server -m MODEL --port {port} --test-reply-script {script} \
//           --alias tiny-qwen35 --api-key sk-lineage --cache-dir {cache_dir} ...
//   node tools/bench/agents.mjs --kind llama-server --prep DIR/lineage.prep.json --out DIR --name llama-server \
//        -- llama-server -m MODEL --port {port} ...
//
// What each server generates: the replies the agents received when they were recorded, so that both
// servers hold the same tokens. A reply is read off the session's next request that carries it (its
// rendered prompt continues the request's history with the assistant turn; the first final answer
// of a turn, which the Qwen3.5 template renders back without its thinking, becomes that answer after
// an empty thinking block), else a short "Done.".
//  - lineage-server gets the recorded request itself (its API: chat completions or Anthropic
//    Messages; streamed) and generates the reply through --test-reply-script ({script}: written here
//    once the prompts are prepared; each reply is chosen by the request's last message text and the
//    start of its system text).
//  - llama-server cannot be made to generate given text beside tools (it refuses a `grammar` with
//    tools, and a grammar decodes at a few tokens a second), so it gets the same prompt as tokens
//    (POST /completion, n_predict 1: its TTFT and prefill, against lineage-server's), then the prompt
//    followed by the reply's tokens (n_predict 0), which puts the reply in its cache as a prefill
//    where lineage-server decoded it token by token. Its TTFT and computed tokens compare as they
//    are; its wall time holds one prefill pass per reply instead of one decode step per reply token,
//    which favours llama-server (the report says so).
// lineage-server must run with the recording's model id and API key (--alias tiny-ARCH --api-key
// sk-lineage, this script's --api-key): Anthropic thinking blocks come back signed with them.
// Responses API recordings (Codex) are left out: their reasoning is sealed with the recording
// server's key (encrypted_content), which another server cannot open, so the prompts would differ.
//
// `--report DIR` writes DIR/agents.md from DIR/lineage.summary.json and DIR/llama-server.summary.json:
// per agent and overall, the ratios of wall time and TTFT p50/p95, tokens computed against the oracle,
// and each server's request that computed the most.
// Writes DIR/NAME.jsonl (a record a request), DIR/NAME.summary.json (per agent and overall: wall
// time, TTFT p50/p95, computed tokens against the oracle, the request that computed the most; peak
// RSS), and with --kind lineage DIR/NAME.prep.json (the prepared prompts and replies, the
// llama-server run's input) and DIR/NAME.script.json.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { ServerProc, freePort } from './cluster.mjs';
import { percentile } from './summary.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const dash = process.argv.indexOf('--');
const { values: opt } = parseArgs({
  args: dash < 0 ? process.argv.slice(2) : process.argv.slice(2, dash),
  options: {
    kind: { type: 'string', default: 'lineage' },
    recordings: { type: 'string', default: path.resolve(HERE, '../../build/agent-sessions') },
    arch: { type: 'string', default: 'qwen35' },
    agents: { type: 'string' },
    prep: { type: 'string' },
    out: { type: 'string', default: 'build/bench-agents' },
    name: { type: 'string' },
    'timeout-s': { type: 'string', default: '900' },
    'ready-timeout-s': { type: 'string', default: '300' },
    'api-key': { type: 'string', default: 'sk-lineage' },
    report: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opt.help) {
  process.stdout.write(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(1)
    .filter((l) => l.startsWith('//')).map((l) => l.slice(3)).join('\n') + '\n');
  process.exit(0);
}
const serverArgv = dash < 0 ? [] : process.argv.slice(dash + 1);
if (opt.report) {
  report(opt.report);
  process.exit(0);
}
if (!['lineage', 'llama-server'].includes(opt.kind) || serverArgv.length === 0) {
  process.stderr.write('usage: agents.mjs --kind lineage|llama-server --out DIR [--prep FILE] -- SERVER ARGV... (see --help)\n');
  process.exit(2);
}
if (opt.kind === 'llama-server' && !opt.prep) throw new Error('--kind llama-server needs --prep (a lineage run\'s NAME.prep.json)');
const NAME = opt.name ?? opt.kind;
const TIMEOUT_MS = Number(opt['timeout-s']) * 1000;
const log = (s) => process.stderr.write(`[agents ${NAME}] ${s}\n`);
const now = (() => { const t0 = performance.now(); return () => performance.now() - t0; })();
fs.mkdirSync(opt.out, { recursive: true });

const END = '<|im_end|>';
const HEADER = '<|im_start|>assistant\n';

// --- Recordings -> sessions ------------------------------------------------------------------

function apiOf(p) {
  if (/\/chat\/completions/.test(p)) return 'chat';
  if (/^\/v1\/messages(\?|$)/.test(p)) return 'messages';
  return null;
}

function loadSessions() {
  const wanted = opt.agents ? new Set(opt.agents.split(',')) : null;
  const sessions = [];
  for (const f of fs.readdirSync(opt.recordings).filter((x) => x.endsWith(`-${opt.arch}.json`)).sort()) {
    const rec = JSON.parse(fs.readFileSync(path.join(opt.recordings, f), 'utf8'));
    if (wanted && !wanted.has(rec.agent)) continue;
    const requests = rec.requests.filter((r) => r.method === 'POST' && r.status === 200 && apiOf(r.path) && r.body);
    if (!requests.length) { log(`${f}: no chat or Messages requests (skipped)`); continue; }
    sessions.push({ agent: rec.agent, version: rec.version, requests: requests.map((r, i) => ({ ...r, i, api: apiOf(r.path) })) });
  }
  if (!sessions.length) throw new Error(`no recordings *-${opt.arch}.json in ${opt.recordings}: run the agent e2e tests first`);
  return sessions;
}

/** The text of a message's content (string, text parts or blocks, tool_result contents). */
function textOf(c) {
  if (typeof c === 'string') return c;
  if (!Array.isArray(c)) return '';
  return c.map((b) => (typeof b === 'string' ? b : b.type === 'tool_result' ? textOf(b.content) : (b.text ?? ''))).join('\n');
}

/** What the reply script matches a request on: the longest text of its last message, and the
 *  start of its system text. */
function matchKeys(r) {
  const msgs = r.body.messages ?? [];
  const last = msgs.at(-1);
  let input = '';
  const pieces = typeof last?.content === 'string' ? [last.content] : (last?.content ?? []).flatMap((b) =>
    (typeof b === 'string' ? [b] : b.type === 'tool_result' ? [textOf(b.content)] : [b.text ?? '']));
  for (const p of pieces) if (p.length > input.length) input = p;
  // The first system text block alone (the server joins several with its own separator), not
  // Claude Code's billing header, which the server leaves out of the prompt (anthropic_messages.cpp).
  const sys = r.api === 'messages' ? r.body.system : msgs.find((m) => m.role === 'system')?.content;
  const first = typeof sys === 'string' ? sys : (Array.isArray(sys) ? (sys.find((b) => (b.text ?? '').trim() &&
    !(b.text ?? '').startsWith('x-anthropic-billing-header:'))?.text ?? '') : '');
  return { input: input.slice(0, 2000), system: first.trim().slice(0, 100), tools: (r.body.tools?.length ?? 0) > 0 };
}

// --- Preparation (lineage-server's /apply-template + /tokenize) -------------------------------

const AUTH = { 'x-api-key': opt['api-key'], authorization: `Bearer ${opt['api-key']}` };

async function postJson(base, pathname, body, timeoutMs) {
  const r = await fetch(base + pathname, { method: 'POST', headers: { 'content-type': 'application/json', ...AUTH },
    body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`POST ${pathname} -> ${r.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

async function prepare(base, sessions) {
  const render = async (r) => {
    const pathname = r.api === 'messages' ? '/apply-template?api=messages' : '/apply-template';
    const body = r.api === 'messages' ? r.body : { messages: r.body.messages, tools: r.body.tools,
      chat_template_kwargs: r.body.chat_template_kwargs };
    return (await postJson(base, pathname, body, 60_000)).prompt;
  };
  const tokenize = async (text) => (await postJson(base, '/tokenize', { content: text, add_special: false, parse_special: true },
    60_000)).tokens;
  for (const s of sessions) {
    for (const r of s.requests) r.prompt = await render(r);
    for (const r of s.requests) {
      const cut = r.prompt.lastIndexOf(HEADER);
      const gen = cut >= 0 ? r.prompt.slice(cut + HEADER.length) : '';
      const history = cut >= 0 ? r.prompt.slice(0, cut + HEADER.length) : r.prompt;
      let reply = 'Done.';
      for (const q of s.requests.slice(r.i + 1)) {
        if (!q.prompt.startsWith(history) || q.prompt.length <= history.length) continue;
        const end = q.prompt.indexOf(END, history.length);
        if (end < 0) continue;
        const turn = q.prompt.slice(history.length, end);
        // The turn as generated after the generation prompt (its thinking block as the template
        // opened it; an answer rendered back without its thinking gets an empty one).
        if (turn.startsWith(gen)) reply = turn.slice(gen.length);
        else if (gen.startsWith('<think>') && !turn.startsWith('<think>')) reply = `\n</think>\n\n${turn}`;
        else reply = turn;
        break;
      }
      r.reply = reply + END;
      r.tokens = await tokenize(r.prompt);
      r.replyTokens = await tokenize(r.reply);
      r.keys = matchKeys(r);
    }
    log(`${s.agent}: ${s.requests.length} requests prepared`);
  }
}

function scriptOf(sessions) {
  // Each request's reply, used once, in the order the agent sent them (a repeated request takes
  // the next one); every agent's replies carry its own system text.
  const replies = [];
  for (const s of sessions) {
    for (const r of s.requests) {
      replies.push({ label: `${s.agent}#${r.i}`, when: { input: r.keys.input, system: r.keys.system, tools: r.keys.tools },
        text: r.reply });
    }
  }
  return replies;
}

// --- Sending --------------------------------------------------------------------------------

async function* sseData(res) {
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, k);
      buf = buf.slice(k + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
      if (data && data !== '[DONE]') yield JSON.parse(data);
    }
  }
}

/** lineage-server: the recorded request, streamed; TTFT to its first event (the server opens a
 *  stream at its first token). */
async function sendLineage(base, r) {
  const body = { ...r.body, stream: true };
  if (r.api === 'chat') body.stream_options = { include_usage: true };
  const t0 = now();
  const res = await fetch(base + r.path, { method: 'POST', headers: { 'content-type': 'application/json',
    ...(r.headers ?? {}), ...AUTH }, body: JSON.stringify(body),
  signal: AbortSignal.timeout(TIMEOUT_MS) });
  if (res.status !== 200) return { error: `HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`, t0 };
  let ttft = null;
  let prompt = null;
  let cached = null;
  for await (const ev of sseData(res)) {
    ttft ??= now() - t0;
    if (r.api === 'chat' && ev.usage) {
      prompt = ev.usage.prompt_tokens;
      cached = ev.usage.prompt_tokens_details?.cached_tokens ?? 0;
    }
    // Messages: usage in message_start, final figures in message_delta (the last one seen wins).
    const u = r.api === 'messages' ? (ev.type === 'message_start' ? ev.message?.usage : ev.usage) : null;
    if (u && u.input_tokens !== undefined) {
      cached = u.cache_read_input_tokens ?? 0;
      prompt = u.input_tokens + cached + (u.cache_creation_input_tokens ?? 0);
    }
  }
  return { t0, ttft, total: now() - t0, prompt, cached, computed: prompt !== null ? prompt - cached : null };
}

/** llama-server: the prompt's tokens (n_predict 1), then the prompt and the reply (n_predict 0). */
async function sendLlama(base, r) {
  const t0 = now();
  const a = await fetch(`${base}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: r.tokens, n_predict: 1, cache_prompt: true, temperature: 0 }),
    signal: AbortSignal.timeout(TIMEOUT_MS) });
  const ttft = now() - t0;
  if (a.status !== 200) return { error: `HTTP ${a.status}: ${(await a.text()).slice(0, 300)}`, t0 };
  const ja = await a.json();
  const b = await fetch(`${base}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: [...r.tokens, ...r.replyTokens], n_predict: 0, cache_prompt: true, temperature: 0 }),
    signal: AbortSignal.timeout(TIMEOUT_MS) });
  const jb = b.status === 200 ? await b.json() : null;
  const computed = ja.timings?.prompt_n ?? null;
  return { t0, ttft, total: now() - t0, prompt: r.tokens.length, cached: computed !== null ? r.tokens.length - computed : null,
    computed, reply_prefill: jb?.timings?.prompt_n ?? null };
}

async function replay(base, sessions) {
  const records = [];
  const send = opt.kind === 'lineage' ? sendLineage : sendLlama;
  const one = async (s, r) => {
    // A request the server answers with no headers for 300 s (undici's headersTimeout in Node's
    // fetch: lineage-server opens a stream at its first token) is recorded as an error, not fatal.
    const t = now();
    const x = await send(base, r).catch((e) => ({ error: `fetch failed: ${e.cause?.code ?? e.message}`, t0: t }));
    const rec = { agent: s.agent, i: r.i, run: r.run, api: r.api, t_send_ms: x.t0, t_done_ms: x.t0 + (x.total ?? 0),
      prompt_tokens: x.prompt, cached_tokens: x.cached, computed: x.computed, ttft_ms: x.ttft, total_ms: x.total,
      reply_tokens: r.replyTokens.length, reply_prefill: x.reply_prefill ?? null, error: x.error ?? null };
    if (x.error) log(`${s.agent} #${r.i}: ${x.error}`);
    records.push(rec);
    return rec;
  };
  await Promise.all(sessions.map(async (s) => {
    const t0 = now();
    // Requests that arrived within 50 ms of each other in the recording go together.
    for (let k = 0; k < s.requests.length;) {
      const group = [s.requests[k]];
      while (k + group.length < s.requests.length && s.requests[k + group.length].t_ms - group[0].t_ms < 50) {
        group.push(s.requests[k + group.length]);
      }
      await Promise.all(group.map((r) => one(s, r)));
      k += group.length;
    }
    s.wall_ms = now() - t0;
    log(`${s.agent}: ${s.requests.length} requests in ${(s.wall_ms / 1000).toFixed(1)} s`);
  }));
  return records;
}

// --- Oracle and summary ---------------------------------------------------------------------

function lcp(a, b) {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

function oracle(records, byKey) {
  const seen = [];
  for (const rec of records) {
    const r = byKey.get(`${rec.agent}#${rec.i}`);
    seen.push({ t: rec.t_send_ms, tokens: r.tokens, key: `${rec.agent}#${rec.i}` });
    seen.push({ t: rec.t_done_ms, tokens: [...r.tokens, ...r.replyTokens], key: `${rec.agent}#${rec.i}` });
  }
  for (const rec of records) {
    const tokens = byKey.get(`${rec.agent}#${rec.i}`).tokens;
    let best = 0;
    for (const s of seen) if (s.t < rec.t_send_ms && s.key !== `${rec.agent}#${rec.i}`) best = Math.max(best, lcp(tokens, s.tokens));
    rec.oracle = Math.max(1, tokens.length - best);
  }
}

function summarize(records, sessions) {
  const part = (rs, wallMs) => {
    const ok = rs.filter((r) => !r.error);
    const most = ok.reduce((m, r) => (m === null || (r.computed ?? 0) > (m.computed ?? 0) ? r : m), null);
    return { requests: rs.length, errors: rs.length - ok.length, wall_s: wallMs / 1000,
      ttft_p50_ms: percentile(ok.map((r) => r.ttft_ms), 50), ttft_p95_ms: percentile(ok.map((r) => r.ttft_ms), 95),
      computed: ok.reduce((a, r) => a + (r.computed ?? 0), 0), oracle: ok.reduce((a, r) => a + r.oracle, 0),
      most: most && { i: most.i, computed: most.computed, prompt: most.prompt_tokens, cached: most.cached_tokens, ttft_ms: most.ttft_ms } };
  };
  const out = { kind: opt.kind, name: NAME, arch: opt.arch, agents: {} };
  for (const s of sessions) out.agents[s.agent] = part(records.filter((r) => r.agent === s.agent), s.wall_ms);
  out.overall = part(records, Math.max(...records.map((r) => r.t_done_ms)) - Math.min(...records.map((r) => r.t_send_ms)));
  return out;
}

// --- Report (--report DIR: DIR/lineage.summary.json against DIR/llama-server.summary.json) ----

function report(dir) {
  const read = (n) => JSON.parse(fs.readFileSync(path.join(dir, `${n}.summary.json`), 'utf8'));
  const a = read('lineage');
  const b = read('llama-server');
  const ratio = (x, y) => (x !== null && y ? (x / y).toFixed(2) : '-');
  const rows = [];
  for (const agent of [...Object.keys(a.agents), 'overall']) {
    const x = agent === 'overall' ? a.overall : a.agents[agent];
    const y = agent === 'overall' ? b.overall : b.agents[agent];
    if (!y) continue;
    rows.push(`| ${agent} | ${x.requests} | ${ratio(x.wall_s, y.wall_s)} | ${ratio(x.ttft_p50_ms, y.ttft_p50_ms)} | ` +
      `${ratio(x.ttft_p95_ms, y.ttft_p95_ms)} | ${x.wall_s.toFixed(1)} / ${y.wall_s.toFixed(1)} | ` +
      `${x.ttft_p50_ms?.toFixed(0)} / ${y.ttft_p50_ms?.toFixed(0)} | ${x.ttft_p95_ms?.toFixed(0)} / ${y.ttft_p95_ms?.toFixed(0)} | ` +
      `${x.computed} / ${y.computed} / ${x.oracle} | ${x.most?.computed ?? '-'} (#${x.most?.i}) / ${y.most?.computed ?? '-'} (#${y.most?.i}) | ` +
      `${x.errors} / ${y.errors} |`);
  }
  const text = [`# Real agents, replayed (${a.arch}): lineage-server against llama-server`, '',
    'Ratios are lineage / llama-server (below 1: lineage is faster). llama-server puts each reply in its cache as a',
    'prefill (one pass) where lineage-server decodes it token by token, so its wall time is favoured (tools/bench/agents.mjs).', '',
    '| agent | requests | wall | TTFT p50 | TTFT p95 | wall s | TTFT p50 ms | TTFT p95 ms | computed (lineage / llama / oracle) | most computed in one request | errors |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|', ...rows, ''].join('\n');
  fs.writeFileSync(path.join(dir, 'agents.md'), text);
  process.stdout.write(text);
}

// --- Main -----------------------------------------------------------------------------------

async function main() {
  let sessions = loadSessions();
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const scriptPath = path.resolve(opt.out, `${NAME}.script.json`);
  fs.writeFileSync(scriptPath, '[]');
  // A fresh disk tier for each run ({cache_dir}): an earlier run's files would serve this one.
  const cacheDir = path.resolve(opt.out, `${NAME}.cache-dir`);
  fs.rmSync(cacheDir, { recursive: true, force: true });
  fs.mkdirSync(cacheDir, { recursive: true });
  const srv = new ServerProc(serverArgv.map((a) => a.replaceAll('{port}', String(port)).replaceAll('{script}', scriptPath)
    .replaceAll('{cache_dir}', cacheDir)),
    path.join(opt.out, `${NAME}.server.log`), { base, log });
  await srv.start(Number(opt['ready-timeout-s']) * 1000);
  try {
    if (opt.kind === 'lineage') {
      await prepare(base, sessions);
      fs.writeFileSync(path.join(opt.out, `${NAME}.prep.json`), JSON.stringify(sessions.map((s) => ({ agent: s.agent,
        version: s.version, requests: s.requests.map(({ i, t_ms, run, api, path: p, headers, body, tokens, reply, replyTokens, keys }) =>
          ({ i, t_ms, run, api, path: p, headers, body, tokens, reply, replyTokens, keys })) }))));
      const tmp = `${scriptPath}.tmp`;
      fs.writeFileSync(tmp, JSON.stringify({ replies: scriptOf(sessions) }));
      fs.renameSync(tmp, scriptPath);
    } else {
      const wanted = opt.agents ? new Set(opt.agents.split(',')) : null;
      sessions = JSON.parse(fs.readFileSync(opt.prep, 'utf8')).filter((s) => !wanted || wanted.has(s.agent));
    }
    const byKey = new Map(sessions.flatMap((s) => s.requests.map((r) => [`${s.agent}#${r.i}`, r])));
    const records = await replay(base, sessions);
    oracle(records, byKey);
    fs.writeFileSync(path.join(opt.out, `${NAME}.jsonl`), records.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const summary = { ...summarize(records, sessions), memory: srv.memory() };
    fs.writeFileSync(path.join(opt.out, `${NAME}.summary.json`), JSON.stringify(summary, null, 1));
    for (const [agent, a] of Object.entries({ ...summary.agents, overall: summary.overall })) {
      log(`${agent}: wall ${a.wall_s.toFixed(1)} s, TTFT p50 ${a.ttft_p50_ms?.toFixed(0)} ms p95 ${a.ttft_p95_ms?.toFixed(0)} ms, ` +
        `computed ${a.computed} / oracle ${a.oracle}, errors ${a.errors}`);
    }
  } finally {
    await srv.stop();
  }
}

await main();
