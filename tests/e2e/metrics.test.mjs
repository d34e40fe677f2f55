// The operator interface over HTTP, for the tiny hybrid (qwen35) and tiny dense (qwen3) models:
//  - GET /metrics (--metrics) passes `promtool check metrics` (Debian package prometheus;
//    scripts/bootstrap installs it), has the Prometheus text content type, and its counters move
//    by exactly what the responses report: a cold turn is one miss and prefills every prompt
//    token; a verbatim resend is one hit of the expected restore point kind that reuses exactly
//    usage.cached_tokens; a next turn is one more hit; requests, prompt and completion token
//    counters and the TTFT histogram count every request; GET /v1/cache/stats lists every hit
//    kind, miss cause and reason (0 included) with exactly /metrics' label values and counts;
//  - --cache-trace logs "cache-trace:" lines for each decision: the miss, the stored entry, the
//    restore point of a hit, and "template_sig differs (kwargs)" for a hit whose entry was
//    rendered under other template inputs (template_sig is not a bucket dimension: it restores);
//  - the work of preparing a prompt: a first turn on a new system prompt renders the anchor too
//    (3 renders, 2 tokenizations with the tiny models' template), a warm user turn renders and
//    tokenizes its conversation once (its content a string or text parts), as the trace's
//    "prepared:" line, GET /v1/cache/stats `prepare` and lineage_prepare_*_total say (the
//    warm-up's are counted apart: warmup.test.mjs);
//  - without --metrics, GET /metrics is a 404 in the OpenAI error shape naming the flag, and
//    without --cache-trace no "cache-trace:" line is logged.
//
//   cd tests/e2e && node --test metrics.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';

import { echo, greedyChat, usageOf, words } from './lib/chat.mjs';
import { GEN } from './lib/scenario.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const MAX_TOKENS = 8;
const SERVER_ARGS = ['--parallel', '2', '--ctx-size', '4096'];
const SYSTEM = `You are a careful software engineer working in a C++ repository.\n\n${words(120, 7)}`;
const TOOLS = [{
  type: 'function',
  function: { name: 'read_file', description: 'Read a file', parameters: { type: 'object', properties: { path: { type: 'string' } } } },
}];

/** Parses the text exposition format into {samples: Map('name{labels}' -> number), types: Map(name -> type)}. */
function parseMetrics(text) {
  const samples = new Map();
  const types = new Map();
  for (const line of text.split('\n')) {
    if (line.startsWith('# TYPE ')) {
      const [, , name, type] = line.split(' ');
      types.set(name, type);
    } else if (line && !line.startsWith('#')) {
      const i = line.lastIndexOf(' ');
      samples.set(line.slice(0, i), Number(line.slice(i + 1)));
    }
  }
  return { samples, types };
}

async function scrape(srv) {
  const r = await srv.get('/metrics');
  assert.equal(r.status, 200, r.text);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  return { text: r.text, ...parseMetrics(r.text) };
}

/** The value of one series; throws when the series is missing. */
function val(m, series) {
  assert.ok(m.samples.has(series), `series ${series} missing from /metrics`);
  return m.samples.get(series);
}

/** after - before for every listed series. */
function deltas(before, afterM, series) {
  return Object.fromEntries(series.map((s) => [s, val(afterM, s) - val(before, s)]));
}

function promtool(text) {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (r.error?.code === 'ENOENT') {
    throw new Error('promtool not found: install the Debian package prometheus (scripts/bootstrap does)');
  }
  return r;
}

const chat = greedyChat(MAX_TOKENS);
/** The "prepared: renders R, tokenizations T" trace lines of requests (not warm-ups) in `trace`. */
function preparedOf(trace) {
  return trace.map((l) => l.match(/cache-trace: request \d+: prepared: renders (\d+), tokenizations (\d+)$/))
    .filter(Boolean).map((m) => ({ renders: Number(m[1]), tokenizations: Number(m[2]) }));
}

const PREPARE_SERIES = ['lineage_prepare_renders_total{origin="request"}', 'lineage_prepare_renders_total{origin="warmup"}',
  'lineage_prepare_tokenizations_total{origin="request"}', 'lineage_prepare_tokenizations_total{origin="warmup"}'];

