// A throwaway redis-server for the tier-3 tests (Debian redis-server): started on a free
// loopback port with persistence off (--save '' --appendonly no), stopped by its PID, and a
// redis-cli wrapper, and the waits the replica tests share. The server is killed at process exit
// whatever happened.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import assert from 'node:assert/strict';

import { LOG_DIR, freePort } from './server.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const live = new Set();
process.on('exit', () => { for (const p of live) { try { p.kill('SIGKILL'); } catch { /* gone */ } } });

export class Redis {
  constructor(port, name) {
    this.port = port;
    this.name = name;
    this.url = `redis://127.0.0.1:${port}`;
    this.proc = null;
  }

  /** Starts redis-server on this.port and resolves once it answers PING. */
  async start() {
    fs.mkdirSync(LOG_DIR, { recursive: true });
    const log = fs.openSync(path.join(LOG_DIR, `${this.name}.redis.log`), 'a');
    this.proc = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '',
      '--appendonly', 'no', '--daemonize', 'no', '--protected-mode', 'yes'], { stdio: ['ignore', log, log] });
    live.add(this.proc);
    this.exited = new Promise((resolve) => this.proc.on('exit', () => { live.delete(this.proc); resolve(); }));
    for (let i = 0; i < 100; i++) {
      if (this.cli('PING').trim() === 'PONG') return this;
      await sleep(50);
    }
    throw new Error(`redis-server on port ${this.port} did not answer PING`);
  }

  /** redis-cli against this server; returns its stdout ('' when it cannot connect). */
  cli(...args) {
    const r = spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', String(this.port), ...args], { encoding: 'utf8', timeout: 10_000 });
    return r.stdout ?? '';
  }

  /** Entries in namespace `ns`'s index (ZCARD of the sorted set). */
  indexed(ns) {
    return Number(this.cli('ZCARD', `${ns}:index`).trim());
  }

  /** Keys matching `pattern` (SCAN). */
  keys(pattern) {
    return this.cli('--scan', '--pattern', pattern).split('\n').filter(Boolean);
  }

  /** Stalls it (SIGSTOP by PID): connections are accepted by the kernel, nothing is answered. */
  pause() { process.kill(this.proc.pid, 'SIGSTOP'); }
  resume() { process.kill(this.proc.pid, 'SIGCONT'); }

  /** Stops it by its PID (SIGKILL: the process is gone at once, as in a crash). */
  async kill() {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    process.kill(this.proc.pid, 'SIGCONT');
    process.kill(this.proc.pid, 'SIGKILL');
    await this.exited;
  }
}

/** A started Redis on a free port. */
export async function startRedis(name) {
  return new Redis(await freePort(), name).start();
}

/** Polls `srv`'s /v1/cache/stats until `pred(stats)` holds (10 s at most); returns the stats.
 *  Fails naming `what` and the last tier-3 stats. */
export async function waitStats(srv, pred, what) {
  let s;
  for (let i = 0; i < 100; i++) {
    s = await srv.cacheStats();
    if (pred(s)) return s;
    await sleep(100);
  }
  assert.fail(`${srv.name}: ${what} not reached in 10 s: ${JSON.stringify(s.redis)}`);
}

/** Runs `ask()` (a request on replica `writer`), waits until `writer` has written `writes` more
 *  entries to Redis (default 2: the conversation entry and its anchor) and every replica in
 *  `readers` mirrors namespace `ns`'s whole index; returns what `ask()` returned. */
export async function askAndShare(redis, ns, writer, readers, ask, writes = 2) {
  const w0 = (await writer.cacheStats()).redis.writes;
  const r = await ask();
  await waitStats(writer, (s) => s.redis.writes >= w0 + writes, `${writes} more entries written`);
  const n = redis.indexed(ns);
  for (const reader of readers) await waitStats(reader, (s) => s.redis.entries >= n, `${reader.name} mirrors the index`);
  return r;
}
