// Claude Code (`claude -p`, the real client, pinned; tests/e2e/agents/claude-code.mjs installs
// it once under the project's cache folder) against lineage-server on the tiny qwen35 model,
// non-interactively, with a private HOME and every connection but 127.0.0.1 blocked. Two
// sessions and a resumed turn (--continue); asserted:
//  - each run exits 0, or with the client's own handling of a reply cut at max_tokens (random
//    weights: the reply is whatever fits in CLAUDE_CODE_MAX_OUTPUT_TOKENS);
//  - no 4xx/5xx for /v1/messages in the server log;
//  - the second session (the same task in a new session) restores >= 95% of its first
//    request's prompt across sessions;
//  - the resumed turn's first request restores at least the prefix it shares with the
//    session's last request, computed from the two bodies with /apply-template?api=messages +
//    /tokenize, less the re-rendered generation prompt (RERENDER_SHARED, lib/scenario.mjs).
// A recording proxy between the client and the server keeps the request bodies for the last
// check. Skipped, with the reason, only when npm cannot install the package.
//
//   cd tests/e2e && node --test agent-claude.test.mjs
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { claudeEnv, ensureClaudeCode } from './agents/claude-code.mjs';
import { commonPrefix, requestLines } from './lib/anthropic.mjs';
import { RERENDER_SHARED } from './lib/scenario.mjs';
import { modelPath, startServer } from './lib/server.mjs';

// Claude Code's system prompt and tools are ~15k tokens; the tiny model's context must hold
// them plus the conversation.
const CTX = 32768;
const RUN_TIMEOUT_MS = 240_000;

/** A proxy on 127.0.0.1 that forwards everything to `target` and records POST /v1/messages
 *  bodies (in order). */
function recordingProxy(target) {
  const bodies = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (req.method === 'POST' && req.url.startsWith('/v1/messages') && !req.url.includes('count_tokens')) {
        bodies.push(JSON.parse(body.toString('utf8')));
      }
      const up = http.request(`${target}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode, r.headers);
        r.pipe(res);
      });
      up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
      up.end(body);
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({ url: `http://127.0.0.1:${server.address().port}`, bodies, server }));
  });
}

/** Runs `claude -p ...args` in `cwd`; resolves to {code, stdout, stderr}. */
function runClaude(bin, args, { cwd, env }) {
  return new Promise((resolve) => {
    const p = spawn(bin, ['-p', ...args], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (c) => { stdout += c; });
    p.stderr.on('data', (c) => { stderr += c; });
    const timer = setTimeout(() => p.kill('SIGKILL'), RUN_TIMEOUT_MS);
    p.on('exit', (code, signal) => { clearTimeout(timer); resolve({ code, signal, stdout, stderr }); });
  });
}

const install = ensureClaudeCode();
if (install.skip) process.stderr.write(`[agent-claude] SKIPPED: ${install.skip}\n`);

describe('Claude Code against lineage-server [qwen35]', { timeout: 900_000, skip: install.skip }, () => {
  let srv;
  let proxy;
  let home;
  let project;
  before(async () => {
    srv = await startServer({ model: modelPath('qwen35'), name: 'agent-claude',
      args: ['--parallel', '2', '--ctx-size', String(CTX), '--api-key', 'sk-lineage'] });
    proxy = await recordingProxy(srv.url);
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-claude-home-'));
    project = path.join(home, 'project');
    fs.mkdirSync(project);
    fs.writeFileSync(path.join(project, 'README.md'), '# demo\n\nA tiny project for the agent test.\n');
  });
  after(async () => {
    proxy?.server.close();
    await srv?.stopGracefully();
    if (home) fs.rmSync(home, { recursive: true, force: true });
  });

  // Runs one `claude -p` turn; returns the server's /v1/messages request lines it caused.
  async function turn(args, where) {
    const before = requestLines(srv.log()).length;
    const r = await runClaude(install.bin, args, { cwd: project, env: claudeEnv({ baseUrl: proxy.url, home }) });
    const out = `${where}: exit ${r.code ?? r.signal}\n--- stdout ---\n${r.stdout.slice(-1500)}\n--- stderr ---\n${r.stderr.slice(-1500)}`;
    // Random weights: a reply that runs into max_tokens is the client's "length" case.
    const lengthHandled = /max.?tokens|output token maximum/i.test(r.stdout + r.stderr);
    assert.ok(r.code === 0 || (r.code === 1 && lengthHandled), out);
    const lines = requestLines(srv.log()).slice(before).filter((l) => l.dialect === 'messages');
    assert.ok(lines.length >= 1, `${where}: no /v1/messages request reached the server\n${out}`);
    for (const l of lines) assert.ok(l.status < 400, `${where}: req ${l.id} answered ${l.status}\n${srv.logTail(30)}`);
    return { lines, r };
  }

  it('two sessions and a resumed turn: exit 0, no errors, the second session and the resumed turn restore', async () => {
    // The same task twice: Claude Code puts the task before its environment block (a role
    // "system" message after the first user message), so sessions on different tasks share only
    // the system prompt, the tools and the first reminder (~82% here); the same task shares all.
    const task = 'Say hello to the project.';
    const s1 = await turn([task], 'session 1');
    const s2 = await turn([task], 'session 2');
    const first = s2.lines[0];
    assert.ok(first.cached >= 0.95 * first.prompt,
      `session 2's first request restored ${first.cached} of ${first.prompt} tokens (< 95%); session 1: ` +
      JSON.stringify(s1.lines));

    const sent = proxy.bodies.length;
    const resumed = await turn(['--continue', 'And what is in README.md?'], 'resumed turn');
    // The bodies of session 2's last request and of the resumed turn's first one, as the
    // server renders them.
    const prev = proxy.bodies[sent - 1];
    const next = proxy.bodies[sent];
    const tokens = async (body) => {
      const t = await srv.post('/apply-template?api=messages', body, { 'x-api-key': 'sk-lineage' });
      assert.equal(t.status, 200, `/apply-template?api=messages: ${t.text}`);
      const k = await srv.post('/tokenize', { content: t.json.prompt, add_special: false, parse_special: true },
        { 'x-api-key': 'sk-lineage' });
      assert.equal(k.status, 200, k.text);
      return k.json.tokens;
    };
    const [tp, tn] = [await tokens(prev), await tokens(next)];
    assert.equal(tn.length, resumed.lines[0].prompt, 'the rendered resumed body is the prompt the server ran');
    // Random weights never end a reply within max_tokens, so the session holds no assistant
    // turn: Claude Code adds the new task to its first user message, before its environment
    // block; the two prompts part there.
    const shared = commonPrefix(tp, tn);
    assert.ok(resumed.lines[0].cached >= shared - RERENDER_SHARED,
      `resumed turn restored ${resumed.lines[0].cached} < shared prefix ${shared} - ${RERENDER_SHARED}`);
  });
});
