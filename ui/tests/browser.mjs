// Browser tests of the web UI against a running `strata serve` (started, and filled with data
// through httptrap, by crates/server/tests/ui_browser.rs). Every expectation is read back from
// the server's API, never from the UI's own code.
//
// Env: STRATA_URL (http://127.0.0.1:port), ARTIFACTS (directory for screenshots and the render
// benchmark), CHROMIUM (default /usr/bin/chromium). Prints one line per test and a closing
// `N passed, N failed`; exits 1 if anything failed.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';

const BASE = process.env.STRATA_URL;
const ARTIFACTS = process.env.ARTIFACTS ?? 'artifacts';
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
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

async function api(pathAndQuery) {
  const r = await fetch(BASE + pathAndQuery);
  const body = await r.json();
  if (!r.ok) throw new Error(`${pathAndQuery}: ${r.status} ${JSON.stringify(body)}`);
  return body;
}
function pow10(e) {
  return Number(`1e${e}`);
}

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-gpu'],
});
const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
const page = await context.newPage();
page.setDefaultTimeout(STEP_TIMEOUT_MS);
const consoleErrors = [];
page.on('pageerror', (e) => consoleErrors.push(String(e)));
async function shot(name) {
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}
async function ready() {
  await page.waitForSelector('#graphs[data-ready="true"]');
}
async function state() {
  const s = new URL(page.url()).searchParams.get('s');
  return s ? JSON.parse(s) : {};
}
async function addStream(text) {
  await page.fill('#search', text);
  await page.waitForSelector('#suggest li');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Enter');
  await ready();
}

// The histogram stream the harness wrote: the first histogram whose name is `lat`.
const latSeries = (await api('/api/strata/v1/find?query=' + encodeURIComponent('__name:lat'))).find((s) => s.kind === 'histogram');
assert(latSeries, 'the harness wrote a histogram stream named lat');

async function sliceFromApi(tsMs, transform) {
  const g = (await state()).graphs[0];
  const q = new URLSearchParams({ query: g.query, start: String(tsMs / 1000), end: String(tsMs / 1000 + 60), period: '1m' });
  if (transform) q.set('transform', transform);
  const body = await api(`/api/strata/v1/fetch?${q}`);
  const s = body.series.find((x) => x.key === latSeries.key);
  assert(s, 'the API returns the stream');
  const slice = s.data.find((d) => d.ts_ms === tsMs);
  assert(slice, `the API has the slice ${tsMs}`);
  return slice.value;
}

await test('open a histogram stream and see its heatmap', async () => {
  await page.goto(BASE + '/');
  await page.fill('#search', 'la');
  await page.waitForSelector(`#suggest li[data-key="${latSeries.key}"]`);
  await page.click(`#suggest li[data-key="${latSeries.key}"]`);
  await ready();
  const panel = page.locator('[data-testid=graph][data-kind=histogram]');
  assert((await panel.count()) === 1, 'one histogram panel');
  const cells = Number(await page.getAttribute('[data-testid=draw-ms]', 'data-cells'));
  // Every positive bin of every slice in range is a cell.
  const st = await state();
  const body = await api(`/api/strata/v1/fetch?${new URLSearchParams({ query: st.graphs[0].query, start: String(Math.ceil(Date.now() / 1000) - 3600), end: String(Math.ceil(Date.now() / 1000)), period: '1m' })}`);
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
  const shown = Number(await page.textContent('[data-testid=breakout-count]'));
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
  const count = Number(await page.textContent('[data-testid=breakout-count]'));
  assertClose(Number(await page.getAttribute('[data-testid=objective-count]', 'data-value')), (1 - iq[0]) * count, 'count above');
  // The integrated total over the range, from per-slice API answers.
  const st = await state();
  const end = Math.ceil(Date.now() / 1000);
  const q = (t) => `/api/strata/v1/fetch?${new URLSearchParams({ query: st.graphs[0].query, start: String(end - 3600), end: String(end), period: '1m', ...(t ? { transform: t } : {}) })}`;
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
  assert((await state()).overlays.p99 === true, 'p99 on again');
});

