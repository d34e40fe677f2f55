// Test harness for the end-to-end tests: finds the lineage-server binary and the tiny
// generated models, spawns a server on a free port, waits until it serves, collects its log,
// and stops it (SIGTERM, then SIGKILL after a grace period).
//
// Each server runs with a fresh temporary working directory and HOME, so that a disk tier
// under any default location (cwd, ~/.cache, $XDG_CACHE_HOME) starts empty and one test run
// never restores entries written by another. Logs go to build/e2e-logs/ (kept after the run).
//
// Environment:
//   LINEAGE_SERVER        path of lineage-server   (default build/bin/lineage-server)
//   LINEAGE_MKMODEL       path of lineage-mkmodel  (default build/bin/lineage-mkmodel)
//   LINEAGE_MODELS_DIR    folder of the tiny models (default build/models); a missing
//                         tiny-<arch>.gguf is generated there with lineage-mkmodel --seed 1
//   LINEAGE_E2E_ARCHS     comma list of model archs to test (default "qwen35,qwen3")
//   LINEAGE_E2E_ARGS      extra server arguments appended to every server (split on spaces)
//   LINEAGE_E2E_VERBOSE=1 copy every server's log to stderr as it comes
//   LINEAGE_E2E_READY_TIMEOUT_S  how long a server may take to serve (default 60 s; scripts/test
//                         gives the ASan+UBSan server 120 s). A server not ready by then
//                         is reported with its log tail and every thread's stack (gdb), then killed.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import OpenAI from 'openai';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const SERVER_BIN = process.env.LINEAGE_SERVER || path.join(REPO_ROOT, 'build/bin/lineage-server');
export const MKMODEL_BIN = process.env.LINEAGE_MKMODEL || path.join(REPO_ROOT, 'build/bin/lineage-mkmodel');

/** Writes a LoRA adapter for `model` with weights of `seed` to `file` (lineage-mkmodel --lora-only). */
export function makeAdapter(model, file, seed) {
  const r = spawnSync(MKMODEL_BIN, ['-o', model, '--lora-only', '--lora-out', file, '--lora-seed', String(seed)],
    { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, `lineage-mkmodel --lora-out failed:\n${r.stdout}\n${r.stderr}`);
}
export const MODELS_DIR = process.env.LINEAGE_MODELS_DIR || path.join(REPO_ROOT, 'build/models');
export const LOG_DIR = path.join(REPO_ROOT, 'build/e2e-logs');

const READY_RE = /listening on http:\/\/\S+/;
const READY_TIMEOUT_MS = 1000 * Number(process.env.LINEAGE_E2E_READY_TIMEOUT_S || 60);
const STOP_GRACE_MS = 15_000;

/** The model families every e2e file runs against: the tiny hybrid and the tiny dense model. */
export const ARCHS = (process.env.LINEAGE_E2E_ARCHS || 'qwen35,qwen3')
  .split(',').map((s) => s.trim()).filter(Boolean);

/** Path of build/models/tiny-<arch>.gguf; generates it with lineage-mkmodel when missing.
 *  Throws with an actionable message when neither the model nor the maker exists. */
export function modelPath(arch, preset = 'tiny') {
  const file = path.join(MODELS_DIR, `${preset}-${arch}.gguf`);
  if (fs.existsSync(file)) return file;
  if (!fs.existsSync(MKMODEL_BIN)) {
    throw new Error(`model ${file} is missing and ${MKMODEL_BIN} does not exist: run scripts/bootstrap ` +
      `(or set LINEAGE_MODELS_DIR / LINEAGE_MKMODEL)`);
  }
  fs.mkdirSync(MODELS_DIR, { recursive: true });
  // Write to a private name, then rename: test files may run in parallel.
  const tmp = `${file}.tmp-${process.pid}`;
  const r = spawnSync(MKMODEL_BIN, ['--arch', arch, '--preset', preset, '--seed', '1', '-o', tmp],
    { encoding: 'utf8', timeout: 300_000 });
  if (r.status !== 0) {
    fs.rmSync(tmp, { force: true });
    throw new Error(`lineage-mkmodel failed for ${arch} (${r.status ?? r.signal}):\n${r.stdout}\n${r.stderr}`);
  }
  if (!fs.existsSync(file)) fs.renameSync(tmp, file); else fs.rmSync(tmp, { force: true });
  return file;
}

/** A free TCP port on 127.0.0.1 (bound and released; the server retries on a clash). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Servers still running when the test process exits are killed, whatever happened.
const live = new Set();
process.on('exit', () => { for (const p of live) { try { p.kill('SIGKILL'); } catch { /* gone */ } } });

