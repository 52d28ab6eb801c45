// Browser tests of the web UI against a running `strata serve` (started, and filled with data
// through httptrap, by crates/server/tests/ui_browser.rs). Every expectation is read back from
// the server's API (or computed here independently: time zones with Intl, SI labels parsed back
// into numbers), never from the UI's own code.
//
// Env: STRATA_URL (http://127.0.0.1:port), STRATA_LINE (the server's start-up line, for its
// statsd and Graphite addresses), ARTIFACTS (directory for screenshots and the render benchmark),
// CHROMIUM (default /usr/bin/chromium), DOCS_SHOTS (optional: a directory to copy the landing
// page, dashboard and heatmap screenshots into, e.g. docs/ui). Prints one line per test and a
// closing `N passed, N failed`; exits 1 if anything failed.
import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const BASE = process.env.STRATA_URL;
const ARTIFACTS = process.env.ARTIFACTS ?? 'artifacts';
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const DOCS_SHOTS = process.env.DOCS_SHOTS;
const HERE = path.dirname(fileURLToPath(import.meta.url));
/** Per-step timeout: the shared CI machine is slow, but nothing should take this long. */
const STEP_TIMEOUT_MS = 30_000;
if (!BASE) {
  console.error('STRATA_URL is not set (the URL of a running strata serve)');
  process.exit(2);
}
fs.mkdirSync(ARTIFACTS, { recursive: true });

const results = [];
let failures = 0;
async function test(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    results.push({ name, ok: true });
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failures++;
    results.push({ name, ok: false, error: String(e?.stack ?? e) });
    console.log(`FAIL ${name}: ${e?.stack ?? e}`);
    await shot(`FAIL-${name.replace(/\W+/g, '_')}`).catch(() => {});
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}
function assertClose(a, b, msg, tol = 1e-9) {
  if (!(Math.abs(a - b) <= tol * Math.max(1, Math.abs(b)))) throw new Error(`${msg}: ${a} != ${b}`);
}

async function api(pathAndQuery, init) {
  const r = await fetch(BASE + pathAndQuery, init);
  const body = await r.json();
  if (!r.ok) throw new Error(`${pathAndQuery}: ${r.status} ${JSON.stringify(body)}`);
  return body;
}
async function apiRaw(method, p, body) {
  const r = await fetch(BASE + p, { method, body, headers: { 'content-type': 'application/json' } });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // Not JSON: left null, which the caller asserts against.
  }
  return { status: r.status, headers: r.headers, json, text };
}
const enc = (o) => new URLSearchParams(o).toString();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-gpu'],
});
const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
const page = await context.newPage();
page.setDefaultTimeout(STEP_TIMEOUT_MS);
const pageErrors = [];
function watch(p) {
  p.on('pageerror', (e) => pageErrors.push(String(e)));
}
watch(page);
async function shot(name, p = page) {
  await p.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}
/** A screenshot also copied into the documentation (when DOCS_SHOTS is set). */
async function docShot(name, p = page, fullPage = false) {
  const file = path.join(ARTIFACTS, `${name}.png`);
  await p.screenshot({ path: file, fullPage });
  if (DOCS_SHOTS) {
    fs.mkdirSync(DOCS_SHOTS, { recursive: true });
    fs.copyFileSync(file, path.join(DOCS_SHOTS, `${name}.png`));
  }
}
async function ready(p = page) {
  await p.waitForSelector('#view[data-ready="true"]', { state: 'attached' });
  if ((await p.getAttribute('#view', 'data-view')) === 'explore') await p.waitForSelector('#graphs[data-ready="true"]', { state: 'attached' });
}
async function state(p = page) {
  const s = new URL(p.url()).searchParams.get('s');
  return s ? JSON.parse(s) : {};
}
async function addStream(text, key) {
  await page.fill('#search', text);
  if (key) {
    await page.waitForSelector(`#suggest li[data-key="${key}"]`);
    await page.click(`#suggest li[data-key="${key}"]`);
  } else {
    await page.waitForSelector('#suggest li[role=option]');
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('Enter');
  }
  await ready();
}
function exploreUrl(s) {
  return `${BASE}/?s=${encodeURIComponent(JSON.stringify({ view: 'explore', ...s }))}`;
}

/** A label with an SI prefix and an optional unit, read back as a number ("100µs" → 1e-4). */
function parseSi(label, unit = '') {
  const m = /^(-?[\d.]+(?:e[-+]?\d+)?)([yzafpnµmkMGTPEZY]?)(.*)$/.exec(label.trim());
  if (!m) return NaN;
  if (m[3] !== unit) return NaN;
  const k = { y: 1e-24, z: 1e-21, a: 1e-18, f: 1e-15, p: 1e-12, n: 1e-9, µ: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18, Z: 1e21, Y: 1e24 }[m[2]];
  return Number(m[1]) * k;
}

/** Wall-clock fields of `ms` in an IANA zone, by Intl (independent of the UI's code). */
function zoneParts(ms, timeZone) {
  const f = new Intl.DateTimeFormat('en-GB', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
  const o = Object.fromEntries(f.formatToParts(new Date(ms)).map((p) => [p.type, p.value]));
  return o;
}
function zoneText(ms, timeZone) {
  const p = zoneParts(ms, timeZone);
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}`;
}

// The streams the harness wrote.
const latSeries = (await api('/api/strata/v1/find?' + enc({ query: '__name:lat' }))).find((s) => s.kind === 'histogram');
assert(latSeries, 'the harness wrote a histogram stream named lat');
const smoothSeries = (await api('/api/strata/v1/find?' + enc({ query: '__name:smooth' })))[0];
const gappySeries = (await api('/api/strata/v1/find?' + enc({ query: '__name:gappy' })))[0];
const tinySeries = (await api('/api/strata/v1/find?' + enc({ query: '__name:tiny' })))[0];
assert(smoothSeries && gappySeries && tinySeries, 'the harness wrote smooth, gappy and tiny');
const STATSD = /statsd=(\S+)/.exec(process.env.STRATA_LINE ?? '')?.[1];
const GRAPHITE = /graphite=(\S+)/.exec(process.env.STRATA_LINE ?? '')?.[1];

async function sliceFromApi(tsMs, transform) {
  const g = (await state()).graphs[0];
  const q = { query: g.query, start: String(tsMs / 1000), end: String(tsMs / 1000 + 60), period: '1m' };
  if (transform) q.transform = transform;
  const body = await api(`/api/strata/v1/fetch?${enc(q)}`);
  const s = body.series.find((x) => x.key === latSeries.key);
  assert(s, 'the API returns the stream');
  const slice = s.data.find((d) => d.ts_ms === tsMs);
  assert(slice, `the API has the slice ${tsMs}`);
  return slice.value;
}

// ---------------------------------------------------------------- explore: the heatmap

await test('open a histogram stream: its heatmap, titled by name and tag chips', async () => {
  await page.goto(BASE + '/?view=explore');
  await ready();
  await page.fill('#search', 'la');
  await page.waitForSelector(`#suggest li[data-key="${latSeries.key}"]`);
  await page.click(`#suggest li[data-key="${latSeries.key}"]`);
  await ready();
  const panel = page.locator('[data-testid=graph][data-kind=histogram]');
  assert((await panel.count()) === 1, 'one histogram panel');
  const title = await panel.locator('h3').innerText();
  assert(title.includes('lat') && title.includes('svc:api') && !title.includes('|ST['), `title is the name and chips, not the key: ${title}`);
  assert((await panel.locator('h3 .chip').count()) === latSeries.tags.length, 'one chip per tag');
  const cells = Number(await page.getAttribute('[data-testid=draw-ms]', 'data-cells'));
  assert(!(await page.isVisible('[data-testid=draw-ms]')), 'the draw timing is not shown to users');
  // Every positive bin of every slice in range is a cell.
  const st = await state();
  const end = Math.ceil(Date.now() / 1000);
  const body = await api(`/api/strata/v1/fetch?${enc({ query: st.graphs[0].query, start: String(end - 3600), end: String(end), period: '1m' })}`);
  const s = body.series.find((x) => x.key === latSeries.key);
  const apiCells = s.data.reduce((n, d) => n + (d.value ? d.value.bins.filter(([v]) => v > 0).length : 0), 0);
  assert(apiCells > 100, `the harness wrote enough bins (${apiCells})`);
  assert(cells === apiCells, `heatmap cells ${cells} = positive bins from the API ${apiCells}`);
  await shot('heatmap');
});

let clickedTs = 0;
await test('click a slice: the breakout count equals the stored histogram', async () => {
  const over = page.locator('[data-testid=heatmap] .u-over');
  const box = await over.boundingBox();
  assert(box, 'the heatmap has a plot area');
  await page.mouse.click(box.x + box.width * 0.6, box.y + box.height * 0.5);
  await page.waitForSelector('[data-testid=breakout-ts]');
  clickedTs = Number(await page.getAttribute('[data-testid=breakout-ts]', 'data-ms'));
  const shown = Number(await page.getAttribute('[data-testid=breakout-count]', 'data-value'));
  const value = await sliceFromApi(clickedTs);
  assert(value && value.bins, 'the clicked slice has data');
  const stored = value.bins.reduce((n, [, , c]) => n + c, 0);
  const counted = await sliceFromApi(clickedTs, 'count');
  assert(stored === counted, `bins sum ${stored} = transform=count ${counted}`);
  assert(shown === stored, `breakout count ${shown} = stored ${stored}`);
  assert((await page.locator('[data-testid=pin]').count()) === 1, 'the click pinned a tooltip');
  assert((await state()).graphs[0].sel === clickedTs, 'the selected slice is in the URL');
  await shot('breakout');
});

await test('objective line: the share shown equals the API inverse quantile', async () => {
  const threshold = 0.1;
  await page.fill('[data-testid=objective-input]', String(threshold));
  await page.click('[data-testid=objective-set]');
  await page.waitForSelector('[data-testid=objective-share]');
  const share = Number(await page.getAttribute('[data-testid=objective-share]', 'data-value'));
  const iq = await sliceFromApi(clickedTs, `inverse_quantile:${threshold}`);
  assertClose(share, 1 - iq[0], 'share above the objective');
  const count = Number(await page.getAttribute('[data-testid=breakout-count]', 'data-value'));
  assertClose(Number(await page.getAttribute('[data-testid=objective-count]', 'data-value')), (1 - iq[0]) * count, 'count above');
  const st = await state();
  const end = Math.ceil(Date.now() / 1000);
  const q = (t) => `/api/strata/v1/fetch?${enc({ query: st.graphs[0].query, start: String(end - 3600), end: String(end), period: '1m', ...(t ? { transform: t } : {}) })}`;
  const [iqs, counts] = await Promise.all([api(q(`inverse_quantile:${threshold}`)), api(q('count'))]);
  const iv = iqs.series.find((x) => x.key === latSeries.key).data;
  const cv = counts.series.find((x) => x.key === latSeries.key).data;
  let bad = 0;
  iv.forEach((d, i) => {
    if (d.value) bad += (1 - d.value[0]) * cv[i].value;
  });
  assertClose(Number(await page.getAttribute('[data-testid=objective-total]', 'data-value')), bad, 'integrated total above', 1e-6);
  assert((await state()).graphs[0].objective === threshold, 'the objective is in the URL');
  await shot('objective');
});

await test('overlays toggle and are kept in the URL', async () => {
  await page.uncheck('[data-testid=overlay-p99]');
  assert((await state()).overlays.p99 === false, 'p99 off in the URL');
  await page.check('[data-testid=overlay-p99]');
  assert((await state()).overlays?.p99 !== false, 'p99 on again');
});

await test('keyboard: arrow keys move the breakout to the next slice', async () => {
  await page.focus('[data-testid=heatmap]');
  await page.keyboard.press('ArrowLeft');
  const ts = Number(await page.getAttribute('[data-testid=breakout-ts]', 'data-ms'));
  assert(ts < clickedTs && (clickedTs - ts) % 60000 === 0, `moved left by whole slices (${clickedTs} → ${ts})`);
  const value = await sliceFromApi(ts);
  const stored = value.bins.reduce((n, [, , c]) => n + c, 0);
  assert(Number(await page.getAttribute('[data-testid=breakout-count]', 'data-value')) === stored, 'breakout follows the keyboard');
});

