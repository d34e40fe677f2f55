// The benchmark's server processes (tools/bench/run.mjs): one server (ServerProc), or a cluster
// (Cluster: a redis-server, N lineage-server replicas sharing their cache through it with
// --cache-redis, and HAProxy with deploy/haproxy.cfg in front, all on loopback). Both expose the
// same surface to the driver: start(), restart(), stop(), base (the URL requests go to),
// procStats() and cacheBytes(). A cluster's restart is rolling: each replica in turn is stopped
// (SIGTERM: it writes what it has not yet to Redis and its disk) and started again, and the next
// one only once HAProxy's health check has the previous one back.
// Every process is started here and stopped by its PID; a crash of the driver kills them at exit.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const live = new Set();
process.on('exit', () => { for (const p of live) { try { p.kill('SIGKILL'); } catch { /* gone */ } } });

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

async function getJson(url) {
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(10_000) });
    return r.status === 200 ? await r.json() : null;
  } catch { return null; }
}

/** POST `body` as JSON to `base + pathname`; the parsed answer, or an Error naming the status.
 *  Only for idempotent endpoints (/tokenize, /apply-template): a request that fails before any
 *  answer (fetch's "fetch failed": e.g. a kept-alive connection the server closed as it was
 *  reused, which undici does not retry for a POST) is sent again, up to 2 more times. */
