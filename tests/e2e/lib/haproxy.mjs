// HAProxy in front of lineage replicas on loopback, with the repository's deploy/haproxy.cfg (its
// `# @SERVERS@` marker replaced by one server line per replica), for the proxy e2e tests
// (haproxy.test.mjs, failover.test.mjs, retry-proxy.test.mjs).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { LOG_DIR, REPO_ROOT, freePort } from './server.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Starts HAProxy on a free loopback port in front of the replicas on `ports`, the config checked
 *  with `haproxy -c` first, its log in LOG_DIR/`name`.log; waits (up to 10 s) until GET `waitPath`
 *  through it answers 200. Returns {url, stop()}. */
export async function startHaproxy(name, ports, { waitPath = '/ready' } = {}) {
  const bind = `127.0.0.1:${await freePort()}`;
  const lines = ports.map((p, i) => `    server r${i + 1} 127.0.0.1:${p} check`).join('\n');
  const cfg = fs.readFileSync(path.join(REPO_ROOT, 'deploy/haproxy.cfg'), 'utf8').replace(/^ {4}# @SERVERS@$/m, lines);
  assert.notEqual(cfg.indexOf('server r1 '), -1, 'the SERVERS marker was replaced');
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), `lineage-${name}-`)), 'haproxy.cfg');
  fs.writeFileSync(file, cfg);
  const env = { ...process.env, LINEAGE_LB_BIND: bind };
  const c = spawnSync('haproxy', ['-c', '-f', file], { encoding: 'utf8', env });
  assert.equal(c.status, 0, `haproxy -c: ${c.stdout}${c.stderr}`);
  fs.mkdirSync(LOG_DIR, { recursive: true });
  const log = fs.openSync(path.join(LOG_DIR, `${name}.log`), 'a');
  const proc = spawn('haproxy', ['-f', file], { stdio: ['ignore', log, log], env });
  const url = `http://${bind}`;
  for (let i = 0; i < 100; i++) {
    try {
      if ((await fetch(`${url}${waitPath}`)).status === 200) break;
    } catch { /* not up yet */ }
    await sleep(100);
  }
  return {
    url,
    async stop() {
      if (proc.exitCode === null) {
        process.kill(proc.pid, 'SIGTERM');
        await new Promise((r) => proc.on('exit', r));
      }
    },
  };
}