await test('URL holds the whole state: reload restores graph, objective and slice', async () => {
  const before = await state();
  await page.reload();
  await ready();
  await page.waitForSelector('[data-testid=objective-share]');
  const after = await state();
  assert(JSON.stringify(after.graphs) === JSON.stringify(before.graphs), 'same graphs');
  assert(Number(await page.getAttribute('[data-testid=breakout-ts]', 'data-ms')) === before.graphs[0].sel, 'same slice');
  assert((await page.inputValue('[data-testid=objective-input]')) === String(before.graphs[0].objective), 'same objective');
});

// ---------------------------------------------------------------- names, units, ticks, tooltips

await test('value axes: SI-prefixed ticks with the unit, never a false 0', async () => {
  // In the unit the graph is shown in (guessed from the name, or chosen): s gives 10ms, 100ms.
  const unit = await page.inputValue('[data-testid=unit]');
  const symbol = { s: 's', ms: 's', us: 's', ns: 's', B: 'B' }[unit] ?? '';
  const yt = JSON.parse(await page.getAttribute('[data-testid=heatmap]', 'data-yticks'));
  assert(yt.length >= 2, `y ticks ${JSON.stringify(yt)}`);
  for (const [v, label] of yt) {
    if (!label) continue;
    const back = parseSi(label, symbol);
    assert(Number.isFinite(back) && Math.abs(back - v) <= 0.06 * Math.abs(v), `tick ${v} labelled ${label}`);
  }
  // tiny: numbers around 1e-4 with no unit: 100µ, never 0.
  await page.goto(exploreUrl({ graphs: [{ query: '__name:tiny', key: tinySeries.key, kind: 'numeric' }] }));
  await ready();
  const ticks = JSON.parse(await page.getAttribute('[data-testid=linechart]', 'data-yticks'));
  assert(ticks.length >= 2, 'tiny has ticks');
  for (const [v, label] of ticks) {
    if (!label) continue;
    assert(label !== '0' || v === 0, `a tick of ${v} is labelled 0`);
    const back = parseSi(label);
    assert(Math.abs(back - v) <= 0.06 * Math.abs(v), `tick ${v} labelled ${label}`);
  }
  assert(ticks.some(([, l]) => /µ$/.test(l)), `micro prefix used: ${JSON.stringify(ticks)}`);
  // The legend says what is plotted, and the latest value instead of "Time: --".
  const legend = await page.innerText('[data-testid=legend]');
  assert(/mean per 1 min slice/.test(legend) && /latest/.test(legend) && !legend.includes('--'), `legend: ${legend}`);
  const last = await page.innerText('[data-testid=legend-value]');
  const end = Math.ceil(Date.now() / 1000);
  const body = await api(`/api/strata/v1/fetch?${enc({ query: '__name:tiny', start: String(end - 3600), end: String(end), period: '1m' })}`);
  const present = body.series[0].data.filter((d) => d.count);
  assertClose(parseSi(last), present[present.length - 1].mean, `legend's latest ${last}`, 0.01);
});

await test('tooltip: empty slices say so, others count their samples', async () => {
  await page.goto(exploreUrl({ graphs: [{ query: '__name:gappy', key: gappySeries.key, kind: 'histogram' }] }));
  await ready();
  const end = Math.ceil(Date.now() / 1000);
  const body = await api(`/api/strata/v1/fetch?${enc({ query: '__name:gappy', start: String(end - 3600), end: String(end), period: '1m' })}`);
  const data = body.series[0].data;
  const emptyAt = data.findIndex((d, i) => d.value === null && i > 3 && data[i - 1].value !== null);
  const fullAt = data.findIndex((d, i) => d.value !== null && i > 3);
  assert(emptyAt > 0 && fullAt > 0, 'gappy has empty and full slices');
  const probe = async (i) => {
    const pos = await page.evaluate(([t]) => {
      const h = document.querySelector('[data-testid=heatmap]');
      const p = h.strataProbe(t, 0.08);
      const c = h.querySelector('canvas').getBoundingClientRect();
      return { x: c.left + p.x / devicePixelRatio, y: c.top + p.y / devicePixelRatio };
    }, [data[i].ts_ms / 1000 + 30]);
    await page.mouse.move(pos.x, pos.y);
    await page.waitForSelector('[data-testid=tooltip]:not([hidden])');
    return page.innerText('[data-testid=tooltip]');
  };
  const empty = await probe(emptyAt);
  assert(/no samples/.test(empty) && !/\b0 samples/.test(empty), `empty slice tooltip: ${empty}`);
  const full = await probe(fullAt);
  const n = data[fullAt].value.bins.reduce((a, [, , c]) => a + c, 0);
  assert(full.includes(`${n} samples`), `full slice tooltip says ${n} samples: ${full}`);
});

// ---------------------------------------------------------------- heatmap colour

await test('heatmap colour: density shows no step at a decade, count per bin does; legend and mode', async () => {
  const off = { p50: false, p90: false, p99: false };
  await page.goto(exploreUrl({ overlays: off, graphs: [{ query: '__name:smooth', key: smoothSeries.key, kind: 'histogram' }] }));
  await ready();
  const legend = page.locator('[data-testid=color-legend]');
  assert((await legend.getAttribute('data-mode')) === 'density', 'density is the default');
  assert(/per decade/.test(await legend.innerText()), 'the legend says what the colour means');
  // The colour levels of the pixels just below and just above 0.1 (a power of ten), 2 to 10 px
  // away from it, in a column halfway between two vertical grid lines; pixels that are not a
  // level's colour (grid lines) are left out.
  const sample = async () => {
    return page.evaluate(() => {
      const h = document.querySelector('[data-testid=heatmap]');
      const c = h.querySelector('canvas');
      const g = c.getContext('2d');
      const xs = JSON.parse(h.dataset.xticks).map(([t]) => t);
      const k = Math.floor(xs.length / 2);
      const t = (xs[k - 1] + xs[k]) / 2;
      const at = h.strataProbe(t, 0.1);
      const x = Math.round(at.x);
      const levels = Array.from({ length: window.strata.levels }, (_, i) => window.strata.levelRgb(i));
      const levelAt = (y) => {
        const d = g.getImageData(x, y, 1, 1).data;
        let best = -1;
        let bestD = Infinity;
        levels.forEach((rgb, i) => {
          const dd = Math.hypot(rgb[0] - d[0], rgb[1] - d[1], rgb[2] - d[2]);
          if (dd < bestD) {
            bestD = dd;
            best = i;
          }
        });
        return bestD <= 3 ? best : null;
      };
      const region = (from, to) => {
        const out = [];
        for (let dy = from; dy <= to; dy++) {
          const l = levelAt(Math.round(at.y) + dy);
          if (l !== null) out.push(l);
        }
        return out;
      };
      // Canvas y grows downwards: below 0.1 is +dy.
      return { below: region(2, 10), above: region(-10, -2) };
    });
  };
  const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
  const step = (s) => Math.abs(mean(s.below) - mean(s.above));
  const d = await sample();
  assert(d.below.length >= 4 && d.above.length >= 4, `enough cell pixels: ${JSON.stringify(d)}`);
  assert(step(d) <= 3, `density: the colour level changes by ${step(d).toFixed(1)} through 0.1 (at most 3): ${JSON.stringify(d)}`);
  await page.selectOption('[data-testid=color-mode]', 'count');
  await ready();
  assert((await page.getAttribute('[data-testid=color-legend]', 'data-mode')) === 'count', 'legend follows the mode');
  assert((await state()).graphs[0].color === 'count', 'the colour mode is in the URL');
  const c = await sample();
  assert(step(c) >= 6 && step(c) > 2 * step(d), `count per bin: a step of ${step(c).toFixed(1)} levels at the decade (density: ${step(d).toFixed(1)}): ${JSON.stringify(c)}`);
  await page.selectOption('[data-testid=color-mode]', 'density');
  await ready();
  await docShot('heatmap');
});

// ---------------------------------------------------------------- time zone

await test('time zone: browser-local by default, UTC on a toggle, the same everywhere', async () => {
  const zone = 'Asia/Kolkata';
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 }, timezoneId: zone });
  const p = await ctx.newPage();
  watch(p);
  p.setDefaultTimeout(STEP_TIMEOUT_MS);
  try {
    const end = Math.floor(Date.now() / 60000) * 60;
    const start = end - 3600;
    await p.goto(`${BASE}/?s=${encodeURIComponent(JSON.stringify({ view: 'explore', startS: start, endS: end, graphs: [{ query: latSeries ? `__name:lat` : '', key: latSeries.key, kind: 'histogram' }, { query: '__name:ver', kind: 'text' }] }))}`);
    await ready(p);
    const check = async (tz) => {
      const label = await p.innerText('[data-testid=tz-label]');
      if (tz === 'UTC') assert(label === 'UTC', `zone label ${label}`);
      // ICU may call the zone by its older name.
      else assert(/Asia\/(Kolkata|Calcutta)/.test(label) && label.includes('+05:30'), `zone label ${label}`);
      const inputText = (ms) => zoneText(ms, tz).replace(' ', 'T');
      assert((await p.inputValue('#from')) === inputText(start * 1000), `from input ${await p.inputValue('#from')} = ${inputText(start * 1000)}`);
      assert((await p.inputValue('#to')) === inputText(end * 1000), 'to input');
      assert((await p.getAttribute('#from', 'title')).includes(tz === 'UTC' ? 'UTC' : '+05:30'), 'the inputs say their zone');
      const xt = JSON.parse(await p.getAttribute('[data-testid=heatmap]', 'data-xticks'));
      assert(xt.length >= 3, 'x ticks');
      for (const [t, l] of xt) {
        const z = zoneParts(t * 1000, tz);
        assert(l.split('\n')[0] === `${z.hour}:${z.minute}`, `tick ${t} labelled ${l}, expected ${z.hour}:${z.minute} in ${tz}`);
      }
      // The breakout's time and the text change list are in the same zone.
      const over = p.locator('[data-testid=heatmap] .u-over');
      const box = await over.boundingBox();
      await p.mouse.click(box.x + box.width * 0.5, box.y + box.height * 0.5);
      await p.waitForSelector('[data-testid=breakout-ts]');
      const ms = Number(await p.getAttribute('[data-testid=breakout-ts]', 'data-ms'));
      const shown = await p.innerText('[data-testid=breakout-ts]');
      assert(shown === `${zoneText(ms, tz)} ${tz === 'UTC' ? 'UTC' : 'UTC+05:30'}`, `breakout time ${shown}`);
      const cell = p.locator('[data-testid=changes] tbody td').first();
      const cms = Number(await cell.getAttribute('data-ms'));
      assert((await cell.innerText()).startsWith(zoneText(cms, tz)), `change list time ${await cell.innerText()}`);
      assert((await p.innerText('[data-testid=changes] th')).includes(tz === 'UTC' ? 'UTC' : 'UTC+05:30'), 'the change list says its zone');
    };
    await check(zone);
    await shot('timezone-local', p);
    await p.selectOption('#tz', 'UTC');
    await ready(p);
    await check('UTC');
    assert((await state(p)).tz === 'UTC', 'the zone is in the URL');
    // A range typed in UTC is read in UTC.
    await p.fill('#from', '2026-01-02T03:04');
    await p.fill('#to', '2026-01-02T05:04');
    await p.click('#apply-range');
    await ready(p);
    const s = await state(p);
    assert(s.startS === Date.UTC(2026, 0, 2, 3, 4) / 1000 && s.endS === Date.UTC(2026, 0, 2, 5, 4) / 1000, `range read in UTC: ${s.startS}..${s.endS}`);
  } finally {
    await ctx.close();
  }
});

// ---------------------------------------------------------------- worksheets

