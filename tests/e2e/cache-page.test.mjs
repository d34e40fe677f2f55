// The cache page (GET /cache, docs/prompt-cache.md "Cache page") in a real browser: Debian's
// chromium driven by playwright-core. A multi-turn conversation and an unrelated prompt run on the
// tiny hybrid model; the page, refreshing itself, must then show exactly what GET /v1/cache/stats
// reports (entries, anchors, hits, misses, tokens restored, bytes per tier and the RAM budget), one
// row per entry with every restore point GET /v1/cache/entries lists, and the last requests with
// the restored and computed tokens their responses reported. With keys: no key or a wrong one gets
// 401 (with a Basic challenge, so a browser asks), a tenant's key shows that tenant's cache alone,
// the admin key everything; --cache-page=false turns the page off (404). A screenshot is kept in
// build/e2e-logs/cache-page.png (and in docs/cache-page.png with LINEAGE_SCREENSHOT_DOCS=1).
//
// Chromium comes from scripts/bootstrap (apt-get install chromium); where it could not be
// installed the suite is skipped with that reason. LINEAGE_CHROMIUM names another binary.
//
//   cd tests/e2e && node --test cache-page.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { words } from './lib/chat.mjs';
import { LOG_DIR, REPO_ROOT, modelPath, startServer } from './lib/server.mjs';

const CHROMIUM = [process.env.LINEAGE_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser']
  .find((p) => p && fs.existsSync(p));
let playwright = null;
try {
  playwright = await import('playwright-core');
} catch { /* reported by SKIP */ }
const SKIP = !CHROMIUM ? 'chromium is not installed (scripts/bootstrap installs Debian\'s chromium; it could not here)'
  : !playwright ? 'playwright-core is not installed: run npm install in tests/e2e (scripts/bootstrap does)' : false;

const ARCH = 'qwen35';
const SYSTEM = `You are a coding assistant working in a repository of a build tool. ${words(120, 21)}`;
const KEYS = { alice: 'sk-page-alice-0123', bob: 'sk-page-bob-0123', admin: 'sk-page-admin-0123' };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const cachedOf = (res) => res.usage.prompt_tokens_details?.cached_tokens ?? 0;
const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);
const basic = (key) => `Basic ${Buffer.from(`operator:${key}`).toString('base64')}`;

async function getJson(url, headers = {}) {
  const r = await fetch(url, { headers });
  const text = await r.text();
  assert.equal(r.status, 200, `${url}: ${r.status} ${text}`);
  return JSON.parse(text);
}

/** A three-turn conversation under one session, then one unrelated prompt; returns each
 *  response's {prompt, cached}. */
async function conversation(client, session, seed) {
  const out = [];
  const messages = [{ role: 'system', content: SYSTEM }];
  for (let turn = 0; turn < 3; turn++) {
    messages.push({ role: 'user', content: `Turn ${turn}: ${words(30, seed + turn)}` });
    const res = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 6, temperature: 0,
      prompt_cache_key: session });
    out.push({ prompt: res.usage.prompt_tokens, cached: cachedOf(res) });
    messages.push({ role: 'assistant', content: res.choices[0].message.content ?? '' });
  }
  const res = await client.chat.completions.create({ model: 'tiny', max_tokens: 4, temperature: 0,
    messages: [{ role: 'user', content: `Unrelated: ${words(40, seed + 100)}` }] });
  out.push({ prompt: res.usage.prompt_tokens, cached: cachedOf(res) });
  return out;
}

/** What the page shows now: its cards, tiers, entry rows and request rows. */
async function readPage(page) {
  return page.evaluate(() => {
    const num = (id) => Number(document.getElementById(id).dataset.value);
    const tier = (name) => {
      const row = document.getElementById(`tier-${name}`);
      if (!row) return null;
      const used = row.querySelector('.used');
      return { shown: Number(used.textContent.replaceAll(',', '')), bytes: Number(used.dataset.bytes),
        budget: Number(row.dataset.budget) };
    };
    return {
      generation: Number(document.body.dataset.generation),
      status: document.getElementById('status').textContent,
      entries: num('n-entries'), anchors: num('n-anchors'), points: num('n-points'),
      hits: num('n-hits'), misses: num('n-misses'), reused: num('n-reused'),
      shownEntries: document.getElementById('n-entries').textContent,
      device: tier('device'), ram: tier('ram'), disk: tier('disk'),
      rows: [...document.querySelectorAll('#entries .entry')].map((e) => ({ id: Number(e.dataset.id),
        tokens: Number(e.dataset.tokens),
        marks: [...e.querySelectorAll('[data-kind]')].map((m) => `${m.dataset.kind}@${m.dataset.tokens}`) })),
      requests: [...document.querySelectorAll('#requests tbody tr[data-id]')].map((r) => ({
        id: Number(r.dataset.id),
        prompt: Number(r.querySelector('.prompt').textContent.replaceAll(',', '')),
        restored: Number(r.querySelector('.restored').textContent.replaceAll(',', '')),
        computed: Number(r.querySelector('.computed').textContent.replaceAll(',', '')),
        ttft: Number(r.querySelector('.ttft').textContent), hit: r.querySelector('.hit').textContent })),
      legend: Object.fromEntries([...document.querySelectorAll('#chart-legend [data-series]')]
        .map((s) => [s.dataset.series, Number(s.querySelector('.n').textContent.replaceAll(',', ''))])),
    };
  });
}

