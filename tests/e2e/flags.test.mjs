// Every numeric flag of `lineage-server --help` at 0, 1, a huge value and a negative value
// (docs/prompt-cache.md "Configuration"): the server either refuses to start (exit status 1, not a
// signal) with a message that names the flag, or it starts and serves a chat request with a system
// prompt (the request that aborted the server under --cache-max-anchors 0) and stops gracefully.
// One tiny hybrid model (the hybrid path plans the most capture kinds). --cache-ram (MIB) and
// --cache-device-bytes are walked too; and the startup memory plan: its line, and a
// --cache-device-bytes too small for it refused with the numbers.
//
//   cd tests/e2e && node --test flags.test.mjs
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';

import { words } from './lib/chat.mjs';
import { SERVER_BIN, freePort, modelPath, startServer } from './lib/server.mjs';

const ARCH = 'qwen35';
const START_TIMEOUT_MS = 60_000;

/** Numeric --help entries: {flag, env, kind}; kind from the value name (N, TOKENS, ...). */
function numericFlags() {
  const r = spawnSync(SERVER_BIN, ['--help'], { encoding: 'utf8' });
  assert.equal(r.status, 0, `${SERVER_BIN} --help failed: ${r.stderr}`);
  const out = [];
  let cur = null;
  const flush = () => {
    if (!cur) return;
    const m = cur.match(/^\s*(?:-\w,)?(--[a-z0-9-]+)(?:,[^\s]+)?\s+(N|TOKENS|SECONDS|MS|BYTES|PORT|MIB)\b/);
    const env = cur.match(/\[env (\S+);/)?.[1];
    if (m) out.push({ flag: m[1], kind: m[2], env });
  };
  for (const line of r.stdout.split('\n')) {
    if (/^ {2}-/.test(line)) { flush(); cur = line; } else if (cur && /^ {3,}\S/.test(line)) cur += ` ${line.trim()}`;
    else { flush(); cur = null; }
  }
  flush();
  return out;
}

const HUGE = { N: '2147483647', TOKENS: '2147483647', PORT: '2147483647', SECONDS: '1e300', MS: '1e300', BYTES: '1000000T', MIB: '2147483647' };

/** Runs the server with `flag value`; resolves {started, code, signal, log, port}. When it
 *  starts, `use(port)` runs before the SIGTERM. */
async function tryFlag(model, flag, value, use) {
  const port = flag === '--port' ? Number(value) : await freePort();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-flags-'));
  const argv = ['-m', model, '--host', '127.0.0.1', ...(flag === '--port' ? [] : ['--port', String(port)]), flag, value];
  const proc = spawn(SERVER_BIN, argv, { cwd: work, env: { ...process.env, HOME: work, XDG_CACHE_HOME: path.join(work, '.cache') },
    stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  let exit = null;
  exited.then((e) => { exit = e; });
  const ready = new Promise((resolve) => {
    const on = (c) => { log += c.toString('utf8'); if (/listening on http:\/\//.test(log)) resolve(true); };
    proc.stdout.on('data', on);
    proc.stderr.on('data', on);
  });
  const timer = new Promise((resolve) => setTimeout(() => resolve('timeout'), START_TIMEOUT_MS));
  const first = await Promise.race([ready, exited.then(() => false), timer]);
  try {
    if (first === 'timeout') throw new Error(`${flag} ${value}: neither listening nor exited after 60 s:\n${log.slice(-2000)}`);
    if (!first) return { started: false, ...(await exited), log };
    await use(port);
    assert.equal(exit, null, `${flag} ${value}: the server died while serving: ${JSON.stringify(exit)}\n${log.slice(-2000)}`);
    proc.kill('SIGTERM');
    const killer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
    const e = await exited;
    clearTimeout(killer);
    return { started: true, ...e, log };
  } finally {
    if (!exit) proc.kill('SIGKILL');
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/** POST `body` as JSON to 127.0.0.1:port (node:http: fetch refuses ports such as 1). */
function postJson(port, pathname, body) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, path: pathname, method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', reject);
    req.end(data);
  });
}

/** One chat request with a system prompt, twice; asserts 200 completions, or a 400 that says
 *  the prompt does not fit the context (a 1-token --ctx-size) or names the flag under test (a
 *  work limit such as --max-messages 1 set below what the request sends). */
async function serveOne(port, where) {
  const body = {
    model: 'tiny', max_tokens: 4, temperature: 0,
    messages: [{ role: 'system', content: words(60, 3) }, { role: 'user', content: words(8, 4) }],
  };
  for (const attempt of ['first', 'second']) {
    const { status, text } = await postJson(port, '/v1/chat/completions', body);
    if (status === 400) {
      const flag = where.split(' ')[0];
      assert.ok(/context length|context_length_exceeded/.test(text) || text.includes(`(${flag})`),
        `${where}: 400 that is not about the context or ${flag}: ${text}`);
      return;
    }
    assert.equal(status, 200, `${where} (${attempt} request): ${text}`);
    const j = JSON.parse(text);
    assert.equal(j.choices.length, 1, `${where}: ${text}`);
    assert.ok(j.usage.completion_tokens >= 1 && j.usage.completion_tokens <= 4, `${where}: ${text}`);
  }
}

describe('numeric flags: refused at startup with the flag named, or served', () => {
  const model = modelPath(ARCH);
  const flags = numericFlags();

  it('--help lists the numeric flags this walk covers', () => {
    const names = flags.map((f) => f.flag);
    for (const f of ['--port', '--parallel', '--ctx-size', '--batch-size', '--ubatch-size', '--threads',
      '--cache-max-anchors', '--cache-device-slots', '--prompt-cache-snapshot-ttl', '--cache-max-anchor-bytes', '--threads-batch', '--cache-ram', '--cache-device-bytes']) {
      assert.ok(names.includes(f), `${f} missing from the numeric flags of --help: ${names.join(' ')}`);
    }
  });

  it('a second server on a port in use exits with the port named, and the first keeps every connection', async () => {
    const first = await startServer({ model, name: 'flags-port-owner', args: ['--cache-disk=false'] });
    try {
      // Another model, so that an answer from the second server would show.
      const r = await tryFlag(modelPath(ARCH === 'qwen3' ? 'qwen35' : 'qwen3'), '--port', String(first.port), () => {});
      assert.equal(r.started, false, `a second server listened on the busy port ${first.port}:\n${r.log.slice(-2000)}`);
      assert.equal(r.code, 1, r.log.slice(-2000));
      assert.match(r.log, new RegExp(`cannot listen on 127\\.0\\.0\\.1:${first.port}`));
      for (let i = 0; i < 6; i++) {
        const res = await fetch(`${first.url}/v1/models`);
        assert.equal(res.status, 200);
        assert.equal((await res.json()).data[0].id, path.basename(model, '.gguf'));
      }
    } finally {
      await first.stopGracefully();
    }
  });

  it('--cache-max-anchors 0: a request with a system prompt is served, twice (it aborted the server)', async () => {
    const r = await tryFlag(model, '--cache-max-anchors', '0', (port) => serveOne(port, '--cache-max-anchors 0'));
    assert.equal(r.started, true, r.log.slice(-2000));
    assert.equal(r.signal, null, `stopped by ${r.signal}:\n${r.log.slice(-2000)}`);
    assert.equal(r.code, 0);
  });

  it('the memory plan is logged at startup, and a --cache-device-bytes that cannot hold it is refused with its numbers', async () => {
    const ok = await tryFlag(model, '--cache-device-bytes', '0', () => {});
    assert.equal(ok.started, true, ok.log.slice(-2000));
    const line = ok.log.match(/memory plan \(CPU, host memory\): model [^(]+\((\d+)\) \+ KV [^(]+\((\d+)\)\/token \(K f16, V f16\) x (\d+) tokens \+ [^(]+\((\d+)\) fixed = [^(]+\((\d+)\) per sequence; 4 --parallel = [^(]+\((\d+)\), 1 parked \(--cache-device-slots\) = [^(]+\((\d+)\); needs [^(]+\((\d+)\) of device budget [^(]+\((\d+)\) \(the device's memory; --cache-device-bytes 0 = auto\), headroom [^(]+\((\d+)\); RAM tier budget [^(]+\((\d+)\)/);
    assert.ok(line, `no memory plan line:\n${ok.log.slice(-3000)}`);
    const [model_, perToken, ctx, fixed, seq, active, parked, need, budget, headroom] = line.slice(1, 11).map(Number);
    assert.equal(seq, fixed + perToken * ctx);
    assert.equal(active, 4 * seq);
    assert.equal(parked, seq);
    assert.equal(need, model_ + active + parked);
    assert.equal(headroom, budget - need);
    assert.ok(perToken > 0 && model_ > 0);
    // One byte less than the plan needs: refused, naming the flag, with the numbers.
    const r = await tryFlag(model, '--cache-device-bytes', String(need - 1), () => {});
    assert.equal(r.started, false, r.log.slice(-2000));
    assert.equal(r.code, 1);
    assert.ok(r.log.includes(`the memory plan does not fit: --cache-device-bytes `) && r.log.includes(`(${need - 1}), is less than model`),
      r.log.slice(-2000));
    assert.ok(r.log.includes(`(${need}); lower --cache-device-slots, raise --cache-device-bytes`), r.log.slice(-2000));
    // With q8_0 the KV bytes per token shrink (34 bytes per 32 values instead of 64).
    const q8 = await tryFlag(model, '-ctk', 'q8_0', () => {});
    const k8 = q8.log.match(/\+ KV [^(]+\((\d+)\)\/token \(K q8_0, V f16\)/);
    assert.ok(k8, q8.log.slice(-2000));
    assert.ok(Number(k8[1]) < perToken, `q8_0 K: ${k8[1]} bytes a token, f16: ${perToken}`);
  });

  for (const { flag, kind, env } of flags) {
    it(`${flag} at 0, 1, huge, negative`, async () => {
      for (const value of ['0', '1', HUGE[kind], '-1']) {
        const where = `${flag} ${value}`;
        const r = await tryFlag(model, flag, value, (port) => serveOne(port, where));
        assert.equal(r.signal, null, `${where}: the server was killed by ${r.signal}:\n${r.log.slice(-2000)}`);
        if (r.started) {
          assert.equal(r.code, 0, `${where}: served, but did not stop gracefully:\n${r.log.slice(-2000)}`);
        } else {
          assert.equal(r.code, 1, `${where}: exit status ${r.code}:\n${r.log.slice(-2000)}`);
          assert.ok(r.log.includes(flag) || (env && r.log.includes(env)),
            `${where}: refused without naming ${flag}:\n${r.log.slice(-2000)}`);
        }
      }
    });
  }
});