await test('worksheets: saving a name again on a fresh page asks and updates, never duplicates', async () => {
  await page.goto(exploreUrl({ graphs: [{ query: '__name:lat', key: latSeries.key, kind: 'histogram', objective: 0.1 }] }));
  await ready();
  await page.fill('#ws-name', 'latency review');
  await page.click('#ws-save');
  await page.waitForSelector('[data-testid=ws-open]:has-text("latency review")');
  const first = (await api('/api/strata/v1/worksheets')).filter((w) => w.name === 'latency review');
  assert(first.length === 1, 'one worksheet');
  // A fresh page knows no worksheet id: the same name must not make a second one.
  await page.goto(exploreUrl({ graphs: [{ query: '__name:reqs', kind: 'numeric' }] }));
  await ready();
  let asked = '';
  page.once('dialog', (d) => {
    asked = d.message();
    void d.accept();
  });
  await page.fill('#ws-name', 'Latency review ');
  await page.click('#ws-save');
  await page.waitForFunction(() => /Saved worksheet/.test(document.querySelector('#status').textContent));
  assert(/exists/.test(asked), `the user was asked: ${asked}`);
  const after = (await api('/api/strata/v1/worksheets')).filter((w) => w.name.toLowerCase() === 'latency review');
  assert(after.length === 1 && after[0].id === first[0].id, `still one worksheet, the same id: ${JSON.stringify(after)}`);
  const stored = await api(`/api/strata/v1/worksheets/${first[0].id}`);
  assert(stored.graphs[0].query === '__name:reqs', 'its graphs were replaced');
  // Save as new under a taken name is refused with a message.
  const countBefore = (await api('/api/strata/v1/worksheets')).length;
  await page.click('#ws-save-new');
  await page.waitForFunction(() => /choose another name/.test(document.querySelector('#status').textContent));
  assert((await api('/api/strata/v1/worksheets')).length === countBefore, 'nothing was added');
});

await test('worksheets: listed newest first with their dates; reopen, edit, delete', async () => {
  await page.fill('#ws-name', 'second sheet');
  await page.click('#ws-save-new');
  await page.waitForSelector('[data-testid=ws-open]:has-text("second sheet")');
  const list = await api('/api/strata/v1/worksheets');
  for (let i = 1; i < list.length; i++) assert(list[i - 1].updated_ms >= list[i].updated_ms, 'the API lists newest first');
  const shown = await page.locator('[data-testid=ws-open]').allInnerTexts();
  assert(JSON.stringify(shown) === JSON.stringify(list.map((w) => w.name)), `the UI lists them in the API's order: ${shown}`);
  const dates = await page.locator('[data-testid=ws-date]').allInnerTexts();
  const local = Intl.DateTimeFormat().resolvedOptions().timeZone;
  assert(dates[0].startsWith(zoneText(list[0].updated_ms, local)), `date shown ${dates[0]}`);
  await page.goto(BASE + '/?view=explore');
  await ready();
  await page.click('[data-testid=ws-open]:has-text("latency review")');
  await ready();
  await page.waitForSelector('[data-testid=graph]');
  const id = (await state()).ws;
  assert(id, 'the worksheet id is in the URL');
  await page.fill('#ws-name', 'latency review v2');
  await page.click('#ws-save');
  await page.waitForSelector('[data-testid=ws-open]:has-text("latency review v2")');
  const edited = await api(`/api/strata/v1/worksheets/${id}`);
  assert(edited.name === 'latency review v2' && edited.id === id, 'saved over the same id');
  page.once('dialog', (d) => d.accept());
  const copy = (await api('/api/strata/v1/worksheets')).find((w) => w.name === 'second sheet');
  await page.click(`[data-testid=ws-item]:has([data-id="${copy.id}"]) [data-testid=ws-delete]`);
  await page.waitForFunction((cid) => !document.querySelector(`[data-id="${cid}"]`), copy.id);
  assert(!(await api('/api/strata/v1/worksheets')).some((w) => w.id === copy.id), 'deleted on the server');
});

await test('worksheets and dashboards API: conflicts, create-or-replace, no-op, errors named', async () => {
  for (const coll of ['worksheets', 'dashboards']) {
    const base = `/api/strata/v1/${coll}`;
    const body = (name, extra = {}) => JSON.stringify({ name, ...(coll === 'worksheets' ? { graphs: [] } : { panels: [] }), ...extra });
    let r = await apiRaw('PUT', `${base}/api-test`, body('API test'));
    assert(r.status === 201 && r.json.id === 'api-test' && r.json.version === 1, `${coll}: created at the client's id: ${r.status} ${r.text}`);
    const created = r.json.updated_ms;
    await sleep(20);
    r = await apiRaw('PUT', `${base}/api-test`, body('API test'));
    assert(r.status === 200 && r.headers.get('x-strata-unchanged') === 'true' && r.json.updated_ms === created, `${coll}: the same body is a no-op: ${r.status} ${r.text}`);
    r = await apiRaw('PUT', `${base}/api-test`, body('API test', { description: 'changed' }));
    assert(r.status === 200 && !r.headers.get('x-strata-unchanged') && r.json.updated_ms > created, `${coll}: a changed body replaces`);
    r = await apiRaw('POST', base, body('api TEST'));
    assert(r.status === 409 && r.json.id === 'api-test' && /exists/.test(r.json.error), `${coll}: a taken name is a 409 naming the id: ${r.text}`);
    r = await apiRaw('POST', base, '{"name":"x","graphs":');
    assert(r.status === 400 && /not JSON/.test(r.json.error), `${coll}: broken JSON: ${r.text}`);
    r = await apiRaw('POST', base, JSON.stringify({ panels: [], graphs: [] }));
    assert(r.status === 400 && r.json.error.includes('`name`'), `${coll}: missing name: ${r.text}`);
    r = await apiRaw('PUT', `${base}/a.b`, body('y'));
    assert(r.status === 400 && /not a (worksheet|dashboard) id/.test(r.json.error), `${coll}: bad id: ${r.text}`);
    r = await apiRaw('POST', base, body('big', { pad: 'x'.repeat(300 * 1024) }));
    assert(r.status === 400 && /at most 262144/.test(r.json.error), `${coll}: too large: ${r.status}`);
    r = await apiRaw('DELETE', `${base}/api-test`);
    assert(r.status === 200 && r.json.deleted === 'api-test', `${coll}: deleted`);
    r = await apiRaw('GET', `${base}/api-test`);
    assert(r.status === 404 && r.json.error.includes('api-test'), `${coll}: gone: ${r.text}`);
    r = await apiRaw('DELETE', `${base}/api-test`);
    assert(r.status === 404, `${coll}: deleting twice is a 404`);
  }
  const bad = [
    [{ id: 'a', type: 'pie', x: 0, y: 0, w: 6, h: 2 }, '`panels[0].type`'],
    [{ id: 'a', type: 'line', x: 8, y: 0, w: 6, h: 2 }, 'x + w is 14'],
    [{ id: 'a', type: 'line', x: 0, y: 0, w: 6, h: 99 }, '`panels[0].h`'],
    [{ type: 'line', x: 0, y: 0, w: 6, h: 2 }, '`panels[0].id`'],
  ];
  for (const [panel, want] of bad) {
    const r = await apiRaw('PUT', '/api/strata/v1/dashboards/bad', JSON.stringify({ name: 'bad', panels: [panel] }));
    assert(r.status === 400 && r.json.error.includes(want), `bad panel ${JSON.stringify(panel)}: ${r.text}`);
  }
});

// ---------------------------------------------------------------- dashboards

let dashId = '';
await test('dashboard: built in the UI with every panel type, saved in the server', async () => {
  await page.goto(`${BASE}/?view=dashboards`);
  await ready();
  await page.fill('#dash-new-name', 'Service overview');
  await page.click('#dash-create');
  await page.waitForSelector('[data-testid=dash-title]');
  await ready();
  dashId = new URL(page.url()).searchParams.get('d');
  assert(dashId === 'service-overview', `the id comes from the name: ${dashId}`);
  await page.click('[data-testid=dash-edit]');
  const add = async (type, stream, opts = {}) => {
    await page.click('[data-testid=dash-add]');
    await page.selectOption('#pe-type', type);
    if (opts.title) await page.fill('#pe-title', opts.title);
    if (stream) {
      await page.fill('#pe-stream', stream.name);
      await page.click(`.pe-results button[data-key="${stream.key}"]`);
    }
    if (opts.stat) await page.selectOption('#pe-stat', opts.stat);
    if (opts.text) await page.fill('#pe-text', opts.text);
    if (opts.w) await page.fill('#pe-w', String(opts.w));
    await page.click('[data-testid=pe-apply]');
    await ready();
  };
  const reqs = (await api('/api/strata/v1/find?' + enc({ query: '__name:reqs' })))[0];
  await add('heatmap', latSeries, { w: 12 });
  await add('line', reqs, { w: 6, stat: 'mean' });
  await add('value', reqs, { w: 3, stat: 'last', title: 'requests (last)' });
  await add('value', latSeries, { w: 3, stat: 'count', title: 'samples' });
  await add('histogram', latSeries, { w: 6 });
  await add('text', null, { w: 6, text: '# Runbook\n\nPage the API on-call when p99 stays above 500 ms.' });
  await add('alerts', null, { w: 6 });
  await page.click('[data-testid=dash-save]');
  await page.waitForSelector('[data-testid=dash-edit]');
  await ready();
  const doc = await api(`/api/strata/v1/dashboards/${dashId}`);
  assert(doc.panels.length === 7, `7 panels stored: ${doc.panels.length}`);
  assert(JSON.stringify(doc.panels.map((p) => p.type).sort()) === JSON.stringify(['alerts', 'heatmap', 'histogram', 'line', 'text', 'value', 'value']), 'every type');
  assert((await page.locator('[data-testid=dash-panel]').count()) === 7, 'seven panels shown');
});

await test('dashboard: panels show what the API holds; one range and one cursor for all', async () => {
  // The API asked for the range each panel was drawn over (a minute may have passed since).
  const values = page.locator('[data-testid=value]');
  const rangeOf = async (n) => ({ start: await values.nth(n).getAttribute('data-start-s'), end: await values.nth(n).getAttribute('data-end-s') });
  const reqsRange = await rangeOf(0);
  const reqsBody = await api(`/api/strata/v1/fetch?${enc({ query: '__name:reqs', ...reqsRange, period: '1m' })}`);
  const present = reqsBody.series[0].data.filter((d) => d.count);
  const last = present[present.length - 1].last;
  assert(Number(await values.nth(0).getAttribute('data-value')) === last, `single value = the API's last (${last})`);
  const latBody = await api(`/api/strata/v1/fetch?${enc({ query: latSeries ? '__name:lat' : '', ...(await rangeOf(1)), period: '1m', transform: 'count' })}`);
  const total = latBody.series.find((s) => s.key === latSeries.key).data.reduce((a, d) => a + (d.value ?? 0), 0);
  assert(Number(await values.nth(1).getAttribute('data-value')) === total, `sample count = the API's (${total})`);
  assert(Number(await page.getAttribute('[data-testid=hist-stats]', 'data-count')) === total, 'histogram panel count');
  assert((await page.innerText('[data-type=text]')).includes('Runbook'), 'text panel');
  assert(/Alerting is not available|No alert is firing|severity/.test(await page.innerText('[data-type=alerts]')), 'alert panel says what it knows');
  // One cursor: hovering the heatmap moves the line chart's cursor to the same time.
  const over = page.locator('[data-type=heatmap] .u-over');
  const box = await over.boundingBox();
  await page.mouse.move(box.x + box.width * 0.4, box.y + box.height * 0.5);
  await page.waitForFunction(() => document.querySelector('[data-type=line] [data-testid=linechart]')?.dataset.cursor);
  const tHeat = Number(await page.getAttribute('[data-type=heatmap] [data-testid=heatmap]', 'data-cursor'));
  const tLine = Number(await page.getAttribute('[data-type=line] [data-testid=linechart]', 'data-cursor'));
  assert(Math.abs(tHeat - tLine) < 120, `the same time under both cursors: ${tHeat} vs ${tLine}`);
  await page.mouse.move(0, 0);
  // One range: 6 h for every panel.
  await page.selectOption('#range', '6h');
  await ready();
  const s = await state();
  assert(s.range === '6h' && new URL(page.url()).searchParams.get('d') === dashId, 'range and dashboard in the URL');
  for (const sel of ['[data-type=heatmap] [data-testid=heatmap]', '[data-type=line] [data-testid=linechart]']) {
    const xt = JSON.parse(await page.getAttribute(sel, 'data-xticks')).map(([t]) => t);
    assert(xt[xt.length - 1] - xt[0] > 3 * 3600, `${sel} spans the 6 h range`);
  }
  await page.selectOption('#range', '1h');
  await ready();
  await docShot('dashboard', page, true);
});

