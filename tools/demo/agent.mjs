#!/usr/bin/env node
// Demo driver: replays a realistic coding-agent conversation against a running
// lineage-server (or any OpenAI-compatible server) and shows what the prompt cache does.
//
//   node tools/demo/agent.mjs --url http://127.0.0.1:8080 [--max-tokens 32] [--json out.json]
//   node tools/demo/agent.mjs --dry-run        # print the plan and token estimates only
//   LINEAGE_URL=http://127.0.0.1:8080 node tools/demo/agent.mjs
//
// The persona (tools/demo/persona.mjs) is a ~3,100-token system block (as the server counts
// it): coding-assistant rules plus nine tool schemas. Sessions, run one after another (closed loop):
//   1. "main":    8 turns: user messages of 5-200 tokens and agent-loop steps (a scripted
//                 tool call with its result, 80-200 tokens), then a regenerate (same prompt
//                 again) and an edit of the last user message;
//   2. "new":     a new conversation on the same persona (the anchor at the end of the
//                 system prompt + tools can serve its first turn);
//   3. "sibling": a persona whose system text differs by a few tokens near its end;
//   4. "sibling2": a third variant of the persona, differing where the sibling does: it
//                 can restore the divergence point the sibling's first request captured.
//   6. "image":   with --image (scripts/demo does it when LINEAGE_DEMO_MMPROJ names a
//                 projector for the model): a turn with a small PNG and a follow-up turn, which
//                 restores past the image.
//   5. "restart": with --save-conversation FILE the main conversation is written to FILE;
//                 scripts/demo then restarts the server (SIGTERM: the cache is written to its
//                 disk tier) and runs the driver again with --after-restart FILE: the main
//                 conversation plus a new user message, which the disk tier serves.
// The random-weight model does not produce real tool calls, so the driver scripts them as a
// replaying client would: a request carries an assistant message with tool_calls and the
// tool results. Every reply the server generated is echoed back exactly as returned
// (content, reasoning_content, tool_calls). Each request streams with
// stream_options.include_usage; TTFT is measured client-side to the first delta with
// content, reasoning or a tool call. Exit status: 0, or 1 if any request failed.
//
// Uses the `openai` package installed in tests/e2e/node_modules (scripts/bootstrap does it).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import { TOOLS, diffResult, fileResult, searchResult, systemText, testResult } from './persona.mjs';

process.stdout.on('error', (e) => { if (e.code === 'EPIPE') process.exit(process.exitCode ?? 0); throw e; });

const HERE = path.dirname(fileURLToPath(import.meta.url));
const OPENAI_ENTRY = path.resolve(HERE, '../../tests/e2e/node_modules/openai/index.mjs');
const PNG_ENTRY = path.resolve(HERE, '../../tests/e2e/lib/png.mjs');

