// The histogram graph (heatmap + overlays + objective + breakout + merged histogram), numeric
// line charts and text change lists.
import uPlot from 'uplot';
import * as api from './api';
import { allocCells, drawCells, levelOf, type Cells } from './heatmap';
import { bins, fmt, inverseQuantile, mean, merge, quantile, total, type Bin, type RawBin } from './hist';
import type { Graph, State } from './state';

export interface Ctx {
  state: State;
  startS: number;
  endS: number;
  period?: string;
  /** The state changed (URL to update); `refetch` when data must be read again. */
  changed(refetch: boolean): void;
  zoom(startS: number, endS: number): void;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...kids: Array<Node | string>): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
}
export { el };

function css(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

function timeLabel(ms: number): string {
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.000Z$/, 'Z');
}

function axes(): uPlot.Axis[] {
  const stroke = css('--fg');
  const grid = { stroke: css('--grid'), width: 1 };
  return [
    { stroke, grid, ticks: grid },
    { stroke, grid, ticks: grid, size: 60 },
  ];
}

function chartWidth(host: HTMLElement): number {
  return Math.max(300, Math.floor(host.getBoundingClientRect().width) - 8);
}

/** Drag selects a range to zoom into; a click (no drag) is handed to `onClick`. */
function zoomHooks(ctx: Ctx): uPlot.Hooks.Arrays['setSelect'] {
  return [
    (u: uPlot) => {
      if (u.select.width < 4) return;
      const a = u.posToVal(u.select.left, 'x');
      const b = u.posToVal(u.select.left + u.select.width, 'x');
      u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      ctx.zoom(Math.floor(a), Math.ceil(b));
    },
  ];
}

// ---------------------------------------------------------------- histogram graph

interface Slice {
  tsMs: number;
  raw: RawBin[];
  bins: Bin[];
  count: number;
}