/**
 * A running lineage-server.
 *   url      http://127.0.0.1:PORT
 *   openai   an OpenAI client on url/v1 (no retries; 120 s timeout)
 *   log()    everything the server printed so far (stdout and stderr interleaved)
 *   stop()   SIGTERM, SIGKILL after 15 s; resolves to {code, signal, killed, ms}
 */
export class Server {
  constructor({ proc, port, logPath, workDir, name }) {
    this.proc = proc;
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.logPath = logPath;
    this.workDir = workDir;
    this.name = name;
    this.openai = new OpenAI({ baseURL: `${this.url}/v1`, apiKey: 'sk-none', maxRetries: 0, timeout: 120_000 });
    this.exit = null; // {code, signal} once the process has exited
    this.exited = new Promise((resolve) => {
      proc.on('exit', (code, signal) => {
        this.exit = { code, signal };
        live.delete(proc);
        resolve(this.exit);
      });
    });
  }

  log() { return this._log.join(''); }

  /** The last `n` lines of the log, for failure messages. */
  logTail(n = 40) {
    const lines = this.log().split('\n');
    return lines.slice(-n - 1).join('\n');
  }

  /** Throws if the server process has exited (a crash during a test). */
  assertAlive() {
    if (this.exit) {
      throw new Error(`${this.name}: lineage-server exited (${JSON.stringify(this.exit)}); log ${this.logPath}:\n` +
        this.logTail());
    }
  }

  async stop() {
    if (this.exit) {
      fs.rmSync(this.workDir, { recursive: true, force: true });
      return { ...this.exit, killed: false, ms: 0, alreadyExited: true };
    }
    const t0 = Date.now();
    this._stoppedByUs = true;
    this.proc.kill('SIGTERM');
    let killed = false;
    const timer = setTimeout(() => { killed = true; this.proc.kill('SIGKILL'); }, STOP_GRACE_MS);
    const exit = await this.exited;
    clearTimeout(timer);
    await this._logClosed;
    fs.rmSync(this.workDir, { recursive: true, force: true });
    if (killed || exit.code !== 0) {
      process.stderr.write(`[e2e] ${this.name}: server stopped with ${JSON.stringify(exit)}` +
        `${killed ? ' after SIGKILL' : ''}; log ${this.logPath}:\n${this.logTail(20)}\n`);
    }
    return { ...exit, killed, ms: Date.now() - t0 };
  }

  /** stop(), then throws unless the server exited by itself with status 0 (SIGTERM is a
   *  graceful stop in the contract); for `after` hooks, so that a hang or crash on shutdown
   *  fails the suite. */
  async stopGracefully() {
    const exit = await this.stop();
    if (exit.alreadyExited && !this._stoppedByUs) {
      throw new Error(`${this.name}: lineage-server had exited before the end of the suite ` +
        `(${JSON.stringify({ code: exit.code, signal: exit.signal })}); log ${this.logPath}`);
    }
    if (exit.killed || exit.code !== 0) {
      throw new Error(`${this.name}: lineage-server did not stop gracefully on SIGTERM ` +
        `(${JSON.stringify(exit)}); log ${this.logPath}:\n${this.logTail(20)}`);
    }
    return exit;
  }