const { values: opt } = parseArgs({
  options: {
    url: { type: 'string', default: process.env.LINEAGE_URL || 'http://127.0.0.1:8080' },
    model: { type: 'string' },
    'max-tokens': { type: 'string', default: '32' },
    'timeout-s': { type: 'string', default: '600' },
    json: { type: 'string' },
    'save-conversation': { type: 'string' },
    'after-restart': { type: 'string' },
    // Sends prompt_cache_key "<prefix>-<session>" with every request (a load balancer such as
    // deploy/haproxy.cfg routes a session to one replica by it). Default: no key.
    'session-key': { type: 'string' },
    'dry-run': { type: 'boolean', default: false },
    image: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opt.help) {
  process.stdout.write(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n')
    .filter((l) => l.startsWith('//')).slice(0, 26).map((l) => l.slice(3)).join('\n') + '\n');
  process.exit(0);
}
const MAX_TOKENS = Number(opt['max-tokens']);

// --- Token estimates (no tokenizer here: a rough count, compared with the server's) -------

/** About one token per word, digit and punctuation mark (BPE on English and code). */
export function estimateTokens(text) {
  return (String(text).match(/[A-Za-z]+|\d|[^\sA-Za-z\d]+|\n/g) || []).length;
}
const TEMPLATE_TOOL_OVERHEAD = 260; // the Qwen3.5 template's instructions around the tools block
const JSON_FACTOR = 1.15;           // JSON schemas take ~15% more tokens than the count above

// --- The conversation script ----------------------------------------------------------

let callSeq = 0;
const call = (name, args) => ({ id: `call_${String(++callSeq).padStart(4, '0')}`, type: 'function',
  function: { name, arguments: JSON.stringify(args) } });

/** A turn: a user message, optionally followed by a scripted assistant tool-call message
 *  and the tool results (as a replaying client sends them). */
const userTurn = (content) => ({ kind: 'user', content });
function toolTurn(content, preamble, calls) {
  return { kind: 'tool', content, preamble, calls: calls.map(([name, args, result]) => ({ call: call(name, args), result })) };
}

const USER_LONG = `I'm seeing flaky failures in the cache tests since yesterday's merge. The lineage suite passes locally about four times out of five, and on CI the failure is always the same assertion in the trie test: the restore point found for a prompt that diverges in the middle of a long shared prefix is shorter than the test expects, by exactly one edge. It looks like the lookup stops at the last complete edge instead of at the divergence point inside the edge, but only for dense models; the hybrid path seems fine because it snaps to a checkpoint anyway. I'd like you to find the cause, fix it with the smallest change, and prove the fix with the existing tests plus one new test that reproduces the divergence inside an edge. Please don't touch the engine layer; the bug should be in src/cache. Also keep the public interface of the trie unchanged, other people are working against it right now.`;

function sessionMain() {
  // An agent loop: user messages, each followed by the assistant working through tools. A loop
  // step (no user message) appends the scripted tool call and its result after the echoed
  // reply, so the whole previous prompt is its prefix. A user message after a loop makes the
  // Qwen3.5 template re-render the loop's assistant turns without their <think> blocks, so the
  // loop since the previous user message is prefilled again (the oracle counts it too): tool
  // results are kept to 80-200 tokens so that every turn stays above 90% cached.
  return [
    userTurn(USER_LONG),
    userTurn('Start with how the lookup handles a divergence inside an edge.'),
    toolTurn(null, "I'll read the lookup in src/cache/trie.cpp.",
      [['read_file', { path: 'src/cache/trie.cpp', start_line: 30, end_line: 41 }, fileResult('src/cache/trie.cpp', 12, 7)]]),
    userTurn('That matches what I suspected. For dense entries every length up to the entry is a valid restore point. Make sure the fix does not change the hybrid path.'),
    toolTurn(null, null,
      [['run_tests', { suite: 'unit', filter: 'trie|lineage', repeat: 3 }, testResult(4, 1, 11)]]),
    userTurn('Apply the fix and show me the diff.'),
    toolTurn(null, 'Applying the minimal fix in trie::longest, then the diff.',
      [['git_diff', { paths: ['src/cache/trie.cpp'] }, diffResult()]]),
    userTurn('Thanks. Summarize the change.'),
  ];
}

function sessionNew() {
  return [
    userTurn('The disk tier keeps files of absorbed entries around. Where is the deletion supposed to happen?'),
    toolTurn('List the cache sources first.', null,
      [['list_dir', { path: 'src/cache', depth: 1 }, ['config.h', 'keys.cpp', 'keys.h', 'lineage.cpp', 'lineage.h', 'policy.cpp', 'policy.h', 'stats.h', 'tiers.cpp', 'tiers.h', 'trie.cpp', 'trie.h']
        .map((f, i) => `file  ${String(1200 + i * 733).padStart(6)}  src/cache/${f}`).join('\n')]]),
    userTurn('OK, and which test covers it?'),
  ];
}

function sessionSibling() {
  return [
    userTurn('Explain the anchor checkpoint in two sentences.'),
    userTurn('And when is it not pinned?'),
  ];
}

// --- Running a session -----------------------------------------------------------------

/** The assistant message to send back: exactly what the server returned. */
function echoOf(reply) {
  const m = { role: 'assistant', content: reply.content };
  if (reply.toolCalls.length) m.tool_calls = reply.toolCalls;
  else if (m.content === null) m.content = '';
  if (reply.reasoning !== null) m.reasoning_content = reply.reasoning;
  return m;
}

function messagesForTurn(turn) {
  // A tool turn without content is a loop step: no new user message.
  const msgs = turn.content === null ? [] : [{ role: 'user', content: turn.content }];
  if (turn.kind === 'tool') {
    msgs.push({ role: 'assistant', content: turn.preamble, tool_calls: turn.calls.map((c) => c.call) });
    for (const c of turn.calls) msgs.push({ role: 'tool', tool_call_id: c.call.id, content: c.result });
  }
  return msgs;
}

async function streamOnce(client, model, messages, session) {
  const t0 = performance.now();
  const stream = await client.chat.completions.create({
    model, messages, tools: TOOLS, max_tokens: MAX_TOKENS, temperature: 0,
    stream: true, stream_options: { include_usage: true },
    ...(opt['session-key'] ? { prompt_cache_key: `${opt['session-key']}-${session}` } : {}),
  });
  const r = { content: null, reasoning: null, toolCalls: [], usage: null, timings: null, finish: null, ttftMs: null, totalMs: 0 };
  for await (const chunk of stream) {
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
      if (r.ttftMs === null && (d.content || reasoning || d.tool_calls?.length)) r.ttftMs = performance.now() - t0;
      if (ch.finish_reason) r.finish = ch.finish_reason;
    }
  }
  r.totalMs = performance.now() - t0;
  if (!r.usage) throw new Error('the stream carried no usage chunk (stream_options.include_usage)');
  return r;
}

const rows = [];
let failures = 0;

function record(row) {
  rows.push(row);
  printRow(row);
}

/** Runs one session; returns without throwing (a failed request ends the session). */
async function runSession(client, model, { name, system, turns, extra = [], resume = null }) {
  const history = resume ?? [{ role: 'system', content: system }];
  let last = null; // {messages} of the latest plain turn, for regenerate/edit
  const send = async (event, messages) => {
    try {
      const r = await streamOnce(client, model, messages, name);
      const u = r.usage;
      const cached = u.prompt_tokens_details?.cached_tokens ?? null;
      const decodeMs = r.totalMs - (r.ttftMs ?? r.totalMs);
      record({
        turn: rows.length + 1, session: name, event, prompt: u.prompt_tokens, cached,
        cachedPct: cached === null ? null : (100 * cached) / u.prompt_tokens,
        ttftMs: r.ttftMs, totalMs: r.totalMs, completion: u.completion_tokens,
        decodeTps: decodeMs > 0 ? u.completion_tokens / (decodeMs / 1000) : null,
        hit: r.timings?.cache_hit ?? null, serverTtftMs: r.timings?.ttft_ms ?? null, finish: r.finish,
      });
      return r;
    } catch (e) {
      failures++;
      const status = e.status ? ` HTTP ${e.status}` : '';
      process.stdout.write(`  !! ${name} ${event}: request failed${status}: ${e.message}\n`);
      return null;
    }
  };
  for (const [i, turn] of turns.entries()) {
    history.push(...messagesForTurn(turn));
    const messages = structuredClone(history);
    const r = await send(i === 0 ? 'first' : turn.kind === 'tool' ? 'tool' : 'turn', messages);
    if (!r) return;
    last = { messages };
    history.push(echoOf(r));
  }
  if (name === 'main' && opt['save-conversation']) {
    fs.writeFileSync(opt['save-conversation'], JSON.stringify({ messages: history }));
  }
  for (const ev of extra) {
    if (ev === 'regenerate') {
      if (!(await send('regenerate', last.messages))) return;
    } else if (ev === 'edit') {
      const edited = structuredClone(last.messages);
      edited.at(-1).content += ' Keep it to three bullet points.';
      if (!(await send('edit', edited))) return;
    }
  }
}

// --- Output -------------------------------------------------------------------------------

const COLS = [
  ['#', 3, (r) => r.turn],
  ['session', 9, (r) => r.session],
  ['event', 10, (r) => r.event],
  ['prompt', 7, (r) => r.prompt],
  ['cached', 7, (r) => r.cached ?? '-'],
  ['cached%', 8, (r) => (r.cachedPct === null ? '-' : r.cachedPct.toFixed(1))],
  ['TTFT ms', 9, (r) => (r.ttftMs === null ? '-' : r.ttftMs.toFixed(0))],
  ['decode t/s', 11, (r) => (r.decodeTps === null ? '-' : r.decodeTps.toFixed(1))],
  ['gen', 4, (r) => r.completion],
  ['srv ttft', 9, (r) => (r.serverTtftMs === null ? '-' : Number(r.serverTtftMs).toFixed(0))],
  ['cache_hit', 10, (r) => (r.hit === null ? '-' : String(r.hit))],
];
const fmtRow = (cells) => cells.map((c, i) => String(c).padStart(COLS[i][1])).join(' ');
function printHeader() {
  process.stdout.write(`${fmtRow(COLS.map((c) => c[0]))}\n${'-'.repeat(COLS.reduce((n, c) => n + c[1] + 1, -1))}\n`);
}
function printRow(r) { process.stdout.write(`${fmtRow(COLS.map((c) => c[2](r)))}\n`); }

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? null : s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function summary() {
  const main = rows.filter((r) => r.session === 'main');
  const later = main.filter((r) => r.event === 'turn' || r.event === 'tool');
  const warm = later.filter((r) => r.cachedPct !== null && r.cachedPct >= 90);
  const first = main.find((r) => r.event === 'first');
  const med = median(later.map((r) => r.ttftMs).filter((x) => x !== null));
  const out = ['', 'Summary'];
  if (main.length > 0) out.push(`  session 1, turns after the first with >= 90% cached: ${warm.length} of ${later.length}`);
  if (first && med !== null) {
    out.push(`  session 1 TTFT: turn 1 ${first.ttftMs?.toFixed(0)} ms (cold, ${first.prompt} tokens); ` +
      `median of later turns ${med.toFixed(0)} ms (${(first.ttftMs / med).toFixed(1)}x faster)`);
  }
  for (const ev of ['regenerate', 'edit']) {
    const r = main.find((x) => x.event === ev);
    if (r) out.push(`  ${ev.padEnd(10)}: ${r.cached}/${r.prompt} cached (${r.cachedPct?.toFixed(1)}%), TTFT ${r.ttftMs?.toFixed(0)} ms`);
  }
  for (const s of ['new', 'sibling', 'sibling2', 'image', 'restart']) {
    const r = rows.find((x) => x.session === s);
    if (r) {
      out.push(`  ${s.padEnd(10)}: turn 1 ${r.cached}/${r.prompt} cached (${r.cachedPct?.toFixed(1)}%), TTFT ${r.ttftMs?.toFixed(0)} ms` +
        (s === 'restart' ? ' (the first request after the restart, served by the disk tier)' : ''));
    }
  }
  if (failures) out.push(`  FAILED requests: ${failures}`);
  process.stdout.write(out.join('\n') + '\n');
}

// --- Main -----------------------------------------------------------------------------------

function plan() {
  if (opt['after-restart']) {
    const { messages } = JSON.parse(fs.readFileSync(opt['after-restart'], 'utf8'));
    return [{ name: 'restart', system: messages[0].content, resume: messages,
      turns: [userTurn('After the restart: summarise what we changed so far in two sentences.')] }];
  }
  const sysA = systemText({ variant: 0 });
  const sysB = systemText({ variant: 1 });
  return [
    { name: 'main', system: sysA, turns: sessionMain(), extra: ['regenerate', 'edit'] },
    { name: 'new', system: sysA, turns: sessionNew() },
    { name: 'sibling', system: sysB, turns: sessionSibling() },
    { name: 'sibling2', system: systemText({ variant: 2 }), turns: [userTurn('What does thinning drop first?')] },
    ...(opt.image ? [{ name: 'image', system: sysA, turns: 'image' }] : []),
  ];
}

function printPlan(sessions) {
  const sys = sessions[0].system;
  const toolsJson = TOOLS.map((t) => JSON.stringify(t)).join('\n');
  const toolsEst = Math.round(estimateTokens(toolsJson) * JSON_FACTOR);
  const est = estimateTokens(sys) + toolsEst + TEMPLATE_TOOL_OVERHEAD;
  process.stdout.write(`persona: system text ~${estimateTokens(sys)} tokens (${sys.length} chars), ` +
    `${TOOLS.length} tools ~${toolsEst} tokens (${toolsJson.length} chars), ` +
    `template ~${TEMPLATE_TOOL_OVERHEAD}: ~${est} tokens in all (estimates)\n`);
  for (const s of sessions) {
    if (!Array.isArray(s.turns)) {
      process.stdout.write(`session ${s.name}: a turn with a 64x64 PNG, then a follow-up turn\n`);
      continue;
    }
    const parts = s.turns.map((t) => {
      const n = estimateTokens(t.content) + (t.kind === 'tool'
        ? t.calls.reduce((a, c) => a + estimateTokens(c.result) + estimateTokens(c.call.function.arguments) + 10, 0) : 0);
      return `${t.kind}:~${n}`;
    });
    process.stdout.write(`session ${s.name}: ${s.turns.length} turns [${parts.join(', ')}]` +
      `${s.extra?.length ? ` + ${s.extra.join(', ')}` : ''}\n`);
  }
  return est;
}

async function main() {
  const sessions = plan();
  const est = printPlan(sessions);
  if (opt['dry-run']) return 0;

  let OpenAI;
  try {
    ({ default: OpenAI } = await import(pathToFileURL(OPENAI_ENTRY).href));
  } catch {
    process.stderr.write(`cannot load the openai package from ${OPENAI_ENTRY}: run scripts/bootstrap ` +
      '(or: cd tests/e2e && npm install)\n');
    return 2;
  }
  const base = opt.url.replace(/\/+$/, '');
  try {
    const h = await fetch(`${base}/health`, { signal: AbortSignal.timeout(5000) });
    if (h.status !== 200) throw new Error(`GET /health -> ${h.status}`);
  } catch (e) {
    process.stderr.write(`server at ${base} is not healthy: ${e.message}\n`);
    return 2;
  }
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: process.env.OPENAI_API_KEY || 'sk-none', maxRetries: 0,
    timeout: Number(opt['timeout-s']) * 1000 });
  let model = opt.model;
  if (!model) {
    const list = await client.models.list();
    model = list.data[0]?.id ?? 'default';
  }
  process.stdout.write(`server ${base}, model ${model}, max_tokens ${MAX_TOKENS}, temperature 0, streaming\n\n`);
  printHeader();
  for (const s of sessions) {
    if (s.turns === 'image') {
      // A screenshot-sized stand-in: a 64x64 PNG, sent inline (the server fetches nothing).
      const { png } = await import(pathToFileURL(PNG_ENTRY).href);
      const url = `data:image/png;base64,${png(64, 64, 7).toString('base64')}`;
      s.turns = [userTurn([{ type: 'text', text: 'This is a screenshot of the failing test run. What failed?' },
        { type: 'image_url', image_url: { url } }]), userTurn('And which file should I open first?')];
    }
    await runSession(client, model, s);
  }
  const firstRow = rows[0];
  if (firstRow && !opt['after-restart']) process.stdout.write(`\n(session 1 turn 1: ${firstRow.prompt} prompt tokens as counted by the server; estimate ~${est + estimateTokens(USER_LONG) + 10})\n`);
  summary();

  try {
    const st = await fetch(`${base}/v1/cache/stats`, { signal: AbortSignal.timeout(5000) });
    if (st.status === 200) process.stdout.write(`\ncache stats: ${JSON.stringify(await st.json())}\n`);
  } catch { /* optional endpoint */ }
  if (opt.json) {
    fs.writeFileSync(opt.json, JSON.stringify({ url: base, model, maxTokens: MAX_TOKENS, rows, failures }, null, 2));
    process.stdout.write(`per-turn results written to ${opt.json}\n`);
  }
  return failures ? 1 : 0;
}

process.exitCode = await main();