await test('dashboard: shared by URL; panels rearranged and deleted in edit mode', async () => {
  const p = await context.newPage();
  watch(p);
  await p.goto(`${BASE}/?d=${dashId}&s=${encodeURIComponent(JSON.stringify({ range: '6h' }))}`);
  await ready(p);
  assert((await p.locator('[data-testid=dash-panel]').count()) === 7, 'the link opens the same dashboard');
  assert((await p.inputValue('#range')) === '6h', 'with its range');
  await p.close();
  await page.click('[data-testid=dash-edit]');
  const before = await api(`/api/strata/v1/dashboards/${dashId}`);
  const firstId = (await page.locator('[data-testid=dash-panel]').first().getAttribute('data-panel'));
  await page.locator('[data-testid=dash-panel]').first().locator('[data-testid=panel-down]').click();
  await ready();
  await page.locator(`[data-panel="${firstId}"] [data-testid=panel-narrower]`).click();
  await ready();
  await page.click('[data-testid=dash-save]');
  await page.waitForSelector('[data-testid=dash-edit]');
  const after = await api(`/api/strata/v1/dashboards/${dashId}`);
  const moved = after.panels.find((q) => q.id === firstId);
  assert(moved.w === before.panels.find((q) => q.id === firstId).w - 1, 'narrower by one column');
  assert(after.updated_ms > before.updated_ms, 'saved');
  // No two panels overlap on the grid.
  const boxes = [];
  for (const el of await page.locator('[data-testid=dash-panel]').all()) boxes.push(await el.boundingBox());
  for (let i = 0; i < boxes.length; i++)
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i];
      const b = boxes[j];
      const overlap = a.x < b.x + b.width - 1 && b.x < a.x + a.width - 1 && a.y < b.y + b.height - 1 && b.y < a.y + a.height - 1;
      assert(!overlap, `panels ${i} and ${j} overlap`);
    }
});

// ---------------------------------------------------------------- landing page and search

await test('landing page: the store by recent activity, self-monitoring apart, health', async () => {
  // Self-monitoring streams appear after the server's first base period (60 s).
  for (let i = 0; i < 90; i++) {
    if ((await api('/api/strata/v1/find?' + enc({ query: 'strata:self', limit: '1' }))).length) break;
    await sleep(1000);
  }
  await page.goto(BASE + '/');
  await ready();
  const shown = await page.locator('[data-testid=home-mine] [data-testid=home-stream]').evaluateAll((els) => els.map((e) => e.dataset.key));
  const all = await api('/api/strata/v1/find?' + enc({ query: 'and(__name:*,not(strata:self))', limit: '1000' }));
  const order = all.filter((s) => s.activity_ms).sort((a, b) => b.activity_ms[1] - a.activity_ms[1] || (a.key < b.key ? -1 : 1));
  assert(shown.length === Math.min(20, all.length), `the 20 most recent of ${all.length}: ${shown.length}`);
  const lastOf = Object.fromEntries(all.map((s) => [s.key, s.activity_ms?.[1] ?? 0]));
  for (let i = 1; i < shown.length; i++) assert(lastOf[shown[i - 1]] >= lastOf[shown[i]], `most recent first at ${i}`);
  assert(lastOf[shown[0]] === order[0].activity_ms[1], 'the newest first');
  assert(!shown.some((k) => k.includes('strata:self')), 'no self-monitoring among the user’s streams');
  const selfs = await api('/api/strata/v1/find?' + enc({ query: 'strata:self', limit: '1000' }));
  assert(selfs.length > 0, 'the server monitors itself');
  assert((await page.innerText('[data-testid=home-self] summary')).includes(`${selfs.length} streams`), 'self-monitoring counted apart');
  assert((await page.innerText('[data-testid=health-status]')) === 'OK', 'healthy');
  const metrics = await (await fetch(BASE + '/metrics')).text();
  const accepted = [...metrics.matchAll(/^strata_ingest_samples_accepted_total\{[^}]*\} (\d+)$/gm)].reduce((a, m) => a + Number(m[1]), 0);
  const shownAccepted = await page.innerText('[data-testid=health-accepted]');
  assert(Math.abs(parseSi(shownAccepted) - accepted) <= 0.01 * accepted, `accepted ${shownAccepted} ≈ /metrics ${accepted}`);
  await docShot('home', page, true);
});

await test('landing page: every example runs as shown and its data arrives', async () => {
  const snippets = await page.locator('[data-testid^=snippet-][data-runnable=true]').evaluateAll((els) => els.map((e) => [e.dataset.testid, e.textContent]));
  const ids = snippets.map(([id]) => id).sort();
  assert(JSON.stringify(ids) === JSON.stringify(['snippet-graphite', 'snippet-httptrap', 'snippet-influx', 'snippet-otlp', 'snippet-statsd']), `runnable examples: ${ids}`);
  const text = Object.fromEntries(snippets);
  assert(text['snippet-statsd'].includes(`/dev/udp/${STATSD.replace(':', '/')}`), `statsd example uses this server's port ${STATSD}`);
  assert(text['snippet-graphite'].includes(`/dev/tcp/${GRAPHITE.replace(':', '/')}`), `graphite example uses ${GRAPHITE}`);
  assert((await page.innerText('[data-testid=snippet-remote_write]')).includes(`${BASE}/api/v1/write`), 'remote_write config has this address');
  for (const [id, cmd] of snippets) {
    const out = execFileSync('bash', ['-c', `set -e\n${cmd}`], { encoding: 'utf8', timeout: 20_000 });
    if (id === 'snippet-httptrap') assert(out.includes('"stats":1'), `httptrap answered ${out}`);
  }
  for (const name of ['login_latency', 'deploys', 'checkout_time', 'servers.web1.cpu', 'cpu_usage', 'queue_depth']) {
    let found = [];
    for (let i = 0; i < 50 && found.length === 0; i++) {
      found = await api('/api/strata/v1/find?' + enc({ query: `__name:${name}` }));
      if (!found.length) await sleep(200);
    }
    assert(found.length === 1, `${name} arrived`);
  }
});

await test('landing page: a host whose agent reports is offered its worksheet, made on a click', async () => {
  const host = 'web-9';
  const key = `cpu_busy_ratio|ST[cpu:total,host:${host}]`;
  const r = await fetch(`${BASE}/module/httptrap/agent/secret`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ [key]: { _type: 'h', _ts: Date.now(), _value: [0.25, 0.5, 0.75] } }),
  });
  assert(r.ok, `httptrap write ${r.status}`);
  await page.goto(BASE + '/');
  await ready();
  const button = page.locator(`[data-testid=home-hosts] button[data-host="${host}"]`);
  assert((await button.innerText()) === 'Make its worksheet', 'offered, not yet saved');
  await button.click();
  await page.waitForFunction(() => new URL(location.href).searchParams.get('s')?.includes('host-web-9'));
  await ready();
  const saved = await api(`/api/strata/v1/worksheets/host-${host}`);
  assert(saved.graphs.some((g) => g.name === 'cpu_busy_ratio'), 'the worksheet graphs the host’s CPU');
  assert((await state()).ws === `host-${host}`, 'the worksheet is open');
  await page.goto(BASE + '/');
  await ready();
  assert((await button.innerText()) === 'Open its worksheet', 'saved once, then opened');
});

await test('search: the user’s streams first, self-monitoring apart; no match says so', async () => {
  await page.goto(BASE + '/');
  await ready();
  await page.fill('#search', 'latency');
  await page.waitForSelector('#suggest li[role=option]');
  const keys = await page.locator('#suggest li[role=option]').evaluateAll((els) => els.map((e) => e.dataset.key));
  const firstSelf = keys.findIndex((k) => k.includes('strata:self'));
  assert(firstSelf > 0, `user streams come first: ${keys.slice(0, 4)}`);
  assert(keys.slice(firstSelf).every((k) => k.includes('strata:self')), 'then only self-monitoring');
  assert((await page.locator('#suggest li.sep').count()) === 1, 'one separator before self-monitoring');
  await page.fill('#search', 'no-such-stream-anywhere');
  await page.waitForFunction(() => /No stream matches/.test(document.querySelector('#search-info').textContent));
  await page.fill('#search', '');
});

// ---------------------------------------------------------------- CAQL

/** Function names of crates/query/README.md's table, braces and alternatives expanded. */
function readmeFunctions() {
  const text = fs.readFileSync(path.join(HERE, '../../crates/query/README.md'), 'utf8');
  const section = text.split('## Functions')[1].split('\n## ')[0];
  const ops = ['eq', 'ne', 'gt', 'geq', 'lt', 'leq'];
  const out = new Set();
  let previous = [];
  const splitTop = (s) => {
    const parts = [];
    let depth = 0;
    let cur = '';
    for (const ch of s) {
      if (ch === '(') depth++;
      if (ch === ')') depth--;
      if (ch === ',' && depth === 0) {
        parts.push(cur.trim());
        cur = '';
      } else cur += ch;
    }
    if (cur.trim()) parts.push(cur.trim());
    return parts;
  };
  for (const row of section.split('\n').filter((l) => l.startsWith('|') && !l.startsWith('|---') && !l.startsWith('| family'))) {
    const col = row.split('|')[2];
    for (const [, item] of col.matchAll(/`([^`]+)`/g)) {
      if (item.startsWith('%') || item.includes('*')) continue;
      const m = /^([\w:]+?):\{(.*?)\}(.*)$/.exec(item);
      let names;
      if (m) {
        let members = splitTop(m[2]).map((x) => x.replace(/\(.*\)$/, ''));
        if (members.length === 1 && members[0] === '…') members = previous;
        members = members.filter((x) => x !== '…');
        previous = members;
        names = members.flatMap((x) => x.split('/')).map((x) => `${m[1]}:${x.trim()}`);
        if (m[3].startsWith(':OP')) names = names.flatMap((n) => ops.map((o) => `${n}:${o}`));
      } else {
        const base = /^[\w:]+/.exec(item)?.[0];
        if (!base) continue;
        names = base.endsWith(':OP') ? ops.map((o) => base.replace(/OP$/, o)) : [base];
        if (base.includes(':OP')) names = ops.map((o) => base.replace(':OP', `:${o}`));
      }
      for (const n of names) out.add(n);
    }
  }
  return [...out];
}

await test('CAQL box: every documented function completes; stream names complete inside find', async () => {
  await page.goto(BASE + '/?view=explore');
  await ready();
  const ui = new Set(await page.evaluate(() => window.strata.caqlFunctions));
  const documented = readmeFunctions();
  assert(documented.length > 100, `read the README's functions (${documented.length})`);
  const missing = documented.filter((f) => !ui.has(f));
  assert(missing.length === 0, `documented but not completed: ${missing}`);
  await page.click('#caql');
  await page.keyboard.type('histogram:perc');
  await page.waitForSelector('#caql-suggest li[data-insert^="histogram:percentile"]');
  await page.keyboard.press('Tab');
  assert((await page.inputValue('#caql')) === 'histogram:percentile()', `completed: ${await page.inputValue('#caql')}`);
  await page.fill('#caql', '');
  await page.keyboard.type('find:histogram("la');
  await page.waitForSelector('#caql-suggest li[data-insert^="lat"]');
  const offered = await page.locator('#caql-suggest li').evaluateAll((els) => els.map((e) => e.dataset.insert));
  assert(offered.every((o) => !o.startsWith('reqs')), 'find:histogram offers histogram streams only');
  await page.keyboard.press('Enter');
  assert((await page.inputValue('#caql')).startsWith('find:histogram("lat")'), `stream completed: ${await page.inputValue('#caql')}`);
});

