// scripts/device-check's verdict and flags, without a server: tools/bench/check.mjs passes a
// whole run and names every gap of an incomplete one (a request not served, a failed one, a
// missing raw-engine part, a ratio that is not a number), and --help documents every flag the
// script parses. The run itself (tiny model, both servers) is a stage of scripts/test.
//
//   cd tests/e2e && node --test device-check.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CHECK = path.join(ROOT, 'tools/bench/check.mjs');
const SCRIPT = path.join(ROOT, 'scripts/device-check');

const made = [];
after(() => { for (const d of made) fs.rmSync(d, { recursive: true, force: true }); });
const tmpDir = () => { const d = fs.mkdtempSync(path.join(os.tmpdir(), 'device-check-test-')); made.push(d); return d; };

const run = (name, wall, computed, p50) => ({ name, run_seconds: wall, requests: 14, failures: 0, parse_errors_kept: 0,
  trace: { total_requests: 14 }, ttft: { all: { p50, p95: 2 * p50 } }, efficiency: { all: { computed, ratio: 1, prompt: 9000 } } });
const engine = (tok) => ({ streams: 2, decode_1: { client_tok_s: tok }, decode_n: { aggregate_tok_s: 2 * tok },
  prefill: [{ target: 3000, server_tok_s: 10 * tok, prompt_tokens: 2662 }] });

/** A run directory as scripts/bench writes it for lineage and llama-server; `edit` changes it. */
function fakeRun(edit = () => {}) {
  const dir = tmpDir();
  const files = {
    'report.md': '# report\n',
    'results.json': [run('lineage', 10, 1000, 100), run('llama-server', 20, 4000, 50)],
    'lineage.engine.json': engine(100),
    'llama-server.engine.json': engine(400),
  };
  edit(files);
  for (const [f, v] of Object.entries(files)) {
    if (v !== undefined) fs.writeFileSync(path.join(dir, f), typeof v === 'string' ? v : JSON.stringify(v));
  }
  return dir;
}

/** A run of three trace rounds (BENCH_TRACE_ROUNDS=3): roundK/results.json each, rounds.md and the
 *  raw-engine part at the top. Lineage's wall times 10, 12 and 30 s against 20 s: ratios 0.5, 0.6
 *  and 1.5, median 0.6; `edit(files)` changes it (keys "roundK/results.json", ...). */
function fakeRounds(edit = () => {}) {
  const dir = tmpDir();
  const files = {
    'rounds.md': '# rounds\n',
    'round1/results.json': [run('lineage', 10, 1000, 100), run('llama-server', 20, 4000, 50)],
    'round2/results.json': [run('llama-server', 20, 4000, 50), run('lineage', 12, 1000, 60)],
    'round3/results.json': [run('lineage', 30, 2000, 200), run('llama-server', 20, 4000, 100)],
    'lineage.engine.json': engine(100),
    'llama-server.engine.json': engine(400),
  };
  edit(files);
  for (const [f, v] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, f)), { recursive: true });  // scripts/bench makes a round's folder first
    if (v === undefined) continue;
    fs.writeFileSync(path.join(dir, f), typeof v === 'string' ? v : JSON.stringify(v));
  }
  return dir;
}

function check(dir) {
  const r = spawnSync(process.execPath, [CHECK, dir, '--assert'], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout, verdict: JSON.parse(fs.readFileSync(path.join(dir, 'device-check.json'), 'utf8')) };
}