export async function histogramGraph(host: HTMLElement, g: Graph, ctx: Ctx): Promise<() => void> {
  const params = { query: g.query, startS: ctx.startS, endS: ctx.endS, period: ctx.period };
  const [data, qs] = await Promise.all([
    api.fetchData(params),
    api.fetchData({ ...params, transform: 'quantile:0.5,0.9,0.99' }),
  ]);
  const series = data.series.find((s) => s.key === g.key) ?? data.series[0];
  if (!series) {
    host.append(el('p', { class: 'empty' }, 'No series matches this query.'));
    return () => {};
  }
  const qseries = qs.series.find((s) => s.key === series.key);
  const periodMs = data.period_ms;
  const slices: Slice[] = series.data.map((d) => {
    const v = (d as api.HistSlice).value;
    const raw = v && typeof v === 'object' && 'bins' in v ? v.bins : [];
    const bs = bins(raw);
    return { tsMs: d.ts_ms, raw, bins: bs, count: total(bs) };
  });
  const xs = slices.map((s) => s.tsMs / 1000);
  const qv = (i: number) =>
    (qseries?.data ?? []).map((d) => {
      const v = (d as api.HistSlice).value;
      return Array.isArray(v) && typeof v[i] === 'number' && v[i] > 0 ? v[i] : null;
    });
  let maxCount = 1;
  let yMin = Infinity;
  let yMax = -Infinity;
  let cellsN = 0;
  for (const s of slices) {
    for (const b of s.bins) {
      if (b.lo <= 0) continue;
      cellsN++;
      maxCount = Math.max(maxCount, b.count);
      yMin = Math.min(yMin, b.lo);
      yMax = Math.max(yMax, b.hi);
    }
  }
  if (!Number.isFinite(yMin)) {
    yMin = 1;
    yMax = 10;
  }
  const all = merge(slices.map((s) => s.raw));
  const allBins = bins(all);

  // Layout: toolbar, [heatmap | merged histogram], breakout, objective, pinned tooltips.
  const toolbar = el('div', { class: 'toolbar' });
  const overlayBoxes: Array<[keyof State['overlays'], string]> = [
    ['p50', 'p50'],
    ['p90', 'p90'],
    ['p99', 'p99'],
  ];
  for (const [k, label] of overlayBoxes) {
    const cb = el('input', { type: 'checkbox', 'data-testid': `overlay-${k}` });
    cb.checked = ctx.state.overlays[k];
    cb.addEventListener('change', () => {
      ctx.state.overlays[k] = cb.checked;
      plot.setSeries(1 + overlayBoxes.findIndex(([o]) => o === k), { show: cb.checked });
      ctx.changed(false);
    });
    toolbar.append(el('label', { class: `ov ov-${k}` }, cb, ` ${label}`));
  }
  const objInput = el('input', {
    type: 'number',
    step: 'any',
    min: '0',
    placeholder: 'objective (e.g. 1.5)',
    'aria-label': 'objective threshold',
    'data-testid': 'objective-input',
  });
  if (g.objective !== undefined) objInput.value = String(g.objective);
  const objSet = el('button', { type: 'button', 'data-testid': 'objective-set' }, 'Set objective');
  const objClear = el('button', { type: 'button' }, 'Clear');
  toolbar.append(el('label', {}, 'Objective ', objInput), objSet, objClear);
  const drawInfo = el('span', { class: 'muted', 'data-testid': 'draw-ms' });
  toolbar.append(drawInfo);

  const row = el('div', { class: 'hrow' });
  const heat = el('div', { class: 'heat', tabindex: '0', role: 'application', 'aria-label': `heatmap of ${series.name}; arrow keys move the slice, P pins`, 'data-testid': 'heatmap' });
  const side = el('div', { class: 'side' });
  const mergedCanvas = el('canvas', { 'aria-label': 'whole-range merged histogram' });
  side.append(el('h4', {}, 'Whole range'), mergedCanvas, statsList(allBins, 'merged'));
  row.append(heat, side);

  const breakout = el('div', { class: 'breakout', 'data-testid': 'breakout', 'aria-live': 'polite' });
  const objective = el('div', { class: 'objective', 'data-testid': 'objective' });
  const pins = el('ul', { class: 'pins', 'data-testid': 'pins' });
  host.append(toolbar, row, el('div', { class: 'brow' }, breakout, objective), pins);

  let selIdx = g.sel !== undefined ? slices.findIndex((s) => s.tsMs === g.sel) : -1;
  const tooltip = el('div', { class: 'tooltip', role: 'tooltip' });
  tooltip.hidden = true;

  const cells: Cells = allocCells(Math.max(1, cellsN));
  // Per cell, computed once: its slice, log10 of its edges, its colour level. A redraw is then
  // two linear maps per cell (uPlot's log scale is linear in log10), no per-cell scale calls.
  const cSlice = new Uint32Array(cellsN);
  const cLogLo = new Float64Array(cellsN);
  const cLogHi = new Float64Array(cellsN);
  const cLevel = new Uint8Array(cellsN);
  {
    let k = 0;
    for (let i = 0; i < slices.length; i++) {
      for (const b of slices[i].bins) {
        if (b.lo <= 0) continue;
        cSlice[k] = i;
        cLogLo[k] = Math.log10(b.lo);
        cLogHi[k] = Math.log10(b.hi);
        cLevel[k] = levelOf(b.count, maxCount);
        k++;
      }
    }
  }
  const colours = { p50: css('--p50'), p90: css('--p90'), p99: css('--p99') };
  const opts: uPlot.Options = {
    width: Math.max(300, chartWidth(row) - 260),
    height: 320,
    scales: { x: { time: true, range: [ctx.startS, ctx.endS] }, y: { distr: 3, range: [yMin, yMax] } },
    axes: axes(),
    legend: { show: false },
    cursor: { drag: { x: true, y: false, setScale: false }, points: { show: false } },
    series: [
      {},
      { label: 'p50', stroke: colours.p50, width: 2, show: ctx.state.overlays.p50, spanGaps: false },
      { label: 'p90', stroke: colours.p90, width: 2, show: ctx.state.overlays.p90, spanGaps: false },
      { label: 'p99', stroke: colours.p99, width: 2, show: ctx.state.overlays.p99, spanGaps: false },
    ],
    hooks: {
      drawClear: [
        (u) => {
          const t0 = performance.now();
          const { left, top, width, height } = u.bbox;
          const xMin = u.scales.x.min ?? ctx.startS;
          const xMax = u.scales.x.max ?? ctx.endS;
          const yMinL = Math.log10(u.scales.y.min ?? yMin);
          const yMaxL = Math.log10(u.scales.y.max ?? yMax);
          const xk = width / Math.max(1e-9, xMax - xMin);
          const yk = height / Math.max(1e-12, yMaxL - yMinL);
          const pw = periodMs / 1000;
          for (let k = 0; k < cellsN; k++) {
            const t = xs[cSlice[k]];
            cells.x0[k] = left + (t - xMin) * xk;
            cells.x1[k] = left + (t + pw - xMin) * xk;
            cells.y0[k] = top + height - (cLogHi[k] - yMinL) * yk;
            cells.y1[k] = top + height - (cLogLo[k] - yMinL) * yk;
          }
          cells.level.set(cLevel);
          cells.n = cellsN;
          const mode = drawCells(u.ctx, cells, u.bbox);
          const ms = performance.now() - t0;
          drawInfo.textContent = `${cells.n} cells, ${ms.toFixed(1)} ms (${mode})`;
          drawInfo.dataset.ms = String(ms);
          drawInfo.dataset.cells = String(cells.n);
        },
      ],
      draw: [
        (u) => {
          const c = u.ctx;
          if (g.objective !== undefined && g.objective > 0) {
            const y = u.valToPos(g.objective, 'y', true);
            if (y >= u.bbox.top && y <= u.bbox.top + u.bbox.height) {
              c.save();
              c.strokeStyle = css('--objective');
              c.lineWidth = 2 * devicePixelRatio;
              c.setLineDash([8, 4]);
              c.beginPath();
              c.moveTo(u.bbox.left, y);
              c.lineTo(u.bbox.left + u.bbox.width, y);
              c.stroke();
              c.restore();
            }
          }
          if (selIdx >= 0) {
            const x = u.valToPos(xs[selIdx] + periodMs / 2000, 'x', true);
            c.save();
            c.strokeStyle = css('--fg');
            c.lineWidth = 1 * devicePixelRatio;
            c.beginPath();
            c.moveTo(x, u.bbox.top);
            c.lineTo(x, u.bbox.top + u.bbox.height);
            c.stroke();
            c.restore();
          }
        },
      ],
      setSelect: zoomHooks(ctx),
      setCursor: [
        (u) => {
          const left = u.cursor.left ?? -1;
          const top = u.cursor.top ?? -1;
          if (left < 0) {
            tooltip.hidden = true;
            return;
          }
          const hit = hitTest(u, left, top);
          if (!hit) {
            tooltip.hidden = true;
            return;
          }
          tooltip.hidden = false;
          tooltip.textContent = describe(hit.slice, hit.bin);
          tooltip.style.left = `${Math.min(left + 12, u.over.clientWidth - 180)}px`;
          tooltip.style.top = `${top + 12}px`;
        },
      ],
    },
  };
  const plot = new uPlot(opts, [xs, qv(0), qv(1), qv(2)], heat);
  plot.over.append(tooltip);

  function hitTest(u: uPlot, left: number, top: number): { idx: number; slice: Slice; bin?: Bin } | null {
    const t = u.posToVal(left, 'x');
    const idx = Math.floor((t * 1000 - (slices[0]?.tsMs ?? 0)) / periodMs);
    const slice = slices[idx];
    if (!slice) return null;
    const v = u.posToVal(top, 'y');
    const bin = slice.bins.find((b) => v >= b.lo && v < b.hi);
    return { idx, slice, bin };
  }

  function describe(s: Slice, b?: Bin): string {
    const head = `${timeLabel(s.tsMs)} · ${s.count} samples`;
    return b ? `${head} · [${fmt(b.lo)}, ${fmt(b.hi)}): ${b.count}` : head;
  }

  const pinned: string[] = [];
  function renderPins(): void {
    pins.replaceChildren(
      ...pinned.map((text, i) => {
        const x = el('button', { type: 'button', 'aria-label': 'unpin' }, '×');
        x.addEventListener('click', () => {
          pinned.splice(i, 1);
          renderPins();
        });
        return el('li', { 'data-testid': 'pin' }, text, ' ', x);
      }),
    );
  }

  function select(idx: number, pinText?: string): void {
    if (idx < 0 || idx >= slices.length) return;
    selIdx = idx;
    g.sel = slices[idx].tsMs;
    if (pinText !== undefined && pinned.length < 20) {
      pinned.push(pinText);
      renderPins();
    }
    renderBreakout();
    plot.redraw(false, false);
    ctx.changed(false);
  }

  let downAt: [number, number] | null = null;
  plot.over.addEventListener('mousedown', (e) => {
    downAt = [e.clientX, e.clientY];
  });
  plot.over.addEventListener('mouseup', (e) => {
    if (!downAt || Math.abs(e.clientX - downAt[0]) + Math.abs(e.clientY - downAt[1]) > 3) return;
    downAt = null;
    const r = plot.over.getBoundingClientRect();
    const hit = hitTest(plot, e.clientX - r.left, e.clientY - r.top);
    if (hit) select(hit.idx, describe(hit.slice, hit.bin));
  });
  heat.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
      const dir = e.key === 'ArrowRight' ? 1 : -1;
      let i = selIdx < 0 ? (dir > 0 ? 0 : slices.length - 1) : selIdx + dir;
      while (i >= 0 && i < slices.length && slices[i].count === 0) i += dir;
      if (i >= 0 && i < slices.length) select(i);
      e.preventDefault();
    } else if (e.key === 'p' || e.key === 'P' || e.key === 'Enter') {
      if (selIdx >= 0) select(selIdx, describe(slices[selIdx]));
      e.preventDefault();
    } else if (e.key === 'Escape') {
      pinned.length = 0;
      renderPins();
    }
  });

  function renderBreakout(): void {
    if (selIdx < 0) {
      breakout.replaceChildren(el('p', { class: 'muted' }, 'Click a slice (or focus the heatmap and use ←/→) to open its histogram.'));
      renderObjective();
      return;
    }
    const s = slices[selIdx];
    const c = el('canvas', { 'aria-label': 'slice histogram' });
    breakout.replaceChildren(
      el('h4', {}, 'Slice ', el('time', { 'data-testid': 'breakout-ts', 'data-ms': String(s.tsMs) }, timeLabel(s.tsMs))),
      c,
      statsList(s.bins, 'breakout'),
    );
    drawHistogram(c, s.bins, g.objective);
    renderObjective();
  }

  function renderObjective(): void {
    if (g.objective === undefined) {
      objective.replaceChildren(el('p', { class: 'muted' }, 'Set an objective to see the share of samples above it.'));
      return;
    }
    const t = g.objective;
    let bad = 0;
    let n = 0;
    for (const s of slices) {
      if (s.count === 0) continue;
      bad += (1 - inverseQuantile(s.bins, t)) * s.count;
      n += s.count;
    }
    const kids: Array<Node | string> = [el('h4', {}, `Objective ${fmt(t)}`)];
    if (selIdx >= 0 && slices[selIdx].count > 0) {
      const s = slices[selIdx];
      const share = 1 - inverseQuantile(s.bins, t);
      kids.push(
        el('p', {}, 'This slice: ', el('strong', { 'data-testid': 'objective-share', 'data-value': String(share) }, `${(share * 100).toFixed(3)}%`), ' above, ',
          el('strong', { 'data-testid': 'objective-count', 'data-value': String(share * s.count) }, fmt(share * s.count)), ` of ${s.count} samples`),
      );
    }
    kids.push(
      el('p', {}, 'Whole range: ', el('strong', { 'data-testid': 'objective-total', 'data-value': String(bad) }, fmt(bad)),
        ` samples above (people with a bad experience), `, el('strong', { 'data-testid': 'objective-total-share', 'data-value': String(n ? bad / n : NaN) }, `${n ? ((bad / n) * 100).toFixed(3) : '–'}%`), ` of ${n}`),
    );
    objective.replaceChildren(...kids);
  }

  const setObjective = () => {
    const v = Number(objInput.value);
    g.objective = objInput.value.trim() !== '' && Number.isFinite(v) && v > 0 ? v : undefined;
    renderBreakout();
    drawHistogram(mergedCanvas, allBins, g.objective);
    plot.redraw(false, false);
    ctx.changed(false);
  };
  objSet.addEventListener('click', setObjective);
  objInput.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') setObjective();
  });
  objClear.addEventListener('click', () => {
    objInput.value = '';
    setObjective();
  });

  drawHistogram(mergedCanvas, allBins, g.objective);
  renderBreakout();
  const resize = () => plot.setSize({ width: Math.max(300, chartWidth(row) - 260), height: 320 });
  window.addEventListener('resize', resize);
  return () => {
    window.removeEventListener('resize', resize);
    plot.destroy();
  };
}