await test('CAQL box: the example works, errors point at their position', async () => {
  await page.click('#caql-example');
  await ready();
  await page.waitForSelector('[data-testid=caql-chart]');
  const q = await page.inputValue('#caql');
  const end = Math.ceil(Date.now() / 1000);
  const body = await api(`/api/strata/v1/caql?${enc({ query: q, start: String(end - 3600), end: String(end) })}`);
  assert(body.series.length >= 1 && body.series[0].values.some(([, v]) => v !== null), `the example returns data: ${q}`);
  assert(Number(await page.getAttribute('[data-testid=caql-chart]', 'data-series')) === body.series.length, 'one line per result');
  const bad = 'find:histogram("lat")\n  | histogram:percentile(99,)';
  await page.fill('#caql', bad);
  await page.click('#caql-run');
  await ready();
  await page.waitForSelector('[data-testid=caql-caret]');
  const err = await apiRaw('GET', `/api/strata/v1/caql?${enc({ query: bad })}`);
  assert(err.status === 400 && err.json.line === 2, `the API names line 2: ${err.text}`);
  assert(Number(await page.getAttribute('[data-testid=caql-caret]', 'data-column')) === err.json.column, 'the caret is at the API column');
  assert((await page.innerText('[data-testid=caql-error]')).includes(`Line 2, column ${err.json.column}`), 'the message names line and column');
  const caret = (await page.innerText('[data-testid=caql-caret]')).split('\n');
  assert(caret[1].indexOf('^') === err.json.column - 1, `the caret sits under the column: ${JSON.stringify(caret)}`);
  assert((await page.getAttribute('#caql', 'aria-invalid')) === 'true', 'the box is marked invalid');
  // A plain find of a histogram stream explains why it is empty.
  await page.fill('#caql', 'find("lat")');
  await page.click('#caql-run');
  await ready();
  await page.waitForSelector('[data-testid=caql-empty]');
  assert((await page.innerText('[data-testid=caql-empty]')).includes('find:histogram'), 'the hint names find:histogram');
  await page.fill('#caql', '');
  await page.click('#caql-run');
  await ready();
});

// ---------------------------------------------------------------- other graphs, live, zoom, theme

await test('numeric stream as a line chart, text stream as a change list', async () => {
  await page.goto(BASE + '/?view=explore');
  await ready();
  await addStream('reqs');
  await page.waitForSelector('[data-testid=graph][data-kind=numeric] [data-testid=linechart] canvas');
  const ver = (await api('/api/strata/v1/find?' + enc({ query: '__name:ver' })))[0];
  await addStream('ver', ver.key);
  await page.waitForSelector('[data-testid=graph][data-kind=text] [data-testid=changes]');
  const rows = await page.locator('[data-testid=changes] tbody tr').count();
  const end = Math.ceil(Date.now() / 1000);
  const body = await api(`/api/strata/v1/fetch?${enc({ query: '__name:ver', start: String(end - 3600), end: String(end) })}`);
  assert(rows === body.series[0].data.length, `change list rows ${rows} = API changes ${body.series[0].data.length}`);
  await shot('numeric-and-text');
});

await test('live refresh shows data written after the page was drawn', async () => {
  await page.check('#live');
  assert((await state()).live === true, 'live is in the URL');
  const before = Number(await page.getAttribute('#graphs', 'data-renders'));
  const value = `v-live-${Date.now()}`;
  const r = await fetch(`${BASE}/module/httptrap/web/secret`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ver: { _type: 's', _ts: Date.now(), _value: value } }),
  });
  assert(r.ok, `httptrap write ${r.status}`);
  await page.waitForSelector(`[data-testid=changes] td:has-text("${value}")`, { timeout: 30_000 });
  assert(Number(await page.getAttribute('#graphs', 'data-renders')) > before, 'redrawn by the timer');
  await page.uncheck('#live');
  assert(!(await state()).live, 'live off in the URL');
});

await test('zoom by drag narrows the range', async () => {
  const over = page.locator('[data-testid=graph][data-kind=numeric] .u-over');
  const box = await over.boundingBox();
  await page.mouse.move(box.x + box.width * 0.3, box.y + 20);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.5, box.y + 20, { steps: 5 });
  await page.mouse.up();
  await ready();
  const s = await state();
  assert(s.startS !== undefined && s.endS - s.startS < 3600 && s.endS - s.startS > 60, `zoomed range ${s.startS}..${s.endS}`);
  await page.selectOption('#range', '1h');
  await ready();
  assert((await state()).startS === undefined, 'back to the relative range');
});

await test('CAQL box runs a query and graphs it', async () => {
  const probe = await fetch(`${BASE}/api/strata/v1/caql?${enc({ query: 'find("reqs")' })}`);
  const body = await probe.json();
  await page.fill('#caql', 'find("reqs")');
  await page.click('#caql-run');
  await ready();
  assert(probe.ok, `the caql endpoint answers: ${JSON.stringify(body)}`);
  await page.waitForSelector('[data-testid=caql-chart]');
  assert(Number(await page.getAttribute('[data-testid=caql-chart]', 'data-series')) === body.series.length, 'one line per result series');
});

await test('dark theme', async () => {
  const before = await page.getAttribute('html', 'data-theme');
  await page.click('#theme');
  await ready();
  const after = await page.getAttribute('html', 'data-theme');
  assert(before !== after && (await state()).theme === after, `theme ${before} → ${after}`);
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert(after === 'dark' ? bg === 'rgb(17, 20, 24)' : bg === 'rgb(255, 255, 255)', `background ${bg}`);
  await shot(`theme-${after}`);
  await page.click('#theme');
  await ready();
});

// ---------------------------------------------------------------- alerts page and rule editor

// The harness wrote 20 minutes of logins from LOGIN_BASE_MS (150 slow ones, ≥ 1.5 s, a minute
// from minute 5, 3 before) and the `login-slow` ruleset (1 h window, severity 1 at
// count_above(1.5) >= 500, severity 3 at count_above(1.0) >= 100), backfilled.
const LOGIN_BASE_MS = Number(process.env.LOGIN_BASE_MS);
const MIN_MS = 60_000;
/** Slow logins in the minutes before `endMin` (exclusive), counted from what was written. */
function slowBefore(endMin) {
  let n = 0;
  for (let m = 0; m < Math.min(endMin, 20); m++) n += m >= 5 ? 150 : 3;
  return n;
}
/** The first period ends at which the 1-hour window holds ≥ 100 (severity 3: the alert fires)
 * and ≥ 500 slow logins (severity 1). */
const FIRE_MIN = [...Array(21).keys()].find((m) => slowBefore(m) >= 100);
const SEV1_MIN = [...Array(21).keys()].find((m) => slowBefore(m) >= 500);
let loginFp = '';

async function alertsReady(p = page) {
  await ready(p);
  await p.waitForSelector('[data-testid=alert-detail][data-ready="true"]', { state: 'attached' });
}

await test('alerts page: login-slow fires under severity 1 with the count of slow logins', async () => {
  assert(Number.isFinite(LOGIN_BASE_MS), 'LOGIN_BASE_MS from the harness');
  // Wait (bounded) for the backfilled ruleset to show the instance firing.
  let firing = [];
  for (let i = 0; i < 60 && firing.length === 0; i++) {
    firing = (await api('/api/strata/v1/alerts?rule=login-slow&state=firing')).alerts;
    if (!firing.length) await sleep(500);
  }
  assert(firing.length === 1, `one login-slow instance firing: ${JSON.stringify(firing)}`);
  const a = firing[0];
  loginFp = a.fp;
  assert(a.fired === LOGIN_BASE_MS + FIRE_MIN * MIN_MS, `fired at minute ${FIRE_MIN}: ${a.fired}`);
  assert(a.severity === 1, `severity 1 since minute ${SEV1_MIN}`);
  await page.goto(BASE + '/');
  await ready();
  // The landing page's alert card links to the page.
  await page.click('[data-testid=home-alerts-link]');
  await alertsReady();
  assert(new URL(page.url()).searchParams.get('s')?.includes('"view":"alerts"'), `the URL names the view: ${page.url()}`);
  const groups = await page.locator('[data-testid=sev-group]').evaluateAll((els) => els.map((e) => Number(e.dataset.severity)));
  const order = [...groups].sort((x, y) => (x || 9) - (y || 9));
  assert(groups[0] === 1 && JSON.stringify(groups) === JSON.stringify(order), `severity 1 first: ${groups}`);
  const item = page.locator(`[data-testid=sev-group][data-severity="1"] [data-testid=alert-item][data-fp="${a.fp}"]`);
  assert((await item.count()) === 1, 'login-slow is listed under severity 1');
  assert((await item.getAttribute('data-state')) === 'firing', 'shown firing');
  const summary = await item.locator('[data-testid=alert-summary]').innerText();
  assert(summary === a.annotations.summary, `the annotation as the API renders it: ${summary}`);
  // Rendered at every evaluation: the hour's window holds every slow login written.
  const expected = slowBefore(20);
  assert(summary.startsWith(`${expected} people (`), `the count of slow logins written (${expected}): ${summary}`);
  // Since-when in the UI's time zone (browser-local here), read back with Intl.
  const since = await item.locator('[data-testid=alert-since]').innerText();
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  assert(since.includes(zoneText(a.since, zone)), `since ${since} is ${zoneText(a.since, zone)} in ${zone}`);
  await docShot('alerts');
});

await test('alerts page: an instance shows its history and its expression graphed with the thresholds', async () => {
  await page.click(`[data-testid=alert-item][data-fp="${loginFp}"]`);
  await alertsReady();
  await page.waitForSelector('[data-testid=rule-graph][data-thresholds]', { state: 'attached' });
  // History: the transition into firing, as the history API has it.
  const h = (await api(`/api/strata/v1/alerts/history?fp=${loginFp}`)).transitions;
  const fire = h.find((t) => t.state === 'firing' && t.from !== 'firing');
  assert(fire, 'the history API has the transition into firing');
  const rows = await page.locator('[data-testid=history-row]').evaluateAll((els) => els.map((e) => ({ from: e.dataset.from, to: e.dataset.to, t: Number(e.dataset.t) })));
  assert(fire.t === LOGIN_BASE_MS + FIRE_MIN * MIN_MS, 'it fired at the minute the data says');
  assert(rows.some((r) => r.to === 'firing' && r.from === fire.from && r.t === fire.t), `history lists ${fire.from} → firing at ${fire.t}: ${JSON.stringify(rows)}`);
  // The severity change (3 → 1) is a transition of its own.
  assert(rows.some((r) => r.to === 'firing' && r.from === 'firing' && r.t === LOGIN_BASE_MS + SEV1_MIN * MIN_MS), 'history lists the change to severity 1');
  // Its annotation as rendered then: the slow logins written before that minute.
  const sevRow = await page.locator(`[data-testid=history-row][data-t="${LOGIN_BASE_MS + SEV1_MIN * MIN_MS}"]`).innerText();
  assert(sevRow.includes(`${slowBefore(SEV1_MIN)} people (`), `${slowBefore(SEV1_MIN)} people at minute ${SEV1_MIN}: ${sevRow}`);
  // The graph: a heatmap of the histogram stream, one solid line per level's `when` value
  // (1.5 for severity 1, 1.0 for severity 3), the `clear` dashed, the firing interval shaded.
  const graph = page.locator('[data-testid=rule-graph]');
  assert((await graph.getAttribute('data-kind')) === 'heatmap', 'histograms as a heatmap');
  const drawn = JSON.parse(await graph.getAttribute('data-thresholds'));
  const sev1 = drawn.find((d) => d.level === 1 && d.kind === 'when');
  const sev3 = drawn.find((d) => d.level === 3 && d.kind === 'when');
  assert(sev1 && sev1.value === 1.5 && sev3 && sev3.value === 1.0, `lines at 1.5 and 1.0: ${JSON.stringify(drawn)}`);
  assert(drawn.some((d) => d.level === 1 && d.kind === 'clear' && d.value === 1.5), 'the clear threshold drawn');
  assert(sev1.y < sev3.y, 'the higher value is drawn higher');
  const shaded = JSON.parse(await graph.getAttribute('data-shaded'));
  assert(shaded.length === 1 && shaded[0][0] === fire.t, `the firing interval from ${fire.t}: ${JSON.stringify(shaded)}`);
  // The pixels on each line are the level's colour.
  const px = await page.evaluate(([y1, y3]) => {
    const c = document.querySelector('[data-testid=rule-graph] canvas');
    const g = c.getContext('2d');
    const at = (y) => [...g.getImageData(Math.round(c.width * 0.5), Math.floor(y), 1, 1).data.slice(0, 3)];
    const hex = (v) => {
      const d = document.createElement('div');
      d.style.color = getComputedStyle(document.documentElement).getPropertyValue(v);
      document.body.append(d);
      const rgb = getComputedStyle(d).color.match(/\d+/g).slice(0, 3).map(Number);
      d.remove();
      return rgb;
    };
    return { l1: at(y1), l3: at(y3), c1: hex('--bad'), c3: hex('--s5') };
  }, [sev1.y, sev3.y]);
  const near = (a, b) => a.every((v, i) => Math.abs(v - b[i]) <= 40);
  assert(near(px.l1, px.c1), `severity 1 line pixel ${px.l1} ≈ ${px.c1}`);
  assert(near(px.l3, px.c3), `severity 3 line pixel ${px.l3} ≈ ${px.c3}`);
});