await test('keyboard: arrow keys move the breakout to the next slice', async () => {
  await page.focus('[data-testid=heatmap]');
  await page.keyboard.press('ArrowLeft');
  const ts = Number(await page.getAttribute('[data-testid=breakout-ts]', 'data-ms'));
  assert(ts < clickedTs && (clickedTs - ts) % 60000 === 0, `moved left by whole slices (${clickedTs} → ${ts})`);
  const value = await sliceFromApi(ts);
  const stored = value.bins.reduce((n, [, , c]) => n + c, 0);
  assert(Number(await page.textContent('[data-testid=breakout-count]')) === stored, 'breakout follows the keyboard');
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

await test('save and reopen a worksheet', async () => {
  await page.fill('#ws-name', 'latency review');
  await page.click('#ws-save');
  await page.waitForSelector('[data-testid=ws-open]:has-text("latency review")');
  const list = await api('/api/strata/v1/worksheets');
  const ws = list.find((w) => w.name === 'latency review');
  assert(ws, 'the server lists the worksheet');
  const stored = await api(`/api/strata/v1/worksheets/${ws.id}`);
  assert(stored.graphs.length === 1 && stored.graphs[0].key === latSeries.key, 'the server stored the graph');
  await page.goto(BASE + '/');
  await page.waitForSelector('[data-testid=ws-open]:has-text("latency review")');
  assert((await page.locator('[data-testid=graph]').count()) === 0, 'a fresh page has no graphs');
  await page.click('[data-testid=ws-open]:has-text("latency review")');
  await ready();
  await page.waitForSelector('[data-testid=graph][data-kind=histogram]');
  assert((await page.inputValue('[data-testid=objective-input]')) === '0.1', 'objective reopened');
  assert((await state()).ws === ws.id, 'the worksheet id is in the URL');
  await shot('worksheet-reopened');
});

await test('edit and delete a worksheet; the API names bad input', async () => {
  page.once('dialog', (d) => d.accept());
  const id = (await state()).ws;
  await page.fill('#ws-name', 'latency review v2');
  await page.click('#ws-save');
  await page.waitForSelector('[data-testid=ws-open]:has-text("latency review v2")');
  const edited = await api(`/api/strata/v1/worksheets/${id}`);
  assert(edited.name === 'latency review v2' && edited.id === id, 'saved over the same id');
  await page.click('#ws-save-new');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=ws-item]').length === 2);
  const copyId = (await state()).ws;
  assert(copyId !== id, 'save as new made another worksheet');
  await page.click(`[data-testid=ws-item]:has([data-id="${copyId}"]) [data-testid=ws-delete]`);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=ws-item]').length === 1);
  const list = await api('/api/strata/v1/worksheets');
  assert(list.length === 1 && list[0].id === id, `the copy is deleted on the server (${JSON.stringify(list)})`);
  const bad = async (method, p, body) => {
    const r = await fetch(BASE + p, { method, body, headers: { 'content-type': 'application/json' } });
    return [r.status, (await r.json()).error];
  };
  let [code, msg] = await bad('POST', '/api/strata/v1/worksheets', '{"graphs":[]}');
  assert(code === 400 && msg.includes('`name`'), `missing name: ${code} ${msg}`);
  [code, msg] = await bad('POST', '/api/strata/v1/worksheets', '{"name":"x","graphs":');
  assert(code === 400 && msg.includes('not JSON'), `broken JSON: ${code} ${msg}`);
  [code, msg] = await bad('GET', '/api/strata/v1/worksheets/ws-none');
  assert(code === 404 && msg.includes('ws-none'), `unknown id: ${code} ${msg}`);
  [code, msg] = await bad('PUT', '/api/strata/v1/worksheets/a.b', '{"name":"x","graphs":[]}');
  assert(code === 400 && msg.includes('not a worksheet id'), `bad id: ${code} ${msg}`);
});