/** Log lines printed since `mark` (a character offset into the log) that contain "cache-trace:". */
function traceSince(srv, mark) {
  return srv.log().slice(mark).split('\n').filter((l) => l.includes('cache-trace:'));
}

const COUNTERS = [
  'lineage_prompt_cache_lookups_total',
  'lineage_prompt_cache_hits_total',
  'lineage_prompt_cache_misses_total',
  'lineage_prompt_cache_prefix_tokens_reused_total',
  'lineage_prompt_tokens_total',
  'lineage_prompt_tokens_prefilled_total',
  'lineage_completion_tokens_total',
  'lineage_requests_total{finish_reason="stop"}',
  'lineage_requests_total{finish_reason="length"}',
  'lineage_time_to_first_token_seconds_count',
];

for (const arch of ARCHS) {
  describe(`metrics and decision trace [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({
        model: modelPath(arch), name: `metrics-${arch}`, args: [...SERVER_ARGS, '--metrics', '--cache-trace'],
      });
    });
    after(async () => { await srv?.stopGracefully(); });

    it('counters move by exactly what the responses report; promtool accepts the output', async () => {
      const hybrid = (await srv.cacheStats()).family === 'hybrid';
      const m0 = await scrape(srv);
      for (const s of [...COUNTERS, ...PREPARE_SERIES]) assert.equal(val(m0, s), 0, `${s} on a fresh server`);
      // A fresh server's stats list every kind, cause and reason at 0, as /metrics does.
      const s0 = await srv.cacheStats();
      assert.deepEqual([s0.prepare, s0.warmup.renders, s0.warmup.tokenizations], [{ renders: 0, tokenizations: 0 }, 0, 0]);
      const zeros = (...keys) => Object.fromEntries(keys.map((k) => [k, 0]));
      const causes = zeros('no_shared_prefix', 'below_min_prefix', 'key_differs', 'before_first_restore_point', 'evicted', 'bypassed');
      assert.deepEqual({ hits: s0.hits, misses_by_cause: s0.misses_by_cause, short_hits_by_cause: s0.short_hits_by_cause,
        key_differs: s0.key_differs, evictions: s0.evictions, rejections: s0.rejections, disk_damage: s0.disk.damage,
        redis_damage: s0.redis.damage, warmup_skipped: s0.warmup.skipped }, {
        hits: zeros('full', 'prefix', 'turn', 'guard', 'anchor', 'divergence', 'ladder', 'message', 'reply'),
        misses_by_cause: causes,
        short_hits_by_cause: causes,
        key_differs: zeros('tenant', 'model_id', 'lora_id', 'rope_regime', 'mm_digest', 'kv_type'),
        evictions: zeros('lru', 'ttl', 'capacity', 'superseded', 'anchor_cap', 'released'),
        rejections: zeros('too_large', 'budget', 'min_prefix', 'disabled', 'anchor_too_large', 'abandoned', 'disk_damaged', 'redis_failed', 'not_admitted'),
        disk_damage: zeros('corrupt', 'truncated', 'bad_magic', 'identity', 'not_regular', 'index_row', 'index'),
        redis_damage: zeros('corrupt', 'truncated', 'bad_magic', 'identity', 'other_format', 'index', 'counter', 'wrong_type', 'too_large'),
        warmup_skipped: zeros('not_needed', 'replaced', 'queue_full', 'preempted_too_often', 'superseded', 'reset'),
      });
      const captureKinds = zeros('anchor', 'turn', 'guard', 'divergence', 'ladder', 'message', 'reply');
      assert.deepEqual([s0.tokens_restored, s0.captures, s0.capture_splits, s0.capture_bytes],
        [zeros('full', 'prefix', 'turn', 'guard', 'anchor', 'divergence', 'ladder', 'message', 'reply'),
          captureKinds, captureKinds, captureKinds]);

      // Turn 1: cold.
      const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: words(30, 11) }];
      let mark = srv.log().length;
      const r1 = await chat(srv, messages, {}, 'turn 1');
      const u1 = usageOf(r1);
      assert.equal(u1.cached, 0);
      const m1 = await scrape(srv);
      assert.deepEqual(deltas(m0, m1, COUNTERS), {
        lineage_prompt_cache_lookups_total: 1,
        lineage_prompt_cache_hits_total: 0,
        lineage_prompt_cache_misses_total: 1,
        lineage_prompt_cache_prefix_tokens_reused_total: 0,
        lineage_prompt_tokens_total: u1.prompt,
        lineage_prompt_tokens_prefilled_total: u1.prompt,
        lineage_completion_tokens_total: u1.completion,
        'lineage_requests_total{finish_reason="stop"}': r1.choices[0].finish_reason === 'stop' ? 1 : 0,
        'lineage_requests_total{finish_reason="length"}': r1.choices[0].finish_reason === 'length' ? 1 : 0,
        lineage_time_to_first_token_seconds_count: 1,
      });
      // Forward passes: the prompt is under --batch-size, so every pass but the last one ends at
      // a restore point the cache captures (a split). A hybrid splits at its checkpoints (the
      // anchor, the history boundary; the resend guard merged into it); a dense model restores any prefix of a
      // stored KV and splits only to pin the new system prompt's anchor (a separate entry). The
      // counters move by what the response's timings say.
      const SPLITS = ['turn', 'guard', 'anchor', 'divergence', 'ladder', 'message'];
      const splitSeries = SPLITS.map((k) => `lineage_prefill_splits_total{kind="${k}"}`);
      const t1 = r1.timings;
      assert.equal(t1.prefill_passes, t1.prefill_splits + 1, JSON.stringify(t1));
      const dp1 = deltas(m0, m1, ['lineage_prefill_passes_total', ...splitSeries]);
      if (hybrid) assert.ok(t1.prefill_splits >= 2, `a cold hybrid turn captures checkpoints: ${JSON.stringify(t1)}`);
      else assert.deepEqual([t1.prefill_splits, dp1['lineage_prefill_splits_total{kind="anchor"}']], [1, 1], JSON.stringify(t1));
      assert.equal(dp1.lineage_prefill_passes_total, t1.prefill_passes);
      assert.equal(splitSeries.reduce((a, s) => a + dp1[s], 0), t1.prefill_splits);
      const st1 = await srv.cacheStats();
      const p1 = st1.prefill;
      assert.deepEqual(p1, { passes: t1.prefill_passes,
        splits: Object.fromEntries(SPLITS.map((k, i) => [k, dp1[splitSeries[i]]])) });
      // What the restore points cost (docs/prompt-cache.md "What a restore point costs"): every
      // split of the cold turn captured the point it stopped at (nothing was short of RAM).
      for (const k of SPLITS) {
        assert.equal(st1.capture_splits[k], dp1[`lineage_prefill_splits_total{kind="${k}"}`], `capture_splits.${k}`);
        assert.ok(st1.captures[k] >= st1.capture_splits[k], `captures.${k}`);
        assert.equal(st1.capture_bytes[k] > 0, st1.captures[k] > 0, `capture_bytes.${k}`);
      }
      if (hybrid) assert.ok(st1.capture_splits.turn >= 1, JSON.stringify(st1.capture_splits));
      let trace = traceSince(srv, mark);
      assert.ok(trace.some((l) => new RegExp(`cache-trace: request \\d+: lookup of ${u1.prompt} tokens .*: miss; miss cause: no_shared_prefix$`).test(l)),
        `no miss line in the trace:\n${trace.join('\n')}`);
      assert.equal(val(m1, 'lineage_prompt_cache_misses_by_cause_total{cause="no_shared_prefix"}') -
        val(m0, 'lineage_prompt_cache_misses_by_cause_total{cause="no_shared_prefix"}'), 1, 'a new prompt: no_shared_prefix');
      // The entry: everything decoded (the last sampled token of a reply cut by max_tokens was
      // never decoded; a hybrid keeps its prompt end as a checkpoint, --cache-keep-reply).
      const stored = u1.prompt + u1.completion - (r1.choices[0].finish_reason === 'length' ? 1 : 0);
      assert.ok(trace.some((l) => new RegExp(`stored entry \\d+: ${stored} tokens`).test(l)),
        `no stored-entry line for ${stored} tokens in the trace:\n${trace.join('\n')}`);

      // Verbatim resend: one hit, all but one token restored; a hybrid restores the history
      // boundary, the generation prompt's GEN tokens back (the prompt - 1 guard merged into it:
      // --cache-guard-merge).
      mark = srv.log().length;
      const r2 = await chat(srv, messages, {}, 'resend');
      const u2 = usageOf(r2);
      assert.equal(u2.cached, u2.prompt - (hybrid ? GEN : 1), 'a verbatim resend restores all but the last tokens');
      const m2 = await scrape(srv);
      const kind = hybrid ? 'turn' : 'prefix';
      const d2 = deltas(m1, m2, [...COUNTERS, `lineage_prompt_cache_restore_point_hits_total{kind="${kind}"}`,
        'lineage_request_restore_seconds_count']);
      assert.equal(d2.lineage_prompt_cache_hits_total, 1);
      assert.equal(d2.lineage_prompt_cache_misses_total, 0);
      assert.equal(d2[`lineage_prompt_cache_restore_point_hits_total{kind="${kind}"}`], 1);
      assert.equal(d2.lineage_prompt_cache_prefix_tokens_reused_total, u2.cached);
      assert.equal(d2.lineage_prompt_tokens_prefilled_total, u2.prompt - u2.cached);
      assert.equal(d2.lineage_request_restore_seconds_count, 1);
      // The resend computes its last token alone: one pass, no split.
      assert.deepEqual([r2.timings.prefill_passes, r2.timings.prefill_splits], [1, 0]);
      trace = traceSince(srv, mark);
      assert.ok(trace.some((l) => l.includes(`restore ${kind} at ${u2.cached}/${u2.prompt} from entry`)),
        `no restore line in the trace:\n${trace.join('\n')}`);

      // Next turn: one more hit, reusing exactly what usage reports.
      messages.push(echo(r2.choices[0].message), { role: 'user', content: words(12, 12) });
      const r3 = await chat(srv, messages, {}, 'turn 2');
      const u3 = usageOf(r3);
      assert.ok(u3.cached > 0, 'the next turn reuses the conversation');
      const m3 = await scrape(srv);
      const d3 = deltas(m2, m3, COUNTERS);
      assert.equal(d3.lineage_prompt_cache_hits_total, 1);
      assert.equal(d3.lineage_prompt_cache_prefix_tokens_reused_total, u3.cached);
      assert.equal(d3.lineage_prompt_tokens_prefilled_total, u3.prompt - u3.cached);
      let kinds = 0;
      for (const k of ['full', 'prefix', 'turn', 'guard', 'anchor', 'divergence', 'ladder']) {
        kinds += val(m3, `lineage_prompt_cache_restore_point_hits_total{kind="${k}"}`);
      }
      assert.equal(kinds, val(m3, 'lineage_prompt_cache_hits_total'), 'hits by kind add up to the hits');

      // Gauges agree with /v1/cache/stats.
      const stats = await srv.cacheStats();
      const m4 = await scrape(srv);
      assert.equal(val(m4, 'lineage_prompt_cache_entries'), stats.entries);
      assert.equal(val(m4, 'lineage_prompt_cache_anchors'), stats.anchors);
      assert.equal(val(m4, 'lineage_prompt_cache_tier_bytes{tier="ram"}'), stats.bytes.ram);
      assert.equal(val(m4, 'lineage_prompt_cache_tier_bytes{tier="device"}'), stats.bytes.device);
      assert.equal(val(m4, 'lineage_prompt_cache_bytes'), stats.bytes.ram + stats.bytes.device);
      assert.equal(val(m4, 'lineage_prompt_cache_anchor_bytes'), stats.anchor_bytes);
      // Each counter map of the stats has exactly the label values of its /metrics family, and
      // the same counts (hits by kind: one miss, then two hits).
      const family = (name) => Object.fromEntries([...m4.samples].filter(([k]) => k.startsWith(`${name}{`))
        .map(([k, v]) => [k.slice(k.indexOf('"') + 1, -2), v]));
      for (const [got, name] of [[stats.hits, 'restore_point_hits_total'], [stats.misses_by_cause, 'misses_by_cause_total'],
        [stats.short_hits_by_cause, 'short_hits_by_cause_total'], [stats.key_differs, 'key_differs_total'],
        [stats.evictions, 'evictions_total'], [stats.rejections, 'rejections_total'], [stats.disk.damage, 'disk_damaged_total'],
        [stats.redis.damage, 'redis_damaged_total'], [stats.warmup.skipped, 'warmup_skipped_total']]) {
        assert.deepEqual(got, family(`lineage_prompt_cache_${name}`), name);
      }
      assert.equal(Object.values(stats.hits).reduce((a, b) => a + b, 0), 2, JSON.stringify(stats.hits));
      for (const [got, name] of [[stats.tokens_restored, 'restore_point_tokens_total'], [stats.captures, 'captures_total'],
        [stats.capture_splits, 'capture_splits_total'], [stats.capture_bytes, 'capture_bytes_total']]) {
        assert.deepEqual(got, family(`lineage_prompt_cache_${name}`), name);
      }
      // The tokens restored by kind: the resend's and the next turn's, all they reused.
      assert.equal(stats.tokens_restored[kind], stats.hits[kind] === 2 ? u2.cached + u3.cached : u2.cached,
        JSON.stringify(stats.tokens_restored));
      assert.equal(Object.values(stats.tokens_restored).reduce((a, b) => a + b, 0), u2.cached + u3.cached);
      assert.equal(stats.misses_by_cause.no_shared_prefix, 1, JSON.stringify(stats.misses_by_cause));

      // Histograms: cumulative buckets, +Inf == count.
      for (const [name, type] of m4.types) {
        if (type !== 'histogram') continue;
        const buckets = [...m4.samples].filter(([s]) => s.startsWith(`${name}_bucket{`)).map(([, v]) => v);
        assert.ok(buckets.length >= 2, name);
        for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i] >= buckets[i - 1], `${name} buckets descend`);
        assert.equal(val(m4, `${name}_bucket{le="+Inf"}`), val(m4, `${name}_count`), name);
      }

      const check = promtool(m4.text);
      assert.equal(check.status, 0, `promtool check metrics failed:\n${check.stdout}${check.stderr}\n${m4.text}`);
      assert.equal((check.stdout + check.stderr).trim(), '', `promtool lint:\n${check.stdout}${check.stderr}`);
    });

    it('a warm user turn renders and tokenizes its conversation once; a first turn on a new system prompt also renders the anchor', async () => {
      const messages = [{ role: 'system', content: `A third persona.\n\n${words(100, 31)}` }, { role: 'user', content: words(20, 32) }];
      // One turn: its trace line, and the stats and /metrics counters moved by the same figures.
      const turn = async (what) => {
        const s0 = await srv.cacheStats();
        const m0 = await scrape(srv);
        const mark = srv.log().length;
        const res = await chat(srv, messages, {}, what);
        const lines = preparedOf(traceSince(srv, mark));
        assert.equal(lines.length, 1, `${what}: one prepared line:\n${traceSince(srv, mark).join('\n')}`);
        const s1 = await srv.cacheStats();
        const m1 = await scrape(srv);
        assert.deepEqual({ renders: s1.prepare.renders - s0.prepare.renders,
          tokenizations: s1.prepare.tokenizations - s0.prepare.tokenizations }, lines[0], `${what}: stats vs trace`);
        const d = deltas(m0, m1, PREPARE_SERIES);
        assert.deepEqual([d[PREPARE_SERIES[0]], d[PREPARE_SERIES[2]]], [lines[0].renders, lines[0].tokenizations],
          `${what}: /metrics vs trace`);
        return { res, work: lines[0], before: s0 };
      };

      // A new system prompt: the main render, and the anchor's memo miss (the template refuses the
      // system prompt alone, so a refused render and one with a placeholder user turn).
      const t1 = await turn('turn 1');
      assert.ok(t1.work.renders > 1, `the first turn renders the anchor: ${JSON.stringify(t1.work)}`);
      assert.deepEqual(t1.work, { renders: 3, tokenizations: 2 });

      // The next user turn: the anchor is in the memo, the last user message's start is found in
      // the render (hybrid): once each.
      messages.push(echo(t1.res.choices[0].message), { role: 'user', content: words(12, 33) });
      const t2 = await turn('turn 2');
      assert.deepEqual(t2.work, { renders: 1, tokenizations: 1 });
      assert.ok(usageOf(t2.res).cached > 0, 'the warm turn restores the conversation');
      // Its message as text parts (Responses input_text, several Anthropic text blocks): once too.
      messages.push(echo(t2.res.choices[0].message), { role: 'user', content: [
        { type: 'text', text: '<system-reminder>\nThe date is 2026-12-01.\n</system-reminder>' },
        { type: 'text', text: words(9, 34) }] });
      const t3 = await turn('turn 3');
      assert.deepEqual(t3.work, { renders: 1, tokenizations: 1 });
    });

    it('a request under other template inputs restores the tokens it shares, and the trace says what changed', async () => {
      // Another chat_template_kwargs entry that renders the same tokens: template_sig differs
      // (kwargs), but it is not a bucket dimension (the state of a token sequence does not depend
      // on what rendered it), so the second request restores all but one token of the first
      // (a hybrid: all but the generation prompt, where its history boundary is).
      const messages = [{ role: 'system', content: `Another persona.\n\n${words(140, 21)}` }, { role: 'user', content: words(30, 22) }];
      const first = await chat(srv, messages, {}, 'default kwargs');
      assert.equal(usageOf(first).cached, 0, 'a new system prompt is a miss');
      const before = await srv.cacheStats();
      const m0 = await scrape(srv);
      const mark = srv.log().length;
      const r = await chat(srv, messages, { chat_template_kwargs: { add_vision_id: false } }, 'other kwargs');
      const u = usageOf(r);
      assert.equal(u.prompt, usageOf(first).prompt, 'the same tokens');
      const hybrid = (await srv.cacheStats()).family === 'hybrid';
      assert.equal(u.cached, u.prompt - (hybrid ? GEN : 1), 'restores all but the last tokens across template_sig');
      const after = await srv.cacheStats();
      assert.equal(after.cross_template_hits - before.cross_template_hits, 1);
      assert.deepEqual(after.key_differs, before.key_differs, 'no key_differs: the bucket is the same');
      const m1 = await scrape(srv);
      assert.equal(val(m1, 'lineage_prompt_cache_cross_template_hits_total') - val(m0, 'lineage_prompt_cache_cross_template_hits_total'), 1);
      const trace = traceSince(srv, mark);
      assert.ok(trace.some((l) => /restore \w+ at \d+\/\d+ from entry \d+ \(.*rendered under another template: template_sig differs \(kwargs\)\)/.test(l)),
        `no cross-template restore line in the trace:\n${trace.join('\n')}`);
    });
  });
}

describe('metrics and trace off', { timeout: 120_000 }, () => {
  let srv;
  before(async () => {
    srv = await startServer({ model: modelPath(ARCHS[0]), name: `metrics-off-${ARCHS[0]}`, args: SERVER_ARGS });
  });
  after(async () => { await srv?.stopGracefully(); });

  it('GET /metrics is a 404 in the OpenAI error shape; no trace lines', async () => {
    const r = await srv.get('/metrics');
    assert.equal(r.status, 404);
    assert.equal(r.json?.error?.type, 'invalid_request_error');
    assert.equal(r.json?.error?.code, 'not_found');
    assert.match(r.json?.error?.message, /--metrics/);
    await chat(srv, [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'hello' }]);
    assert.ok(!srv.log().includes('cache-trace:'), 'cache-trace lines without --cache-trace');
  });
});