describe('tools/bench/check.mjs --assert', () => {
  it('passes a whole run and writes the ratios lineage / llama-server', () => {
    const { status, verdict } = check(fakeRun());
    assert.equal(status, 0);
    assert.deepEqual(verdict.problems, []);
    assert.deepEqual(verdict.ratios, { trace_wall_time: 0.5, ttft_p50: 2, ttft_p95: 2, prefill_computed_tokens: 0.25,
      decode_1_tok_s: 0.25, decode_2_aggregate_tok_s: 0.25, prefill_3000_tok_s: 0.25 });
    assert.deepEqual(verdict.served.lineage, { planned: 14, requests: 14, failures: 0, parse_errors_kept: 0 });
  });

  it('names each gap of an incomplete run and exits 1', () => {
    const dir = fakeRun((f) => {
      f['report.md'] = undefined;
      f['results.json'][1].requests = 13;
      f['results.json'][1].failures = 1;
      f['results.json'][0].ttft.all.p50 = null;
      f['llama-server.engine.json'] = undefined;
    });
    const { status, verdict } = check(dir);
    assert.equal(status, 1);
    assert.deepEqual(verdict.problems, [
      'report.md is missing',
      'llama-server: 13 of 14 planned requests recorded',
      'llama-server: 1 failed requests (see llama-server.driver.log)',
      'ratio ttft_p50 is not a number (lineage null, llama-server 50)',
      'llama-server: no raw-engine results (llama-server.engine.json; see engine.log)',
    ]);
  });

  it('reads rounds: each trace ratio is the median of the rounds', () => {
    const { status, verdict, out } = check(fakeRounds());
    assert.equal(status, 0, out);
    assert.deepEqual(verdict.problems, []);
    assert.deepEqual(verdict.rounds, ['round1', 'round2', 'round3']);
    assert.deepEqual(verdict.trace_ratios_by_round, {
      trace_wall_time: [0.5, 0.6, 1.5], ttft_p50: [2, 1.2, 2], ttft_p95: [2, 1.2, 2],
      prefill_computed_tokens: [0.25, 0.25, 0.5],
    });
    assert.deepEqual(verdict.ratios, { trace_wall_time: 0.6, ttft_p50: 2, ttft_p95: 2, prefill_computed_tokens: 0.25,
      decode_1_tok_s: 0.25, decode_2_aggregate_tok_s: 0.25, prefill_3000_tok_s: 0.25 });
    // Each server's figures: its median round by wall time (lineage's 12 s round, round 2).
    assert.equal(verdict.figures.lineage.trace_wall_time_s, 12);
    assert.equal(verdict.figures.lineage.ttft_p50_ms, 60);
    assert.deepEqual(Object.keys(verdict.served.lineage.rounds), ['round1', 'round2', 'round3']);
    assert.match(out, /the median over 3 finished of 3 rounds/);
  });

  it('names the round of each gap, and a missing rounds.md; the finished rounds still give medians', () => {
    const dir = fakeRounds((f) => {
      f['rounds.md'] = undefined;
      f['round2/results.json'][1].failures = 2;
      f['round3/results.json'] = undefined;
    });
    const { status, verdict } = check(dir);
    assert.equal(status, 1);
    assert.deepEqual(verdict.trace_ratios_by_round.trace_wall_time, [0.5, 0.6, null]);
    assert.equal(verdict.ratios.trace_wall_time, 0.55);  // the median of rounds 1 and 2
    assert.deepEqual(verdict.problems, [
      'rounds.md is missing',
      'round2: lineage: 2 failed requests (see lineage.driver.log)',
      'round3: lineage: no trace results (lineage.summary.json / results.json)',
      'round3: llama-server: no trace results (llama-server.summary.json / results.json)',
    ]);
  });

  it('takes the raw-engine ratios from paired runs where the servers alternated', () => {
    // Run k of lineage beside run k of llama-server: decode 90/100, 110/100, 100/125 (median 0.9);
    // the best runs alone would give 110 / 125 = 0.88.
    const runs = (xs) => xs.map((x) => ({ client_tok_s: x, aggregate_tok_s: 2 * x, server_tok_s: 10 * x }));
    const interleaved = (xs, other) => ({ ...engine(Math.max(...xs)), interleaved_with: [other],
      decode_1: { client_tok_s: Math.max(...xs), runs: runs(xs) },
      decode_n: { aggregate_tok_s: 2 * Math.max(...xs), runs: runs(xs) },
      prefill: [{ target: 3000, server_tok_s: 10 * Math.max(...xs), prompt_tokens: 2662, runs: runs(xs) }] });
    const { status, verdict } = check(fakeRun((f) => {
      f['lineage.engine.json'] = interleaved([90, 110, 100], 'llama-server');
      f['llama-server.engine.json'] = interleaved([100, 100, 125], 'lineage');
    }));
    assert.equal(status, 0);
    assert.equal(verdict.ratios.decode_1_tok_s, 0.9);
    assert.equal(verdict.ratios.decode_2_aggregate_tok_s, 0.9);
    assert.equal(verdict.ratios.prefill_3000_tok_s, 0.9);
    assert.equal(verdict.engine_best_run_ratios.decode_1_tok_s, 0.88);
    // Without interleaved_with the same files give the best runs' ratio, and no paired figures.
    const plain = check(fakeRun((f) => {
      f['lineage.engine.json'] = { ...interleaved([90, 110, 100], 'x'), interleaved_with: undefined };
      f['llama-server.engine.json'] = interleaved([100, 100, 125], 'lineage');
    })).verdict;
    assert.equal(plain.ratios.decode_1_tok_s, 0.88);
    assert.equal(plain.engine_best_run_ratios, undefined);
  });

  it('fails a run with no trace results at all', () => {
    const { status, verdict } = check(fakeRun((f) => { f['results.json'] = undefined; }));
    assert.equal(status, 1);
    assert.ok(verdict.problems.includes('lineage: no trace results (lineage.summary.json / results.json)'));
  });
});

describe('scripts/device-check', () => {
  it('--help documents every flag the script parses', () => {
    const help = spawnSync(SCRIPT, ['--help'], { encoding: 'utf8' });
    assert.equal(help.status, 0);
    const source = fs.readFileSync(SCRIPT, 'utf8');
    const parsed = [...source.matchAll(/^ {4}(--[a-z-]+)\)/gm)].map((m) => m[1]);
    assert.deepEqual(parsed, ['--size', '--out', '--budget-s', '--model', '--build-only']);
    for (const flag of parsed) assert.match(help.stdout, new RegExp(`^  ${flag}\\b`, 'm'), `${flag} is not in --help`);
  });

  it('refuses an unknown size before building or running anything', () => {
    const r = spawnSync(SCRIPT, ['--size', 'huge', '--out', tmpDir()], { encoding: 'utf8' });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /--size must be tiny, bench or device, got huge/);
  });
});