await test('numeric stream as a line chart, text stream as a change list', async () => {
  await addStream('reqs');
  await page.waitForSelector('[data-testid=graph][data-kind=numeric] [data-testid=linechart] canvas');
  await addStream('ver');
  await page.waitForSelector('[data-testid=graph][data-kind=text] [data-testid=changes]');
  const rows = await page.locator('[data-testid=changes] tbody tr').count();
  const end = Math.ceil(Date.now() / 1000);
  const body = await api(`/api/strata/v1/fetch?${new URLSearchParams({ query: '__name:ver', start: String(end - 3600), end: String(end) })}`);
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
  // The refresh interval is 10 s; no click or reload happens here.
  await page.waitForSelector(`[data-testid=changes] td:has-text("${value}")`, { timeout: 30_000 });
  assert(Number(await page.getAttribute('#graphs', 'data-renders')) > before, 'redrawn by the timer');
  await page.uncheck('#live');
  assert((await state()).live === false, 'live off in the URL');
});

await test('zoom by drag narrows the range', async () => {
  const over = page.locator('[data-testid=graph][data-kind=histogram] .u-over');
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
  const probe = await fetch(`${BASE}/api/strata/v1/caql?query=${encodeURIComponent('find("reqs")')}`);
  assert(probe.status !== 404, 'the caql endpoint exists');
  const body = await probe.json();
  await page.fill('#caql', 'find("reqs")');
  await page.click('#caql-run');
  await ready();
  if (probe.ok) {
    await page.waitForSelector('[data-testid=caql-chart]');
    assert(Number(await page.getAttribute('[data-testid=caql-chart]', 'data-series')) === body.series.length, 'one line per result series');
  } else {
    const shown = await page.textContent('[data-testid=caql-error]');
    assert(shown.includes(body.error), `the server's error is shown: ${shown}`);
  }
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
});

await test('10^5 heatmap cells: drawn, clickable, draw time reported', async () => {
  const big = (await api('/api/strata/v1/find?query=' + encodeURIComponent('__name:big')))[0];
  assert(big && big.kind === 'histogram', 'the harness wrote the big stream');
  const query = `__name:big`;
  const st = { graphs: [{ query, key: big.key, kind: 'histogram' }], range: '24h', overlays: { p50: true, p90: true, p99: true }, theme: 'light', live: false };
  const t0 = Date.now();
  await page.goto(`${BASE}/?s=${encodeURIComponent(JSON.stringify(st))}`);
  await ready();
  const loadMs = Date.now() - t0;
  const cells = Number(await page.getAttribute('[data-testid=draw-ms]', 'data-cells'));
  const drawMs = Number(await page.getAttribute('[data-testid=draw-ms]', 'data-ms'));
  const end = Math.ceil(Date.now() / 1000);
  const body = await api(`/api/strata/v1/fetch?${new URLSearchParams({ query, start: String(end - 86400), end: String(end), period: '1m' })}`);
  const apiCells = body.series[0].data.reduce((n, d) => n + (d.value ? d.value.bins.filter(([v]) => v > 0).length : 0), 0);
  assert(apiCells >= 100000, `the API holds ≥ 10^5 bins (${apiCells})`);
  assert(cells === apiCells, `heatmap cells ${cells} = API bins ${apiCells}`);
  // Interactive: a click opens the breakout (a redraw of all cells plus the breakout box).
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
  assert(Number(await page.textContent('[data-testid=breakout-count]')) === stored, 'breakout count = stored');
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
  assert(consoleErrors.length === 0, consoleErrors.join('\n'));
});

await browser.close();
const passed = results.filter((r) => r.ok).length;
fs.writeFileSync(path.join(ARTIFACTS, 'results.json'), JSON.stringify(results, null, 2));
console.log(`${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