export async function postJson(base, pathname, body, timeoutMs) {
  let r;
  for (let attempt = 1; ; attempt++) {
    try {
      r = await fetch(base + pathname, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) });
      break;
    } catch (e) {
      const why = e.cause ? `${e.message}: ${e.cause.code ?? ''} ${e.cause.message ?? e.cause}` : e.message;
      if (attempt >= 3 || e.name === 'TimeoutError') throw new Error(`POST ${pathname}: ${why} (attempt ${attempt})`);
      process.stderr.write(`[bench] POST ${pathname}: ${why}; sending it again\n`);
      await sleep(200);
    }
  }
  const text = await r.text();
  if (r.status !== 200) throw new Error(`POST ${pathname} -> ${r.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

/** The value of `--flag VALUE` in argv (the last one), or null. */
function flagValue(argv, flag) {
  const i = argv.lastIndexOf(flag);
  return i >= 0 && i + 1 < argv.length ? argv[i + 1] : null;
}

/** One child process with its log, /proc facts and a graceful stop. */
export class ServerProc {
  constructor(argv, logPath, { base, log } = {}) {
    this.argv = argv;
    this.logPath = logPath;
    this.base = base;
    this.log = log ?? (() => {});
    this.proc = null;
    this.starts = 0;
    this.readyRss = [];   // RSS (bytes) once ready, per start: the baseline of its memory budget
    this.peaks = [];      // peak RSS (bytes) of each earlier start, read before it was stopped
    const ram = flagValue(argv, '--cache-ram-bytes') ?? flagValue(argv, '--prompt-cache-capacity-bytes');
    this.cacheBudget = ram !== null && /^\d+$/.test(ram) ? Number(ram) : null;
  }

  /** Spawns it and waits for GET /health 200 (`health`: another URL to wait on). */
  async start(readyTimeoutMs, health = `${this.base}/health`) {
    const logFd = fs.openSync(this.logPath, this.starts === 0 ? 'w' : 'a');
    fs.writeSync(logFd, `\n# ---- start ${this.starts + 1}: ${this.argv.join(' ')}\n`);
    const proc = spawn(this.argv[0], this.argv.slice(1), { stdio: ['ignore', logFd, logFd], env: this.env ?? process.env });
    fs.closeSync(logFd);
    this.proc = proc;
    live.add(proc);
    this.starts++;
    this.exit = null;
    proc.on('exit', (code, signal) => { this.exit = { code, signal }; live.delete(proc); });
    const t0 = Date.now();
    while (Date.now() - t0 < readyTimeoutMs) {
      if (this.exit) throw new Error(`${this.argv[0]} exited during startup (${JSON.stringify(this.exit)}); log ${this.logPath}`);
      try {
        const r = await fetch(health, { signal: AbortSignal.timeout(2000) });
        if (r.status === 200) {
          this.readyRss.push(this.procStats().rss_bytes ?? null);
          return Date.now() - t0;
        }
      } catch { /* not up yet */ }
      await sleep(200);
    }
    throw new Error(`${this.argv[0]} not ready after ${readyTimeoutMs / 1000} s; log ${this.logPath}`);
  }

  /** /proc facts of the live process: rss and peak rss (bytes), bytes written to storage. */
  procStats() {
    const out = { pid: this.proc?.pid ?? null };
    try {
      const st = fs.readFileSync(`/proc/${this.proc.pid}/status`, 'utf8');
      const kb = (k) => Number((st.match(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm')) || [])[1]) * 1024;
      out.rss_bytes = kb('VmRSS');
      out.peak_rss_bytes = kb('VmHWM');
    } catch { /* gone */ }
    try {
      const io = fs.readFileSync(`/proc/${this.proc.pid}/io`, 'utf8');
      out.disk_write_bytes = Number((io.match(/^write_bytes:\s+(\d+)/m) || [])[1]);
    } catch { /* not readable */ }
    return out;
  }

  async stop() {
    if (!this.proc || this.exit) return this.exit;
    const peak = this.procStats().peak_rss_bytes;
    if (peak) this.peaks.push(peak);
    this.proc.kill('SIGTERM');
    for (let i = 0; i < 300 && !this.exit; i++) await sleep(100);
    if (!this.exit) { this.log(`${this.logPath}: did not stop within 30 s: SIGKILL`); this.proc.kill('SIGKILL'); }
    for (let i = 0; i < 100 && !this.exit; i++) await sleep(100);
    return this.exit;
  }

  async restart(readyTimeoutMs) {
    await this.stop();
    return this.start(readyTimeoutMs);
  }

  /** Memory against the budget: RSS once ready (the first start) + the cache's RAM budget. */
  memory() {
    const now = this.procStats();
    const peak = Math.max(now.peak_rss_bytes ?? 0, ...this.peaks);
    const budget = this.cacheBudget !== null && this.readyRss[0] ? this.readyRss[0] + this.cacheBudget : null;
    return { rss_at_ready_bytes: this.readyRss, rss_bytes: now.rss_bytes ?? null, peak_rss_bytes: peak || null,
      cache_budget_bytes: this.cacheBudget, rss_budget_bytes: budget };
  }

  /** Bytes its cache holds: lineage-server's stats, else llama-server's log at -lv 4. */
  async cacheBytes() {
    const st = await getJson(`${this.base}/v1/cache/stats`);
    if (st && st.bytes) {
      return { source: '/v1/cache/stats', ram_bytes: st.bytes.ram ?? 0, device_bytes: st.bytes.device ?? 0,
        disk_bytes: st.bytes.disk ?? 0, entries: st.entries, anchors: st.anchors, stats: st };
    }
    try {
      const text = fs.readFileSync(this.logPath, 'utf8');
      const last = [...text.matchAll(/cache state: (\d+) prompts, ([\d.]+) MiB/g)].at(-1);
      if (last) {
        return { source: 'llama-server log (cache state)', ram_bytes: Math.round(Number(last[2]) * 1048576),
          disk_bytes: 0, entries: Number(last[1]) };
      }
    } catch { /* no log */ }
    return { source: null, ram_bytes: null, disk_bytes: 0 };
  }

  logBytes() {
    try { return fs.statSync(this.logPath).size; } catch { return null; }
  }
}

/** redis-server (no persistence, `maxmemory` with LRU eviction: a cache), HAProxy and N
 *  replicas. `argv`: a replica's command line; {port}, {replica} (1-based) and {redis} (the
 *  redis:// URL) are replaced per replica. */
export class Cluster {
  constructor({ argv, replicas, outDir, name, haproxyCfg, redisMaxmemory = '2gb', log }) {
    this.template = argv;
    this.n = replicas;
    this.outDir = outDir;
    this.name = name;
    this.haproxyCfg = haproxyCfg;
    this.redisMaxmemory = redisMaxmemory;
    this.log = log ?? (() => {});
    this.argv = argv;
    this.logPath = path.join(outDir, `${name}.server.log`);  // the replicas' logs are NAME.rK.server.log
  }

  redisCli(...args) {
    const r = spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', String(this.redisPort), ...args], { encoding: 'utf8', timeout: 10_000 });
    return r.stdout ?? '';
  }

  async start(readyTimeoutMs) {
    const t0 = Date.now();
    this.redisPort = await freePort();
    const redisUrl = `redis://127.0.0.1:${this.redisPort}`;
    const redisLog = fs.openSync(path.join(this.outDir, `${this.name}.redis.log`), 'w');
    this.redis = spawn('redis-server', ['--port', String(this.redisPort), '--bind', '127.0.0.1', '--save', '',
      '--appendonly', 'no', '--daemonize', 'no', '--maxmemory', this.redisMaxmemory, '--maxmemory-policy', 'allkeys-lru'],
    { stdio: ['ignore', redisLog, redisLog] });
    fs.closeSync(redisLog);
    live.add(this.redis);
    this.redis.on('exit', () => live.delete(this.redis));
    let up = false;
    for (let i = 0; i < 200 && !up; i++) { up = this.redisCli('PING').trim() === 'PONG'; if (!up) await sleep(50); }
    if (!up) throw new Error(`redis-server on port ${this.redisPort} did not answer PING`);

    this.replicas = [];
    for (let k = 1; k <= this.n; k++) {
      const port = await freePort();
      const argv = this.template.map((a) => a.replaceAll('{port}', String(port)).replaceAll('{replica}', String(k))
        .replaceAll('{redis}', redisUrl));
      this.replicas.push(new ServerProc(argv, path.join(this.outDir, `${this.name}.r${k}.server.log`),
        { base: `http://127.0.0.1:${port}`, log: this.log }));
    }
    this.argv = this.replicas.map((r) => r.argv.join(' '));
    // One after another: the model loads share the cores.
    for (const r of this.replicas) await r.start(readyTimeoutMs);

    const lbPort = await freePort();
    this.base = `http://127.0.0.1:${lbPort}`;
    const servers = this.replicas.map((r, i) => `    server r${i + 1} ${new URL(r.base).host} check`).join('\n');
    const cfg = fs.readFileSync(this.haproxyCfg, 'utf8');
    if (!/^ {4}# @SERVERS@$/m.test(cfg)) throw new Error(`${this.haproxyCfg} has no "    # @SERVERS@" line`);
    const cfgPath = path.join(this.outDir, `${this.name}.haproxy.cfg`);
    fs.writeFileSync(cfgPath, cfg.replace(/^ {4}# @SERVERS@$/m, servers));
    this.haproxy = new ServerProc(['haproxy', '-f', cfgPath], path.join(this.outDir, `${this.name}.haproxy.log`),
      { base: this.base, log: this.log });
    this.haproxy.env = { ...process.env, LINEAGE_LB_BIND: `127.0.0.1:${lbPort}` };
    await this.haproxy.start(readyTimeoutMs);
    return Date.now() - t0;
  }

  /** Rolling restart: each replica stopped and started in turn; HAProxy's checks (1 s apart,
   *  rise 1) have it back before the next one goes. */
  async restart(readyTimeoutMs) {
    const t0 = Date.now();
    for (const r of this.replicas) {
      await r.restart(readyTimeoutMs);
      await sleep(2500);
    }
    return Date.now() - t0;
  }

  async stop() {
    for (const r of this.replicas ?? []) await r.stop();
    await this.haproxy?.stop();
    if (this.redis && this.redis.exitCode === null && this.redis.signalCode === null) {
      const gone = new Promise((res) => this.redis.once('exit', res));
      this.redis.kill('SIGTERM');
      await Promise.race([gone, sleep(5000)]);
      if (this.redis.exitCode === null && this.redis.signalCode === null) this.redis.kill('SIGKILL');
    }
    return null;
  }

  /** Sums over the replicas (rss, peak: the sum of each one's peak), and each replica's. */
  procStats() {
    const per = (this.replicas ?? []).map((r) => r.procStats());
    const sum = (k) => per.reduce((a, x) => a + (x[k] ?? 0), 0);
    return { pid: per.map((x) => x.pid), rss_bytes: sum('rss_bytes'), peak_rss_bytes: sum('peak_rss_bytes'),
      disk_write_bytes: sum('disk_write_bytes'), replicas: per };
  }

  /** Redis's memory and index (INFO memory, ZCARD of each namespace's index). */
  redisStats() {
    const info = this.redisCli('INFO', 'memory');
    const num = (k) => Number((info.match(new RegExp(`^${k}:(\\d+)`, 'm')) || [])[1] ?? NaN);
    const keys = Number(this.redisCli('DBSIZE').trim());
    return { used_memory_bytes: num('used_memory'), used_memory_peak_bytes: num('used_memory_peak'), keys,
      maxmemory: this.redisMaxmemory };
  }

  async cacheBytes() {
    const per = [];
    for (const r of this.replicas ?? []) per.push(await r.cacheBytes());
    const sum = (k) => per.reduce((a, x) => a + (x[k] ?? 0), 0);
    return { source: 'replicas\' /v1/cache/stats', ram_bytes: sum('ram_bytes'), device_bytes: sum('device_bytes'),
      disk_bytes: sum('disk_bytes'), entries: sum('entries'), anchors: sum('anchors'), replicas: per,
      redis: this.redisStats() };
  }

  /** Each replica's memory against its budget, what its cache did, and its Redis counters. */
  async replicaReport() {
    const out = [];
    for (const [i, r] of (this.replicas ?? []).entries()) {
      const c = await r.cacheBytes();
      const s = c.stats ?? {};
      out.push({ replica: i + 1, ...r.memory(), cache_ram_bytes: c.ram_bytes, entries: c.entries, anchors: c.anchors,
        lookups: s.lookups, hits: s.hits, misses: s.misses, disk_hits: s.disk_hits, redis_hits: s.redis_hits,
        tokens_reused: s.tokens_reused, tokens_prefilled: s.tokens_prefilled, redis: s.redis ?? null });
    }
    return out;
  }

  logBytes() {
    return (this.replicas ?? []).reduce((a, r) => a + (r.logBytes() ?? 0), 0);
  }
}