/** Waits for a page refresh that began after `since` (a generation seen before the JSON was
 *  read), then reads it. */
async function freshPage(page, since) {
  await page.waitForFunction((g) => Number(document.body.dataset.generation) > g + 1, since, { timeout: 20_000 });
  return readPage(page);
}

/** The JSON and the page at one moment: retried until GET /v1/cache/stats is the same before and
 *  after the page's refresh (a write behind to disk may land in between). */
async function consistent(page, url, headers = {}) {
  for (let attempt = 0; attempt < 10; attempt++) {
    const since = Number(await page.evaluate(() => document.body.dataset.generation));
    const stats = await getJson(`${url}/v1/cache/stats`, headers);
    const entries = await getJson(`${url}/v1/cache/entries`, headers);
    const requests = await getJson(`${url}/v1/cache/requests`, headers);
    const shown = await freshPage(page, since);
    const again = await getJson(`${url}/v1/cache/stats`, headers);
    const entriesAgain = await getJson(`${url}/v1/cache/entries`, headers);
    if (JSON.stringify(again) === JSON.stringify(stats) && JSON.stringify(entriesAgain) === JSON.stringify(entries)) {
      return { stats, entries, requests, shown };
    }
    await sleep(300);
  }
  assert.fail('GET /v1/cache/stats kept changing while the page refreshed');
}