await test('alerts page: acknowledge with a note and until; deliveries listed from the notify API', async () => {
  await page.waitForSelector('[data-testid=ack-box]');
  // The file receiver got the firing notification.
  let n = null;
  for (let i = 0; i < 40; i++) {
    n = await api(`/api/strata/v1/notifications?fp=${loginFp}`);
    if (n.deliveries.length) break;
    await sleep(500);
  }
  assert(n.deliveries.length >= 1, 'a delivery for the alert');
  await page.click('[data-testid=alert-item][data-fp="' + loginFp + '"]');
  await alertsReady();
  const rows = await page.locator('[data-testid=delivery-row]').count();
  assert(rows === n.deliveries.length, `deliveries shown ${rows} = API ${n.deliveries.length}`);
  await page.fill('[data-testid=ack-note]', 'rolling back the deploy');
  const untilText = toInputText(Date.now() + 2 * 3600_000);
  await page.fill('[data-testid=ack-until]', untilText);
  await page.click('[data-testid=ack-submit]');
  await page.waitForSelector('[data-testid=ack-current]');
  const acks = (await api(`/api/strata/v1/notifications?fp=${loginFp}`)).acks;
  assert(acks.length === 1 && acks[0].note === 'rolling back the deploy', `the API has the note: ${JSON.stringify(acks)}`);
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  assert(zoneText(acks[0].until, zone) === untilText.replace('T', ' '), `until ${acks[0].until} is ${untilText} local`);
  assert((await page.innerText('[data-testid=ack-current]')).includes('rolling back the deploy'), 'the page shows it');
  // The list shows it too (the alerts API carries `acked`, the long poll wakes on it).
  const badge = page.locator(`[data-testid=alert-item][data-fp="${loginFp}"] [data-testid=alert-acked]`);
  await badge.waitFor();
  const listed = (await api('/api/strata/v1/alerts?rule=login-slow')).alerts.find((x) => x.fp === loginFp);
  assert(listed.acked && listed.acked.note === 'rolling back the deploy', `the alerts API has the ack: ${JSON.stringify(listed.acked)}`);
  assert((await badge.innerText()).startsWith('acknowledged'), 'the list says acknowledged');
  await page.click('[data-testid=ack-remove]');
  await page.waitForSelector('[data-testid=ack-submit]');
  assert((await api(`/api/strata/v1/notifications?fp=${loginFp}`)).acks.length === 0, 'taken back');
  await badge.waitFor({ state: 'detached' });
});

/** A datetime-local value for `ms` in the browser's (= this process's) zone, by Intl. */
function toInputText(ms) {
  const p = zoneParts(ms, Intl.DateTimeFormat().resolvedOptions().timeZone);
  return `${p.year}-${p.month}-${p.day}T${p.hour}:${p.minute}`;
}

const NEW_RULE = `[[ruleset]]
name = "login-some-slow"
expr = 'find:histogram("login")'
window = "rolling:merge(5m)"
annotations = { summary = "{{ count_above(1.5) }} slow logins" }

[[ruleset.severity]]
level = 2
when = "count_above(1.5) >= 100"
`;

await test('rule editor: backtest shows a new rule’s transitions graphed with thresholds, then it is saved', async () => {
  await page.goto(`${BASE}/?view=rules`);
  await ready();
  assert((await api('/api/strata/v1/rules')).rules.every((r) => r.name !== 'login-some-slow'), 'not saved yet');
  await page.click('[data-testid=rule-new]');
  await page.fill('[data-testid=rule-text]', NEW_RULE);
  await page.click('[data-testid=rule-backtest]');
  await page.waitForSelector('[data-testid=backtest][data-ready="true"]', { state: 'attached' });
  // The same backtest through the API, over the range the page used (the last hour).
  const rows = await page.locator('[data-testid=backtest-row]').evaluateAll((els) => els.map((e) => ({ from: e.dataset.from, to: e.dataset.to, t: Number(e.dataset.t) })));
  const fire = rows.find((r) => r.to === 'firing');
  // 5-minute window: minutes 1–5 hold 4 × 3 + 150 = 162 ≥ 100 at the end of minute 5.
  assert(fire && fire.from === 'ok' && fire.t === LOGIN_BASE_MS + 6 * MIN_MS, `fires at minute 6: ${JSON.stringify(rows)}`);
  const end = Date.now();
  const b = await (await fetch(`${BASE}/api/strata/v1/rules/evaluate?${enc({ start: String((end - 3600_000) / 1000), end: String(end / 1000) })}`, { method: 'POST', body: NEW_RULE })).json();
  const apiFire = b.transitions.find((t) => t.state === 'firing');
  assert(apiFire && apiFire.t === fire.t, 'the API backtest agrees');
  const graph = page.locator('[data-testid=backtest] [data-testid=rule-graph]');
  await graph.waitFor();
  const drawn = JSON.parse(await graph.getAttribute('data-thresholds'));
  assert(drawn.length === 1 && drawn[0].level === 2 && drawn[0].value === 1.5, `the threshold at 1.5: ${JSON.stringify(drawn)}`);
  const shaded = JSON.parse(await graph.getAttribute('data-shaded'));
  assert(shaded.length >= 1 && shaded[0][0] === fire.t, `firing shaded from ${fire.t}: ${JSON.stringify(shaded)}`);
  await shot('rules-backtest');
  await page.click('[data-testid=rule-save]');
  await page.waitForSelector('[data-testid=rule-item][data-name="login-some-slow"]');
  const saved = await api('/api/strata/v1/rules/login-some-slow');
  assert(saved.read_only === false && saved.spec.severity[0].when === 'count_above(1.5) >= 100', 'saved through the API');
});

await test('rule editor: validation errors point at their line; file rulesets are read-only', async () => {
  await page.click('[data-testid=rule-new]');
  const bad = NEW_RULE.replace('name = "login-some-slow"', 'name = "broken"').replace('count_above(1.5) >= 100', 'count_abve(1.5) >= 100');
  await page.fill('[data-testid=rule-text]', bad);
  await page.click('[data-testid=rule-save]');
  await page.waitForSelector('[data-testid=rule-error-caret]');
  const line = Number(await page.getAttribute('[data-testid=rule-error-caret]', 'data-line'));
  const column = Number(await page.getAttribute('[data-testid=rule-error-caret]', 'data-column'));
  const lines = bad.split('\n');
  assert(lines[line - 1].includes('count_abve'), `line ${line} is the bad condition: ${lines[line - 1]}`);
  assert(lines[line - 1].slice(column - 1).startsWith('count_abve'), `column ${column} is where it starts`);
  assert((await page.getAttribute('[data-testid=rule-text]', 'aria-invalid')) === 'true', 'the editor is marked invalid');
  const r = await fetch(`${BASE}/api/strata/v1/rules/broken`);
  assert(r.status === 404, 'nothing saved');
  // A TOML syntax error: the parser's position.
  await page.fill('[data-testid=rule-text]', 'name = "broken"\nexpr = \n');
  await page.click('[data-testid=rule-backtest]');
  await page.waitForSelector('[data-testid=rule-error-caret][data-line="2"]');
  // The rules file's ruleset: shown, not editable.
  await page.click('[data-testid=rule-open][data-name="lat-p99"]');
  assert((await page.getAttribute('[data-testid=rule-item][data-name="lat-p99"]', 'data-read-only')) === 'true', 'listed read-only');
  assert(await page.locator('[data-testid=rule-text]').evaluate((e) => e.readOnly), 'the text is read-only');
  assert(await page.locator('[data-testid=rule-save]').isDisabled(), 'no save');
  assert((await page.locator('[data-testid=rule-text]').inputValue()).includes('percentile(99) > 1000'), 'its definition is shown');
});

// ---------------------------------------------------------------- maintenance windows and routes

/** The three-letter weekday (`mon`) of `ms` in an IANA zone, by Intl. */
function weekdayIn(ms, timeZone) {
  return new Intl.DateTimeFormat('en-US', { timeZone, weekday: 'short' }).format(new Date(ms)).toLowerCase().slice(0, 3);
}
const BROWSER_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;

async function windowsReady(p = page) {
  await ready(p);
  await p.waitForSelector('[data-testid=mw-list]');
}

/** Fills and sends the form for a weekly window. */
async function addWeekly(name, day, at, duration, zone, matcher) {
  await page.fill('[data-testid=mw-name]', name);
  await page.selectOption('[data-testid=mw-kind]', 'weekly');
  await page.check(`[data-testid=mw-days-${day}]`);
  await page.fill('[data-testid=mw-at]', at);
  await page.fill('[data-testid=mw-duration]', duration);
  await page.selectOption('[data-testid=mw-timezone]', zone);
  await page.fill('[data-testid=mw-matchers]', matcher);
  await page.check('[data-testid=mw-severities-2]');
  await page.click('[data-testid=mw-submit]');
  await page.waitForSelector(`[data-testid=mw-item][data-name="${name}"]`);
  // The form is reset for the next one by reloading the page.
}

