// tools/bench/rounds.mjs without a server: several rounds of scripts/bench (BENCH_TRACE_ROUNDS)
// read together give each round's ratios to llama-server and their medians, exactly; a round
// where a configuration is missing gives no ratio for it, and the median is over the others.
//
//   cd tests/e2e && node --test bench-rounds.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const ROUNDS = path.join(ROOT, 'tools/bench/rounds.mjs');

const made = [];
after(() => { for (const d of made) fs.rmSync(d, { recursive: true, force: true }); });

/** Writes NAME.summary.json + NAME.jsonl as tools/bench/run.mjs does: `ttfts` one request each,
 *  10 generated tokens and 100 computed / 50 oracle tokens a request. */
function writeRun(dir, name, { wall, ttfts, peak }) {
  fs.mkdirSync(dir, { recursive: true });
  const records = ttfts.map((t, i) => ({ i, kind: 'warm', ttft_ms: t, completion_tokens: 10, computed: 100, oracle: 50, prompt_tokens: 1000 }));
  fs.writeFileSync(path.join(dir, `${name}.jsonl`), records.map((r) => JSON.stringify(r)).join('\n') + '\n');
  fs.writeFileSync(path.join(dir, `${name}.summary.json`), JSON.stringify({ name, run_seconds: wall, failures: 0, after_run: { peak_rss_bytes: peak } }));
}

function rounds(dir) {
  const r = spawnSync(process.execPath, [ROUNDS, dir], { encoding: 'utf8' });
  return { status: r.status, stderr: r.stderr, json: r.status === 0 ? JSON.parse(fs.readFileSync(path.join(dir, 'rounds.json'), 'utf8')) : null };
}

const tmp = () => { const d = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-rounds-test-')); made.push(d); return d; };

describe('tools/bench/rounds.mjs', () => {
  it('gives every round\'s ratios to llama-server and their medians', () => {
    const dir = tmp();
    // lineage / llama-server wall: 0.5, 0.9, 0.8 -> median 0.8; TTFT p50 (one request each): 0.5, 1, 2 -> 1.
    writeRun(path.join(dir, 'round1'), 'lineage', { wall: 50, ttfts: [100], peak: 800 });
    writeRun(path.join(dir, 'round1'), 'llama-server', { wall: 100, ttfts: [200], peak: 1000 });
    writeRun(path.join(dir, 'round2'), 'lineage', { wall: 90, ttfts: [300], peak: 900 });
    writeRun(path.join(dir, 'round2'), 'llama-server', { wall: 100, ttfts: [300], peak: 1000 });
    writeRun(path.join(dir, 'round10'), 'lineage', { wall: 80, ttfts: [400], peak: 1100 });
    writeRun(path.join(dir, 'round10'), 'llama-server', { wall: 100, ttfts: [200], peak: 1000 });
    fs.mkdirSync(path.join(dir, 'not-a-round'));
    const { status, json } = rounds(dir);
    assert.equal(status, 0);
    assert.deepEqual(json.rounds, ['round1', 'round2', 'round10']);
    const c = json.configurations.lineage;
    assert.deepEqual(c.per_round.map((p) => p.ratios.wall), [0.5, 0.9, 0.8]);
    assert.deepEqual(c.per_round.map((p) => p.ratios.ttft_p50), [0.5, 1, 2]);
    // decode: generated tokens / wall of the reference over this one's (10 tokens each) = wall ratio.
    assert.deepEqual(c.per_round.map((p) => p.ratios.decode), [0.5, 0.9, 0.8]);
    assert.deepEqual(c.median, { wall: 0.8, ttft_p50: 1, ttft_p95: 1, decode: 0.8, peak_rss: 0.9 });
    assert.equal(c.per_round[0].figures.efficiency, 2);
    const md = fs.readFileSync(path.join(dir, 'rounds.md'), 'utf8');
    assert.match(md, /\| \*\*median\*\* \| \*\*0\.80\*\* \| \*\*1\.00\*\* \| \*\*1\.00\*\* \| \*\*0\.80\*\* \| \*\*0\.90\*\* \|/);
  });

  it('a round missing a configuration gives no ratio, and the median is over the other rounds', () => {
    const dir = tmp();
    writeRun(path.join(dir, 'round1'), 'lineage', { wall: 60, ttfts: [100], peak: 800 });
    writeRun(path.join(dir, 'round1'), 'llama-server', { wall: 100, ttfts: [100], peak: 1000 });
    writeRun(path.join(dir, 'round2'), 'llama-server', { wall: 100, ttfts: [100], peak: 1000 });
    writeRun(path.join(dir, 'round3'), 'lineage', { wall: 70, ttfts: [100], peak: 800 });
    writeRun(path.join(dir, 'round3'), 'llama-server', { wall: 100, ttfts: [100], peak: 1000 });
    const { status, json } = rounds(dir);
    assert.equal(status, 0);
    const c = json.configurations.lineage;
    assert.equal(c.per_round[1].ratios.wall, null);
    assert.equal(c.median.wall, 0.65);
  });

  it('fails with a reason when there are no rounds or no reference', () => {
    const empty = tmp();
    let r = rounds(empty);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /no round1, round2/);
    const noRef = tmp();
    writeRun(path.join(noRef, 'round1'), 'lineage', { wall: 60, ttfts: [100], peak: 800 });
    r = rounds(noRef);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /the reference llama-server ran in no round/);
  });
});