function statsList(bs: Bin[], id: string): HTMLElement {
  const n = total(bs);
  const dl = el('dl', { class: 'stats', 'data-testid': `${id}-stats` });
  const row = (k: string, v: string, testid?: string) => {
    const dd = el('dd', testid ? { 'data-testid': testid, 'data-value': v } : {}, v);
    dl.append(el('dt', {}, k), dd);
  };
  row('count', String(n), `${id}-count`);
  if (n > 0) {
    row('mean', fmt(mean(bs)));
    row('min ≥', fmt(bs[0].lo));
    row('max <', fmt(bs[bs.length - 1].hi));
    row('p50', fmt(quantile(bs, 0.5)));
    row('p90', fmt(quantile(bs, 0.9)));
    row('p99', fmt(quantile(bs, 0.99)));
  }
  return dl;
}

/** A histogram as bars on a log value axis (positive bins), with the objective marked. */
export function drawHistogram(c: HTMLCanvasElement, bs: Bin[], objective?: number): void {
  const w = 240;
  const h = 140;
  const dpr = devicePixelRatio || 1;
  c.width = w * dpr;
  c.height = h * dpr;
  c.style.width = `${w}px`;
  c.style.height = `${h}px`;
  const g = c.getContext('2d');
  if (!g) return;
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const pos = bs.filter((b) => b.lo > 0);
  if (pos.length === 0) return;
  const lo = Math.log10(pos[0].lo);
  const hi = Math.log10(pos[pos.length - 1].hi);
  const span = Math.max(1e-9, hi - lo);
  const maxC = Math.max(...pos.map((b) => b.count));
  const X = (v: number) => 4 + ((Math.log10(v) - lo) / span) * (w - 8);
  g.fillStyle = css('--bar');
  for (const b of pos) {
    const bh = (b.count / maxC) * (h - 20);
    g.fillRect(X(b.lo), h - 14 - bh, Math.max(1, X(b.hi) - X(b.lo) - 0.5), bh);
  }
  g.fillStyle = css('--fg');
  g.font = '10px sans-serif';
  g.fillText(fmt(pos[0].lo), 2, h - 2);
  const right = fmt(pos[pos.length - 1].hi);
  g.fillText(right, w - 2 - g.measureText(right).width, h - 2);
  if (objective !== undefined && objective > 0) {
    const x = X(objective);
    g.strokeStyle = css('--objective');
    g.setLineDash([4, 3]);
    g.beginPath();
    g.moveTo(x, 0);
    g.lineTo(x, h - 14);
    g.stroke();
  }
}