await test('maintenance: weekly windows added through the form are listed active or not as the server says, in the UI’s zone', async () => {
  await page.goto(BASE + '/');
  await ready();
  await page.click('nav a[data-view=maintenance]');
  await windowsReady();
  // The zone picker defaults to the browser's zone; every window must end, and the form says so.
  assert((await page.inputValue('[data-testid=mw-timezone]')) === BROWSER_ZONE, `zone picker defaults to ${BROWSER_ZONE}`);
  assert((await page.innerText('[data-testid=mw-must-end]')).includes('open-ended windows are refused'), 'the form says windows must end');
  // Active: began 30 minutes ago in Berlin, lasts 2 h. Inactive: two days from now, 12:00 UTC.
  const now = Date.now();
  const began = now - 30 * 60_000;
  const berlin = zoneParts(began, 'Europe/Berlin');
  await addWeekly('berlin-now', weekdayIn(began, 'Europe/Berlin'), `${berlin.hour}:${berlin.minute}`, '2h', 'Europe/Berlin', 'env="staging"');
  await page.reload();
  await windowsReady();
  await addWeekly('later-utc', weekdayIn(now + 2 * 86_400_000, 'UTC'), '12:00', '1h', 'UTC', 'env="staging"');
  const ws = (await api('/api/strata/v1/maintenance')).windows;
  const a = ws.find((w) => w.name === 'berlin-now');
  const b = ws.find((w) => w.name === 'later-utc');
  assert(a && a.active === true && a.kind === 'weekly' && a.timezone === 'Europe/Berlin', `berlin-now active: ${JSON.stringify(a)}`);
  assert(a.days.length === 1 && a.severities[0] === 2 && a.matchers[0] === 'env="staging"', 'days, severities and matchers as entered');
  assert(b && b.active === false, `later-utc not active: ${JSON.stringify(b)}`);
  // Independently: it next starts at 12:00 UTC on that day, and lasts an hour.
  const next = new Date(b.next_start_ms);
  assert(next.getUTCHours() === 12 && next.getUTCMinutes() === 0 && b.next_start_ms > now && b.next_start_ms < now + 3 * 86_400_000, `next start ${next.toISOString()}`);
  assert(b.next_end_ms === b.next_start_ms + 3600_000, 'ends an hour later');
  const itemA = page.locator('[data-testid=mw-item][data-name="berlin-now"]');
  const itemB = page.locator('[data-testid=mw-item][data-name="later-utc"]');
  assert((await itemA.getAttribute('data-active')) === 'true', 'berlin-now shown active');
  assert((await itemB.getAttribute('data-active')) === 'false', 'later-utc shown inactive');
  // Times in the UI's zone (browser-local here), read back with Intl.
  const activeText = await itemA.locator('[data-testid=mw-active]').innerText();
  assert(activeText.includes(zoneText(a.next_end_ms, BROWSER_ZONE)), `until ${zoneText(a.next_end_ms, BROWSER_ZONE)}: ${activeText}`);
  const nextText = await itemB.locator('[data-testid=mw-inactive]').innerText();
  assert(nextText.includes(zoneText(b.next_start_ms, BROWSER_ZONE)) && nextText.includes(zoneText(b.next_end_ms, BROWSER_ZONE)), `next from/to in the browser's zone: ${nextText}`);
  assert((await itemA.locator('[data-testid=mw-schedule]').innerText()).includes('Europe/Berlin'), 'the schedule names its zone');
  // UTC on the toggle: the same instants in UTC.
  await page.selectOption('#tz', 'UTC');
  await windowsReady();
  const utcText = await page.locator('[data-testid=mw-item][data-name="later-utc"] [data-testid=mw-inactive]').innerText();
  assert(utcText.includes(zoneText(b.next_start_ms, 'UTC')), `in UTC: ${utcText}`);
  await page.selectOption('#tz', 'local');
  await windowsReady();
  await shot('maintenance');
});

await test('maintenance: a bad cron shows the server’s error at the cron field; a window without an end is stopped before sending', async () => {
  await page.goto(`${BASE}/?view=maintenance`);
  await windowsReady();
  await page.fill('[data-testid=mw-name]', 'bad-cron');
  await page.selectOption('[data-testid=mw-kind]', 'cron');
  await page.fill('[data-testid=mw-cron]', '61 2 * * *');
  await page.fill('[data-testid=mw-duration]', '1h');
  await page.click('[data-testid=mw-submit]');
  await page.waitForSelector('[data-testid=mw-error-cron]:not(:empty)');
  const shown = await page.innerText('[data-testid=mw-error-cron]');
  const r = await apiRaw('PUT', '/api/strata/v1/maintenance/bad-cron', JSON.stringify({ name: 'bad-cron', cron: '61 2 * * *', duration: '1h', timezone: BROWSER_ZONE }));
  assert(r.status === 400 && r.json.field === 'cron', `the API names the field: ${r.text}`);
  assert(shown === r.json.error, `the server's message at the field: ${shown}`);
  assert((await page.getAttribute('[data-testid=mw-cron]', 'aria-invalid')) === 'true', 'the cron field is marked invalid');
  assert((await page.innerText('[data-testid=mw-form-error]')) === '', 'not shown elsewhere');
  // No duration: the form says why and sends nothing.
  await page.fill('[data-testid=mw-cron]', '0 2 * * *');
  await page.fill('[data-testid=mw-duration]', '');
  await page.click('[data-testid=mw-submit]');
  await page.waitForSelector('[data-testid=mw-error-duration]:not(:empty)');
  assert((await page.innerText('[data-testid=mw-error-duration]')).includes('open-ended windows are refused'), 'the duration field says why');
  assert((await page.innerText('[data-testid=mw-error-cron]')) === '', 'the old error is gone');
  assert((await apiRaw('GET', '/api/strata/v1/maintenance/bad-cron')).status === 404, 'nothing was saved');
});

await test('maintenance: “Mute with a maintenance window…” from an alert prefills its labels; the window mutes it now; delete with confirm', async () => {
  await page.goto(`${BASE}/?s=${encodeURIComponent(JSON.stringify({ view: 'alerts', alert: loginFp }))}`);
  await alertsReady();
  await page.click('[data-testid=mute-alert]');
  await windowsReady();
  const a = (await api('/api/strata/v1/alerts?rule=login-slow')).alerts.find((x) => x.fp === loginFp);
  const matchers = await page.inputValue('[data-testid=mw-matchers]');
  for (const [k, v] of Object.entries(a.labels)) {
    if (k !== 'severity') assert(matchers.includes(`${k}=${JSON.stringify(v)}`), `prefilled ${k}: ${matchers}`);
  }
  const name = await page.inputValue('[data-testid=mw-name]');
  assert(name.startsWith('mute-login-slow'), `named after the rule: ${name}`);
  // One-off, from now for an hour (the form's default), in the UI's zone.
  const startText = await page.inputValue('[data-testid=mw-start]');
  await page.click('[data-testid=mw-submit]');
  const item = page.locator(`[data-testid=mw-item][data-name="${name}"]`);
  await item.waitFor();
  const w = (await api('/api/strata/v1/maintenance')).windows.find((x) => x.name === name);
  assert(w.kind === 'once' && w.active === true, `active one-off: ${JSON.stringify(w)}`);
  assert(zoneText(w.next_start_ms, BROWSER_ZONE) === startText.replace('T', ' '), `start ${startText} is the browser's local time`);
  assert(w.mutes.some((m) => m.fp === loginFp), `the API says it mutes login-slow: ${JSON.stringify(w.mutes)}`);
  assert((await item.getAttribute('data-active')) === 'true', 'shown active');
  await item.locator(`[data-testid=mw-muted][data-fp="${loginFp}"]`).waitFor();
  // The alerts page says the alert is muted, and by what.
  await page.click('[data-testid=to-alerts]');
  await alertsReady();
  const muted = page.locator(`[data-testid=alert-item][data-fp="${loginFp}"] [data-testid=alert-muted]`);
  await muted.waitFor();
  assert((await muted.innerText()).includes(name), `muted by ${name}`);
  // Delete, confirmed.
  await page.click('[data-testid=to-maintenance]');
  await windowsReady();
  let asked = '';
  page.once('dialog', (d) => {
    asked = d.message();
    void d.accept();
  });
  await page.click(`[data-testid=mw-item][data-name="${name}"] [data-testid=mw-delete]`);
  await page.locator(`[data-testid=mw-item][data-name="${name}"]`).waitFor({ state: 'detached' });
  assert(asked.includes(name), `asked first: ${asked}`);
  assert((await apiRaw('GET', `/api/strata/v1/maintenance/${encodeURIComponent(name)}`)).status === 404, 'deleted in the server');
});

function countRoutes(r) {
  return 1 + r.routes.reduce((n, c) => n + countRoutes(c), 0);
}