  /** POST JSON (or a raw string body) to `pathname`; returns {status, headers, text, json}. */
  async post(pathname, body, headers = {}) {
    const res = await fetch(this.url + pathname, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    return readResponse(res);
  }

  /** GET `pathname` (with `this.getHeaders` when set, e.g. an admin key's Authorization);
   *  returns {status, headers, text, json}. */
  async get(pathname) {
    return readResponse(await fetch(this.url + pathname, { headers: this.getHeaders ?? {} }));
  }

  /** GET /v1/cache/stats as JSON (throws on a non-200). */
  async cacheStats() {
    const r = await this.get('/v1/cache/stats');
    if (r.status !== 200) throw new Error(`GET /v1/cache/stats -> ${r.status} ${r.text}`);
    return r.json;
  }

  /** Polls cacheStats() until warmup.runs exceeds `runs` (10 s at most; then fails naming
   *  `where`, with the warm-up stats and the log tail); returns the stats. */
  async waitWarmup(runs, where) {
    const t0 = Date.now();
    for (;;) {
      const s = await this.cacheStats();
      if (s.warmup.runs > runs) return s;
      if (Date.now() - t0 > 30_000) {
        assert.fail(`${where}: no warm-up ran within 30 s: ${JSON.stringify(s.warmup)}\n${this.logTail(20)}`);
      }
      await sleep(5);
    }
  }

  /** Polls cacheStats() until the ladder jobs are done (ladderSettled: the rungs a request left
   *  to one are made or dropped; 30 s at most, then fails naming `where`); returns the stats.
   *  A ladder job runs on an idle engine after the request that pinned an anchor: a test whose
   *  next session must restore a rung waits for it (docs/architecture.md "Ladder jobs"). */
  async waitLadder(where) {
    const t0 = Date.now();
    for (;;) {
      const s = await this.cacheStats();
      if (ladderSettled(s)) return s;
      if (Date.now() - t0 > 30_000) {
        assert.fail(`${where}: the ladder jobs did not end within 30 s: ${JSON.stringify(s.ladder_deferred_rungs)}\n` +
          this.logTail(20));
      }
      await sleep(5);
    }
  }

  /** GET /v1/cache/entries: the anchor entries, each {tokens, rungs: its ladder rungs (tokens,
   *  ascending)}. */
  async anchorRungs() {
    const r = await this.get('/v1/cache/entries');
    if (r.status !== 200) throw new Error(`GET /v1/cache/entries -> ${r.status} ${r.text}`);
    return r.json.entries.filter((e) => e.anchor).map((e) => ({ tokens: e.tokens,
      rungs: e.points.filter((p) => p.kind === 'ladder').map((p) => p.tokens).sort((a, b) => a - b) }));
  }
}

/** Whether every ladder rung deferred off a request's path (--cache-ladder-defer) was made or
 *  dropped by its ladder job: `s` is GET /v1/cache/stats. */
export function ladderSettled(s) {
  const r = s.ladder_deferred_rungs ?? {};
  return (r.deferred ?? 0) === (r.made ?? 0) + (r.dropped ?? 0);
}

async function readResponse(res) {
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, headers: res.headers, text, json };
}

/**
 * Starts lineage-server with `-m model --host 127.0.0.1 --port P` plus `args`, and resolves
 * once it has printed "listening on http://..." or answered GET /health with 200.
 * Rejects (with the log tail) if it exits first or is not ready within 60 s
 * (LINEAGE_E2E_READY_TIMEOUT_S); a server that is not ready is reported with its threads' stacks.
 *   name: label for the log file, e.g. "cache-qwen35"
 * The background warm-up of the next turn (--cache-warmup, on by default in the server) is
 * turned off unless `args`, LINEAGE_E2E_ARGS or the environment name it: whether a warm-up
 * finished before a test's next request is a race, and most files assert the restore points
 * of the request path exactly. warmup.test.mjs turns it on and waits for it. Likewise
 * --no-repack unless they name --repack (see below).
 */
export async function startServer({ model, args = [], name = 'server', env = {} }) {
  if (!fs.existsSync(SERVER_BIN)) {
    throw new Error(`${SERVER_BIN} does not exist: build it with scripts/bootstrap (or set LINEAGE_SERVER)`);
  }
  const extra = (process.env.LINEAGE_E2E_ARGS || '').split(/\s+/).filter(Boolean);
  const namesWarmup = [...args, ...extra].some((a) => String(a).startsWith('--cache-warmup')) ||
    'LINEAGE_CACHE_WARMUP' in env || 'LINEAGE_CACHE_WARMUP' in process.env;
  if (!namesWarmup) extra.push('--cache-warmup=false');
  // llama.cpp's repacked weights (--repack, the server's default) compute a batch of several
  // sequences with other kernels than one alone, so the suites that compare a reply computed beside
  // others with one computed alone (placement, parallel, ...) hold only without them
  // (docs/prompt-cache.md "What a hit guarantees", repacked weights): off unless `args`,
  // LINEAGE_E2E_ARGS or the environment name them. restore-equality runs with them (the rules for
  // a request computed alone hold bit for bit either way), and so did the whole suite bar parallel
  // and placement (2026-12-07, an Intel Xeon with AMX).
  const namesRepack = [...args, ...extra].some((a) => /^--(no-)?repack/.test(String(a))) ||
    'LINEAGE_REPACK' in env || 'LINEAGE_REPACK' in process.env;
  if (!namesRepack) extra.push('--no-repack');
  let lastErr;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    try {
      return await launch({ model, args: [...args, ...extra], name, env, port });
    } catch (e) {
      lastErr = e;
      // Another process took the port between freePort() and bind(): try another one.
      if (!/exited before it was ready[\s\S]*cannot listen on/.test(e.message)) throw e;
    }
  }
  throw lastErr;
}

