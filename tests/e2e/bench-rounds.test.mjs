// tools/bench/rounds.mjs without a server: several rounds of scripts/bench (BENCH_TRACE_ROUNDS)
// read together give each round's ratios to llama-server and their medians, exactly; a round
// where a configuration is missing gives no ratio for it, and the median is over the others.
// tools/bench/summary.mjs oracleTtft (report.md's "What the oracle allows" line), exactly.
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
function writeRun(dir, name, { wall, ttfts, peak, promptMs = [] }) {
  fs.mkdirSync(dir, { recursive: true });
  const records = ttfts.map((t, i) => ({ i, kind: 'warm', ttft_ms: t, completion_tokens: 10, computed: 100, oracle: 50, prompt_tokens: 1000,
    server_prompt_ms: promptMs[i] ?? null }));
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

  it('gives what the oracle allows at the reference\'s speed, per round and the median', () => {
    const dir = tmp();
    // llama-server, 100 computed / 50 oracle tokens a request: TTFT 300 with 200 ms of prompt ->
    // 100 + 100 = 200; TTFT 150 with 60 -> 90 + max(60, 30) = 150 (the run's shortest prefill).
    // Round 1: estimates 200, 150 against TTFTs 300, 150: p50 175 / 225, p95 197.5 / 292.5.
    writeRun(path.join(dir, 'round1'), 'lineage', { wall: 50, ttfts: [100, 100], peak: 800 });
    writeRun(path.join(dir, 'round1'), 'llama-server', { wall: 100, ttfts: [300, 150], peak: 1000, promptMs: [200, 60] });
    // Round 2: no server prompt times: no estimate.
    writeRun(path.join(dir, 'round2'), 'lineage', { wall: 50, ttfts: [100], peak: 800 });
    writeRun(path.join(dir, 'round2'), 'llama-server', { wall: 100, ttfts: [200], peak: 1000 });
    const { status, json } = rounds(dir);
    assert.equal(status, 0);
    assert.deepEqual(json.oracle_allows.per_round, [
      { round: 'round1', ttft_p50: 0.7778, ttft_p95: 0.6752 },
      { round: 'round2', ttft_p50: null, ttft_p95: null },
    ]);
    assert.deepEqual(json.oracle_allows.median, { ttft_p50: 0.7778, ttft_p95: 0.6752 });
    assert.match(fs.readFileSync(path.join(dir, 'rounds.md'), 'utf8'), /\| \*\*median\*\* \| \*\*0\.78\*\* \| \*\*0\.68\*\* \|/);
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

describe('tools/bench/summary.mjs oracleTtft', () => {
  it('scales each request\'s prompt time to the oracle\'s tokens, at least the run\'s shortest prefill', async () => {
    const { oracleTtft } = await import(path.join(ROOT, 'tools/bench/summary.mjs'));
    const records = [
      { ttft_ms: 300, server_prompt_ms: 200, computed: 100, oracle: 50 }, // 100 + 200 * 50 / 100 = 200
      { ttft_ms: 60, server_prompt_ms: 40, computed: 2, oracle: 1 }, // 20 + max(40, 20) = 60: one pass at least
      { ttft_ms: 500, dropped: true, server_prompt_ms: null, computed: null, oracle: 30 }, // no server figures: 500
      { ttft_ms: 1000, server_prompt_ms: 900, computed: 900, oracle: 0 }, // 100 + 40 (the shortest prefill)
      { ttft_ms: null, server_prompt_ms: null, computed: null, oracle: null }, // no TTFT: left out
    ];
    // Estimates 200, 60, 500, 140: p50 (140 + 200) / 2 = 170; p95 at rank 2.85: 200 + 0.85 * 300 = 455.
    assert.deepEqual(oracleTtft(records), { p50: 170, p95: 455, pass_ms: 40 });
    assert.equal(oracleTtft([{ ttft_ms: 100, server_prompt_ms: null, computed: null, oracle: 1 }]), null);
  });
});