// ---------------------------------------------------------------- numeric and text

export const AGGS = ['mean', 'max', 'min', 'sum', 'count', 'last', 'first', 'stddev'] as const;

export async function numericGraph(host: HTMLElement, g: Graph, ctx: Ctx): Promise<() => void> {
  const data = await api.fetchData({ query: g.query, startS: ctx.startS, endS: ctx.endS, period: ctx.period });
  const list = g.key ? data.series.filter((s) => s.key === g.key) : data.series.slice(0, 10);
  const agg = (g.agg ?? 'mean') as (typeof AGGS)[number];
  const sel = el('select', { 'aria-label': 'aggregate', 'data-testid': 'agg' });
  for (const a of AGGS) sel.append(el('option', a === agg ? { value: a, selected: '' } : { value: a }, a));
  sel.addEventListener('change', () => {
    g.agg = sel.value;
    ctx.changed(true);
  });
  host.append(el('div', { class: 'toolbar' }, el('label', {}, 'Aggregate ', sel)));
  if (list.length === 0) {
    host.append(el('p', { class: 'empty' }, 'No series matches this query.'));
    return () => {};
  }
  const xs = (list[0].data as api.NumericSlice[]).map((d) => d.ts_ms / 1000);
  const ys = list.map((s) => (s.data as api.NumericSlice[]).map((d) => (typeof d[agg] === 'number' ? (d[agg] as number) : null)));
  const palette = ['--p50', '--p90', '--p99', '--objective', '--bar'];
  const div = el('div', { class: 'line', 'data-testid': 'linechart' });
  host.append(div);
  const plot = new uPlot(
    {
      width: chartWidth(host),
      height: 240,
      scales: { x: { time: true, range: [ctx.startS, ctx.endS] } },
      axes: axes(),
      cursor: { drag: { x: true, y: false, setScale: false } },
      series: [{}, ...list.map((s, i) => ({ label: s.key, stroke: css(palette[i % palette.length]), width: 2, spanGaps: false }))],
      hooks: { setSelect: zoomHooks(ctx) },
    },
    [xs, ...ys],
    div,
  );
  return () => plot.destroy();
}