/** Every thread's stack of process `pid` (gdb -batch, 30 s at most), or why there are none: what a
 *  server that is not ready is doing (a hang or a slow step). */
function stacksOf(pid) {
  const r = spawnSync('gdb', ['-batch', '-nx', '-p', String(pid), '-ex', 'thread apply all bt 30'],
    { encoding: 'utf8', timeout: 30_000, maxBuffer: 16 << 20 });
  if (r.error) return `(no stacks: gdb: ${r.error.message})`;
  const out = (r.stdout || '').split('\n').filter((l) => /^(Thread|#)/.test(l)).join('\n');
  return out ? `threads of pid ${pid}:\n${out}` : `(no stacks: gdb said ${(r.stderr || '').trim().slice(0, 500)})`;
}

async function launch({ model, args, name, env, port }) {
  fs.mkdirSync(LOG_DIR, { recursive: true });
  const logPath = path.join(LOG_DIR, `${name}-${port}.log`);
  const logFile = fs.createWriteStream(logPath);
  const workDir = fs.mkdtempSync(path.join(os.tmpdir(), `lineage-e2e-${name}-`));
  const argv = ['-m', model, '--host', '127.0.0.1', '--port', String(port), ...args];
  logFile.write(`# ${SERVER_BIN} ${argv.join(' ')}\n# cwd ${workDir}\n`);
  const proc = spawn(SERVER_BIN, argv, {
    cwd: workDir,
    // LINEAGE_CHECK_INVARIANTS: the scheduler checks the slots' and the cache's invariants
    // after every step and aborts on a broken one, so every e2e test also checks them.
    env: { ...process.env, HOME: workDir, XDG_CACHE_HOME: path.join(workDir, '.cache'),
      LINEAGE_CHECK_INVARIANTS: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(proc);
  const srv = new Server({ proc, port, logPath, workDir, name });
  srv._log = [];
  let ready = false;
  let onReady;
  const readyLine = new Promise((r) => { onReady = r; });
  const collect = (chunk) => {
    const s = chunk.toString('utf8');
    srv._log.push(s);
    logFile.write(s);
    if (process.env.LINEAGE_E2E_VERBOSE === '1') process.stderr.write(`[${name}] ${s}`);
    if (!ready && READY_RE.test(srv.log())) { ready = true; onReady(); }
  };
  proc.stdout.on('data', collect);
  proc.stderr.on('data', collect);
  let pending = 2;
  srv._logClosed = new Promise((resolve) => {
    const done = () => { if (--pending === 0) logFile.end(resolve); };
    proc.stdout.on('close', done);
    proc.stderr.on('close', done);
  });
  const spawnError = new Promise((_, reject) => proc.on('error', (e) => reject(new Error(`spawn ${SERVER_BIN}: ${e.message}`))));

  const health = (async () => {
    while (!srv.exit && !ready) {
      try {
        const r = await fetch(`${srv.url}/health`, { signal: AbortSignal.timeout(2000) });
        if (r.status === 200) return;
      } catch { /* not up yet */ }
      await sleep(100);
    }
    if (srv.exit) await new Promise(() => {}); // the `exited` branch reports it
  })();
  const exited = srv.exited.then((e) => {
    throw new Error(`${name}: lineage-server exited before it was ready (${JSON.stringify(e)}); ` +
      `log ${logPath}:\n${srv.logTail()}`);
  });
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => {
      const stacks = stacksOf(proc.pid);
      logFile.write(`# not ready after ${READY_TIMEOUT_MS / 1000} s\n${stacks}\n`);
      reject(new Error(`${name}: lineage-server not ready after ${READY_TIMEOUT_MS / 1000} s; ` +
        `log ${logPath}:\n${srv.logTail()}\n${stacks}`));
    }, READY_TIMEOUT_MS);
  });
  try {
    await Promise.race([readyLine, health, exited, timeout, spawnError]);
  } catch (e) {
    if (!srv.exit) { proc.kill('SIGKILL'); await srv.exited; }
    fs.rmSync(workDir, { recursive: true, force: true });
    throw e;
  } finally {
    clearTimeout(timer);
    exited.catch(() => {});
    spawnError.catch(() => {});
    ready = true; // stops the health poll
  }
  return srv;
}