await test('routing tree: drawn as the API has it; the test box shows which receiver an alert reaches', async () => {
  await page.goto(`${BASE}/?view=alerts`);
  await ready();
  await page.click('[data-testid=to-routes]');
  await ready();
  await page.waitForSelector('[data-testid=route-tree]');
  const tree = await api('/api/strata/v1/routes');
  assert((await page.locator('[data-testid=route-node]').count()) === countRoutes(tree.route), 'one node per route');
  const child = tree.route.routes[0];
  assert((await page.getAttribute(`[data-testid=route-node][data-route="${child.id}"]`, 'data-receiver')) === child.receiver, `route ${child.id} → ${child.receiver}`);
  for (const [labels, want] of [['alertname=login-slow team=db', 'dba'], ['alertname="login-slow", app=web', 'oncall']]) {
    await page.fill('[data-testid=rt-labels]', labels);
    await page.click('[data-testid=rt-submit]');
    await page.waitForSelector(`[data-testid=rt-receiver][data-receiver="${want}"]`);
    const shown = await page.locator('[data-testid=rt-receiver]').evaluateAll((els) => els.map((e) => e.dataset.receiver));
    const l = Object.fromEntries(labels.split(/[\s,]+/).map((p) => p.split('=')).map(([k, v]) => [k, v.replace(/"/g, '')]));
    const t = await api('/api/strata/v1/routes/test', { method: 'POST', body: JSON.stringify({ labels: l }) });
    assert(JSON.stringify(shown) === JSON.stringify(t.receivers.map((d) => d.receiver)), `${labels}: shown ${shown}, API ${JSON.stringify(t.receivers)}`);
    assert(shown[0] === want, `${labels} reaches ${want}`);
    const hit = await page.locator('[data-testid=route-node][data-hit=true]').evaluateAll((els) => els.map((e) => e.dataset.route));
    assert(JSON.stringify(hit) === JSON.stringify(t.receivers.map((d) => d.route)), `the route taken is marked: ${hit}`);
  }
  await page.fill('[data-testid=rt-labels]', 'team');
  await page.click('[data-testid=rt-submit]');
  await page.waitForSelector('[data-testid=rt-error]:not(:empty)');
  assert((await page.innerText('[data-testid=rt-error]')).includes('is not name=value'), 'a label without a value is named');
  // Every receiver has its test button; a test notification to one is delivered.
  const rows = await page.locator('[data-testid=rt-receiver-row]').evaluateAll((els) => els.map((e) => e.dataset.receiver));
  assert(JSON.stringify(rows) === JSON.stringify(tree.receivers), `one test button per receiver: ${rows}`);
  await page.click('[data-testid=rt-test][data-receiver="dba"]');
  await page.waitForSelector('[data-testid=rt-receiver-row][data-receiver="dba"] [data-testid=rt-test-result][data-delivered]');
  const delivered = await page.getAttribute('[data-testid=rt-receiver-row][data-receiver="dba"] [data-testid=rt-test-result]', 'data-delivered');
  assert(delivered === 'true', `the test notification to dba: ${await page.innerText('[data-testid=rt-receiver-row][data-receiver="dba"]')}`);
  await shot('routes');
});

// ---------------------------------------------------------------- layout and accessibility

function overlaps(a, b) {
  return a.x < b.x + b.width - 0.5 && b.x < a.x + a.width - 0.5 && a.y < b.y + b.height - 0.5 && b.y < a.y + a.height - 0.5;
}

await test('800 px wide: nothing overlaps, nothing scrolls sideways; the sidebar border runs the whole height', async () => {
  // At full width first: the sidebar is as tall as the page.
  await page.goto(exploreUrl({ graphs: [{ query: '__name:lat', key: latSeries.key, kind: 'histogram' }] }));
  await ready();
  const aside = await page.locator('aside').boundingBox();
  const content = await page.locator('.content').boundingBox();
  assert(aside.height >= content.height - 1, `sidebar ${aside.height} px as tall as the content ${content.height} px`);
  const p = await context.newPage();
  watch(p);
  await p.setViewportSize({ width: 800, height: 1000 });
  try {
    await p.goto(exploreUrl({ graphs: [{ query: '__name:lat', key: latSeries.key, kind: 'histogram' }] }));
    await ready(p);
    const heat = await p.locator('.heatcol').boundingBox();
    const side = await p.locator('[data-testid=whole-range]').boundingBox();
    assert(!overlaps(heat, side), `heatmap ${JSON.stringify(heat)} and whole-range column ${JSON.stringify(side)} do not overlap`);
    const plot = await p.locator('[data-testid=heatmap] .u-wrap').boundingBox();
    assert(plot.x + plot.width <= 800, `the heatmap fits (${plot.x + plot.width})`);
    const wide = await p.evaluate(() => document.documentElement.scrollWidth);
    assert(wide <= 800, `no sideways scrolling (${wide})`);
    await shot('narrow-explore', p);
    await p.goto(`${BASE}/?d=${dashId}`);
    await ready(p);
    const boxes = [];
    for (const el of await p.locator('[data-testid=dash-panel]').all()) boxes.push(await el.boundingBox());
    for (let i = 0; i < boxes.length; i++) {
      assert(boxes[i].x + boxes[i].width <= 800, `panel ${i} fits`);
      for (let j = i + 1; j < boxes.length; j++) assert(!overlaps(boxes[i], boxes[j]), `panels ${i} and ${j} overlap at 800 px`);
    }
    assert((await p.evaluate(() => document.documentElement.scrollWidth)) <= 800, 'dashboard: no sideways scrolling');
    await shot('narrow-dashboard', p);
    await p.goto(BASE + '/');
    await ready(p);
    assert((await p.evaluate(() => document.documentElement.scrollWidth)) <= 800, 'landing page: no sideways scrolling');
    // The alerts page with an instance open, and the rule editor after a backtest.
    await p.goto(`${BASE}/?s=${encodeURIComponent(JSON.stringify({ view: 'alerts', alert: loginFp }))}`);
    await alertsReady(p);
    await p.waitForSelector('[data-testid=rule-graph][data-thresholds]', { state: 'attached' });
    const list = await p.locator('[data-testid=alert-groups]').boundingBox();
    const detail = await p.locator('[data-testid=alert-detail]').boundingBox();
    assert(!overlaps(list, detail), `alert list ${JSON.stringify(list)} and detail ${JSON.stringify(detail)} do not overlap`);
    assert(detail.x + detail.width <= 800, 'the detail fits');
    const graphBox = await p.locator('[data-testid=rule-graph] .u-wrap').boundingBox();
    assert(graphBox.x + graphBox.width <= 800, `the graph fits (${graphBox.x + graphBox.width})`);
    assert((await p.evaluate(() => document.documentElement.scrollWidth)) <= 800, 'alerts page: no sideways scrolling');
    await shot('narrow-alerts', p);
    await p.goto(`${BASE}/?s=${encodeURIComponent(JSON.stringify({ view: 'rules', rule: 'login-slow' }))}`);
    await ready(p);
    await p.click('[data-testid=rule-backtest]');
    await p.waitForSelector('[data-testid=backtest][data-ready="true"]', { state: 'attached' });
    const rl = await p.locator('[data-testid=rule-list]').boundingBox();
    const ed = await p.locator('[data-testid=rule-text]').boundingBox();
    assert(!overlaps(rl, ed), 'rule list and editor do not overlap');
    assert((await p.evaluate(() => document.documentElement.scrollWidth)) <= 800, 'rule editor: no sideways scrolling');
    await shot('narrow-rules', p);
    await p.goto(`${BASE}/?view=maintenance`);
    await windowsReady(p);
    const mwl = await p.locator('[data-testid=mw-list]').boundingBox();
    const mwf = await p.locator('[data-testid=mw-form]').boundingBox();
    assert(!overlaps(mwl, mwf), 'window list and form do not overlap');
    assert(mwf.x + mwf.width <= 800, 'the form fits');
    assert((await p.evaluate(() => document.documentElement.scrollWidth)) <= 800, 'maintenance: no sideways scrolling');
    await shot('narrow-maintenance', p);
    await p.goto(`${BASE}/?view=routes`);
    await ready(p);
    await p.waitForSelector('[data-testid=route-tree]');
    assert((await p.evaluate(() => document.documentElement.scrollWidth)) <= 800, 'routing tree: no sideways scrolling');
  } finally {
    await p.close();
  }
});

await test('accessibility: axe-core finds no serious violations (light and dark)', async () => {
  const axePath = path.join(HERE, '../node_modules/axe-core/axe.min.js');
  // axe-core goes in as an inline script, which the UI's Content-Security-Policy refuses as it
  // would any injected script; the audit's own context bypasses the policy.
  const axeContext = await browser.newContext({ viewport: { width: 1400, height: 1000 }, bypassCSP: true });
  const p = await axeContext.newPage();
  watch(p);
  const report = [];
  try {
    for (const theme of ['light', 'dark']) {
      for (const [name, url] of [
        ['home', `${BASE}/?s=${encodeURIComponent(JSON.stringify({ view: 'home', theme }))}`],
        ['explore', exploreUrl({ theme, graphs: [{ query: '__name:lat', key: latSeries.key, kind: 'histogram', objective: 0.1, sel: clickedTs }, { query: '__name:reqs', kind: 'numeric' }, { query: '__name:ver', kind: 'text' }] })],
        ['dashboard', `${BASE}/?d=${dashId}&s=${encodeURIComponent(JSON.stringify({ theme }))}`],
        ['dashboards', `${BASE}/?view=dashboards&s=${encodeURIComponent(JSON.stringify({ theme }))}`],
        ['alerts', `${BASE}/?s=${encodeURIComponent(JSON.stringify({ view: 'alerts', alert: loginFp, theme }))}`],
        ['rules', `${BASE}/?s=${encodeURIComponent(JSON.stringify({ view: 'rules', rule: 'login-slow', theme }))}`],
        ['maintenance', `${BASE}/?s=${encodeURIComponent(JSON.stringify({ view: 'maintenance', mute: loginFp, theme }))}`],
        ['routes', `${BASE}/?s=${encodeURIComponent(JSON.stringify({ view: 'routes', theme }))}`],
      ]) {
        await p.goto(url);
        await ready(p);
        if (name === 'alerts') await alertsReady(p);
        if (name === 'maintenance') {
          await windowsReady(p);
          // An error shown at a field is audited too.
          await p.selectOption('[data-testid=mw-kind]', 'cron');
          await p.fill('[data-testid=mw-duration]', '');
          await p.click('[data-testid=mw-submit]');
          await p.waitForSelector('[data-testid=mw-error-duration]:not(:empty)');
        }
        if (name === 'routes') {
          await p.waitForSelector('[data-testid=route-tree]');
          await p.fill('[data-testid=rt-labels]', 'alertname=login-slow team=db');
          await p.click('[data-testid=rt-submit]');
          await p.waitForSelector('[data-testid=rt-receiver]');
        }
        if (name === 'rules') {
          await p.click('[data-testid=rule-backtest]');
          await p.waitForSelector('[data-testid=backtest][data-ready="true"]', { state: 'attached' });
        }
        await p.addScriptTag({ path: axePath });
        const r = await p.evaluate(async () => {
          const out = await window.axe.run(document, { resultTypes: ['violations'] });
          return out.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')) }));
        });
        const serious = r.filter((v) => v.impact === 'serious' || v.impact === 'critical');
        report.push({ theme, page: name, violations: r });
        assert(serious.length === 0, `${name} (${theme}): ${JSON.stringify(serious, null, 1)}`);
      }
    }
  } finally {
    fs.writeFileSync(path.join(ARTIFACTS, 'axe.json'), JSON.stringify(report, null, 2));
    await p.close();
    await axeContext.close();
  }
});

await test('favicon and JSON for unknown paths', async () => {
  const r = await fetch(`${BASE}/favicon.ico`);
  assert(r.status === 200 && r.headers.get('content-type') === 'image/x-icon', `favicon.ico ${r.status} ${r.headers.get('content-type')}`);
  const bytes = new Uint8Array(await r.arrayBuffer());
  assert(bytes[0] === 0 && bytes[1] === 0 && bytes[2] === 1, 'an ICO file');
  const svg = await fetch(`${BASE}/favicon.svg`);
  assert(svg.status === 200 && svg.headers.get('content-type') === 'image/svg+xml', 'favicon.svg');
});

// ---------------------------------------------------------------- performance

await test('10^5 heatmap cells: drawn, clickable, draw time reported', async () => {
  const big = (await api('/api/strata/v1/find?' + enc({ query: '__name:big' })))[0];
  assert(big && big.kind === 'histogram', 'the harness wrote the big stream');
  const query = `__name:big`;
  const st = { view: 'explore', graphs: [{ query, key: big.key, kind: 'histogram' }], range: '24h', theme: 'light' };
  const t0 = Date.now();
  await page.goto(`${BASE}/?s=${encodeURIComponent(JSON.stringify(st))}`);
  await ready();
  const loadMs = Date.now() - t0;
  const cells = Number(await page.getAttribute('[data-testid=draw-ms]', 'data-cells'));
  const drawMs = Number(await page.getAttribute('[data-testid=draw-ms]', 'data-ms'));
  const end = Math.ceil(Date.now() / 1000);
  const body = await api(`/api/strata/v1/fetch?${enc({ query, start: String(end - 86400), end: String(end), period: '1m' })}`);
  const apiCells = body.series[0].data.reduce((n, d) => n + (d.value ? d.value.bins.filter(([v]) => v > 0).length : 0), 0);
  assert(apiCells >= 100000, `the API holds ≥ 10^5 bins (${apiCells})`);
  assert(cells === apiCells, `heatmap cells ${cells} = API bins ${apiCells}`);
  const over = page.locator('[data-testid=heatmap] .u-over');
  const box = await over.boundingBox();
  const t1 = Date.now();
  await page.mouse.click(box.x + box.width * 0.9, box.y + box.height * 0.5);
  await page.waitForSelector('[data-testid=breakout-ts]');
  const clickMs = Date.now() - t1;
  const redrawMs = Number(await page.getAttribute('[data-testid=draw-ms]', 'data-ms'));
  const ts = Number(await page.getAttribute('[data-testid=breakout-ts]', 'data-ms'));
  const slice = body.series[0].data.find((d) => d.ts_ms === ts);
  const stored = slice && slice.value ? slice.value.bins.reduce((n, [, , c]) => n + c, 0) : 0;
  assert(Number(await page.getAttribute('[data-testid=breakout-count]', 'data-value')) === stored, 'breakout count = stored');
  console.log(`     10^5 cells: first draw ${drawMs.toFixed(1)} ms, redraw after click ${redrawMs.toFixed(1)} ms, click→breakout ${clickMs} ms, page load with fetch ${loadMs} ms`);
  fs.writeFileSync(path.join(ARTIFACTS, 'heatmap-100k.json'), JSON.stringify({ cells, drawMs, redrawMs, clickMs, loadMs }, null, 2));
  await shot('heatmap-100k');
});

await test('render benchmark (10^5 and 4·10^5 cells, median of 7)', async () => {
  const out = {};
  for (const [slices, bins] of [[1000, 100], [2000, 200]]) {
    for (const mode of ['path', 'image', undefined]) {
      const r = await page.evaluate(([s, b, m]) => window.strataBench(s, b, 7, m), [slices, bins, mode]);
      assert(r.cells === slices * bins && r.ms.length === 7, 'ran every cell and run');
      out[`${r.cells} ${mode ?? 'auto'}(${r.mode})`] = { median_ms: Number(r.median.toFixed(1)), runs_ms: r.ms.map((x) => Number(x.toFixed(1))) };
    }
  }
  fs.writeFileSync(path.join(ARTIFACTS, 'render-bench.json'), JSON.stringify(out, null, 2));
  for (const [k, v] of Object.entries(out)) console.log(`     bench ${k}: median ${v.median_ms} ms`);
});

await test('no uncaught page errors', async () => {
  assert(pageErrors.length === 0, pageErrors.join('\n'));
});

await browser.close();
const passed = results.filter((r) => r.ok).length;
fs.writeFileSync(path.join(ARTIFACTS, 'results.json'), JSON.stringify(results, null, 2));
console.log(`${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