/** Most text changes listed. */
const TEXT_ROWS_MAX = 500;

export async function textGraph(host: HTMLElement, g: Graph, ctx: Ctx): Promise<() => void> {
  const data = await api.fetchData({ query: g.query, startS: ctx.startS, endS: ctx.endS, period: ctx.period });
  const s = data.series.find((x) => x.key === g.key) ?? data.series[0];
  const rows = ((s?.data ?? []) as Array<{ ts_ms: number; value: string }>).slice(-TEXT_ROWS_MAX).reverse();
  const table = el('table', { class: 'changes', 'data-testid': 'changes' }, el('thead', {}, el('tr', {}, el('th', {}, 'time'), el('th', {}, 'value'))));
  const body = el('tbody');
  for (const r of rows) body.append(el('tr', {}, el('td', {}, timeLabel(r.ts_ms)), el('td', {}, r.value)));
  table.append(body);
  host.append(rows.length ? table : el('p', { class: 'empty' }, 'No changes in this range.'));
  return () => {};
}

export async function caqlGraph(host: HTMLElement, query: string, ctx: Ctx): Promise<() => void> {
  const out = await api.caql(query, ctx.startS, ctx.endS, ctx.period);
  if (out.series.length === 0) {
    host.append(el('p', { class: 'empty', 'data-testid': 'caql-empty' }, 'The query returned no series.'));
    return () => {};
  }
  const xs = out.series[0].values.map(([t]) => t);
  const value = (v: unknown): number | null => {
    if (typeof v === 'number') return v;
    if (v && typeof v === 'object' && 'bins' in v) return total(bins((v as { bins: RawBin[] }).bins));
    return null;
  };
  const ys = out.series.map((s) => s.values.map(([, v]) => value(v)));
  const palette = ['--p50', '--p90', '--p99', '--objective', '--bar'];
  const div = el('div', { class: 'line', 'data-testid': 'caql-chart', 'data-series': String(out.series.length) });
  host.append(div);
  const plot = new uPlot(
    {
      width: chartWidth(host),
      height: 240,
      scales: { x: { time: true } },
      axes: axes(),
      series: [{}, ...out.series.map((s, i) => ({ label: s.label, stroke: css(palette[i % palette.length]), width: 2 }))],
      hooks: { setSelect: zoomHooks(ctx) },
    },
    [xs, ...ys],
    div,
  );
  return () => plot.destroy();
}