describe('cache page in chromium', { skip: SKIP, timeout: 300_000 }, () => {
  let browser;
  before(async () => {
    browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  });
  after(async () => { await browser?.close(); });

  describe('without keys', () => {
    let srv;
    let turns;
    before(async () => {
      srv = await startServer({ model: modelPath(ARCH), name: 'cache-page',
        args: ['--parallel', '1', '--ctx-size', '2048'] });
      turns = await conversation(srv.openai, 'page-session', 30);
    });
    after(async () => { await srv?.stopGracefully(); });

    it('the conversation hit its own turns and the unrelated prompt missed (premise)', () => {
      assert.equal(turns[0].cached, 0);
      assert.ok(turns[1].cached > 0 && turns[2].cached > turns[1].cached, JSON.stringify(turns));
      assert.ok(turns[3].cached < 40, `the unrelated prompt restored ${turns[3].cached}`);
    });

    it('shows what GET /v1/cache/stats, /entries and /requests report', async () => {
      const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
      const errors = [];
      page.on('pageerror', (e) => errors.push(String(e)));
      page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
      const res = await page.goto(`${srv.url}/cache?refresh=0.3`);
      assert.equal(res.status(), 200);
      assert.match(res.headers()['content-type'], /^text\/html/);
      const { stats, entries, requests, shown } = await consistent(page, srv.url);
      assert.deepEqual(errors, [], 'the page logged errors');
      assert.match(shown.status, /^updated /);

      // Cards against /v1/cache/stats.
      assert.equal(shown.entries, stats.entries);
      assert.equal(shown.shownEntries, stats.entries.toLocaleString('en-US'));
      assert.equal(shown.anchors, stats.anchors);
      assert.equal(shown.hits, sum(stats.hits));
      assert.equal(shown.misses, stats.misses);
      assert.equal(shown.reused, stats.tokens_reused);
      assert.equal(shown.hits, 2, 'turns 2 and 3 hit');
      assert.ok(stats.misses >= 1, 'turn 1 missed');
      assert.equal(stats.tokens_reused, turns.reduce((a, t) => a + t.cached, 0));

      // Tiers: bytes shown and budgets.
      assert.deepEqual(shown.device, { shown: stats.bytes.device, bytes: stats.bytes.device, budget: 0 });
      assert.deepEqual(shown.ram, { shown: stats.bytes.ram, bytes: stats.bytes.ram, budget: stats.budget_bytes });
      assert.ok(stats.budget_bytes > 0);
      assert.deepEqual(shown.disk, { shown: stats.disk.bytes, bytes: stats.disk.bytes, budget: stats.disk.capacity_bytes });
      // /v1/cache/entries' totals are /v1/cache/stats' figures for the same entries.
      assert.equal(entries.totals.entries, stats.entries);
      assert.equal(entries.totals.anchors, stats.anchors);
      assert.deepEqual(entries.totals.bytes, { device: stats.bytes.device, ram: stats.bytes.ram });
      assert.equal(shown.points, entries.totals.points);

      // Entries: one row each, every restore point drawn at its position.
      assert.ok(stats.anchors >= 1, 'the system prompt is pinned as an anchor');
      assert.equal(shown.rows.length, stats.entries + stats.anchors);
      assert.deepEqual(shown.rows, entries.entries.map((e) => ({ id: e.id, tokens: e.tokens,
        marks: e.points.map((p) => `${p.kind}@${p.tokens}`) })));
      const conv = entries.entries.find((e) => e.session === 'page-session');
      assert.ok(conv, 'the conversation has an entry');
      const kinds = conv.points.map((p) => p.kind);
      assert.ok(kinds.includes('turn') && kinds.at(-1) === 'full', `points of the conversation: ${kinds}`);
      assert.ok(conv.tokens >= turns[2].prompt, `the conversation's entry holds its last prompt (${conv.tokens})`);

      // The last requests, newest first, as their responses reported them.
      assert.equal(shown.requests.length, 4);
      assert.deepEqual(shown.requests.map((r) => [r.prompt, r.restored, r.computed]),
        [...turns].reverse().map((t) => [t.prompt, t.cached, t.prompt - t.cached]));
      assert.deepEqual(shown.requests.map((r) => r.id), requests.recent.map((r) => r.id));
      assert.deepEqual(shown.requests.map((r) => r.ttft), requests.recent.map((r) => Number(r.ttft_ms.toFixed(1))));
      assert.deepEqual(shown.requests.map((r) => r.hit), requests.recent.map((r) => r.hit));
      assert.ok(shown.requests.every((r) => r.ttft > 0));

      // The chart's legend: the window's hits by kind and misses by cause, as counted by the cache.
      const expectLegend = {};
      for (const [k, n] of Object.entries(stats.hits)) if (n) expectLegend[`hit:${k}`] = n;
      for (const [k, n] of Object.entries(stats.misses_by_cause)) if (n) expectLegend[`miss:${k}`] = n;
      assert.deepEqual(shown.legend, expectLegend);
      assert.equal(requests.window.hits, sum(stats.hits));
      assert.equal(requests.window.misses, stats.misses);

      fs.mkdirSync(LOG_DIR, { recursive: true });
      const shot = await page.screenshot({ fullPage: true });
      fs.writeFileSync(path.join(LOG_DIR, 'cache-page.png'), shot);
      if (process.env.LINEAGE_SCREENSHOT_DOCS === '1') fs.writeFileSync(path.join(REPO_ROOT, 'docs/cache-page.png'), shot);
      await page.close();
    });

    it('refreshes itself: a new request appears without a reload', async () => {
      const page = await browser.newPage();
      await page.goto(`${srv.url}/cache?refresh=0.3`);
      const before = await freshPage(page, 0);
      const res = await srv.openai.chat.completions.create({ model: 'tiny', max_tokens: 3, temperature: 0,
        messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: `Another session: ${words(12, 77)}` }] });
      const since = Number(await page.evaluate(() => document.body.dataset.generation));
      const shown = await freshPage(page, since);
      assert.equal(shown.requests.length, before.requests.length + 1);
      assert.deepEqual([shown.requests[0].restored, shown.requests[0].computed],
        [cachedOf(res), res.usage.prompt_tokens - cachedOf(res)]);
      assert.ok(cachedOf(res) > 0, 'a new session on the known system prompt restores the anchor');
      await page.close();
    });
  });

  describe('with keys', () => {
    let srv;
    let dir;
    const client = {};
    const asked = {};
    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-page-keys-'));
      const keyFile = path.join(dir, 'keys.txt');
      fs.writeFileSync(keyFile, `${KEYS.alice} alice\n${KEYS.bob} bob\n`);
      srv = await startServer({ model: modelPath(ARCH), name: 'cache-page-keys',
        args: ['--parallel', '1', '--ctx-size', '2048', '--api-key-file', keyFile, '--admin-api-key', KEYS.admin,
          '--cache-disk=false'] });
      for (const t of ['alice', 'bob']) {
        client[t] = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEYS[t], maxRetries: 0, timeout: 120_000 });
      }
      asked.alice = await conversation(client.alice, 'alice-session', 40);
      const res = await client.bob.chat.completions.create({ model: 'tiny', max_tokens: 4, temperature: 0,
        messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: words(20, 50) }] });
      asked.bob = [{ prompt: res.usage.prompt_tokens, cached: cachedOf(res) }];
    });
    after(async () => {
      await srv?.stopGracefully();
      if (dir) fs.rmSync(dir, { recursive: true, force: true });
    });

    it('no key or a wrong one: 401, with a Basic challenge on the page and its JSON', async () => {
      for (const p of ['/cache', '/v1/cache/entries', '/v1/cache/requests', '/v1/cache/stats']) {
        for (const headers of [{}, { authorization: 'Bearer sk-wrong' }, { authorization: basic('sk-wrong') }]) {
          const r = await fetch(srv.url + p, { headers });
          assert.equal(r.status, 401, `${p} ${JSON.stringify(headers)}`);
          assert.equal(r.headers.get('www-authenticate'), 'Basic realm="lineage-server", charset="UTF-8"', p);
          assert.equal((await r.json()).error.code, 'invalid_api_key');
        }
      }
      // The Basic form is for the browser's pages only: a generating endpoint does not take it.
      const r = await fetch(`${srv.url}/v1/models`, { headers: { authorization: basic(KEYS.alice) } });
      assert.equal(r.status, 401);
      assert.equal(r.headers.get('www-authenticate'), null);
      // A tenant's key is not the admin key: /metrics stays 403 for it.
      const m = await fetch(`${srv.url}/metrics`, { headers: { authorization: `Bearer ${KEYS.alice}` } });
      assert.equal(m.status, 403);
    });

    it("a tenant's key shows that tenant's cache alone", async () => {
      const context = await browser.newContext({ httpCredentials: { username: 'operator', password: KEYS.alice } });
      const page = await context.newPage();
      const res = await page.goto(`${srv.url}/cache?refresh=0.3`);
      assert.equal(res.status(), 200);
      const auth = { authorization: `Bearer ${KEYS.alice}` };
      const { stats, entries, requests, shown } = await consistent(page, srv.url, auth);
      assert.equal(stats.tenant, 'alice');
      assert.equal(shown.entries, stats.entries);
      assert.equal(shown.anchors, stats.anchors);
      assert.equal(shown.reused, stats.cached_tokens);
      assert.equal(stats.cached_tokens, asked.alice.reduce((a, t) => a + t.cached, 0));
      assert.equal(shown.rows.length, stats.entries + stats.anchors);
      assert.equal(entries.tenant, 'alice');
      assert.ok(entries.entries.some((e) => e.session === 'alice-session'), 'her conversation is listed');
      assert.deepEqual(shown.ram, { shown: entries.totals.bytes.ram, bytes: entries.totals.bytes.ram, budget: 0 });
      assert.equal(entries.totals.bytes.ram + entries.totals.bytes.device, stats.bytes);
      // Only alice's requests, newest first, with her tokens; the window's hits and misses are hers.
      assert.deepEqual(shown.requests.map((r) => [r.prompt, r.restored, r.computed]),
        [...asked.alice].reverse().map((t) => [t.prompt, t.cached, t.prompt - t.cached]));
      assert.equal(shown.hits, asked.alice.filter((t) => t.cached > 0).length);
      assert.equal(shown.misses, asked.alice.filter((t) => t.cached === 0).length);
      assert.equal(requests.recent.length, 4);
      await context.close();
    });

    it('the admin key shows every tenant', async () => {
      const context = await browser.newContext({ httpCredentials: { username: 'operator', password: KEYS.admin } });
      const page = await context.newPage();
      await page.goto(`${srv.url}/cache?refresh=0.3`);
      const { stats, shown } = await consistent(page, srv.url, { authorization: `Bearer ${KEYS.admin}` });
      assert.equal(shown.entries, stats.entries);
      assert.equal(shown.rows.length, stats.entries + stats.anchors);
      assert.equal(stats.entries, stats.tenants.alice.entries + stats.tenants.bob.entries);
      assert.equal(shown.requests.length, 5);
      assert.equal(shown.hits, sum(stats.hits));
      await context.close();
    });
  });

  it('--cache-page=false: the page is a 404, its JSON still served', async () => {
    const srv = await startServer({ model: modelPath(ARCH), name: 'cache-page-off',
      args: ['--parallel', '1', '--ctx-size', '1024', '--cache-page=false', '--cache-disk=false'] });
    try {
      const r = await fetch(`${srv.url}/cache`);
      assert.equal(r.status, 404);
      const j = await r.json();
      assert.equal(j.error.code, 'not_found');
      assert.match(j.error.message, /--cache-page=false/);
      const e = await getJson(`${srv.url}/v1/cache/entries`);
      assert.deepEqual(e, { family: 'hybrid', entries: [],
        totals: { entries: 0, anchors: 0, points: 0, bytes: { device: 0, ram: 0 } } });
    } finally {
      await srv.stopGracefully();
    }
  });
});
