// The histogram graph (heatmap + overlays + colour legend + objective + breakout + merged
// histogram), numeric line charts, text change lists and CAQL results.
import uPlot from 'uplot';
import * as api from './api';
import { allocCells, drawCells, levelCss, LEVELS, levelValue, scaleLevel, type Cells, type Scale } from './heatmap';
import { bins, inverseQuantile, mean, merge, quantile, total, type Bin, type RawBin } from './hist';
import {
  fmtCount,
  fmtTicks,
  fmtTimeTicks,
  fmtTimeZ,
  fmtValue,
  guessUnit,
  isUnit,
  streamText,
  tz,
  tzSuffix,
  unitLabel,
  unitSymbol,
  UNITS,
  type Unit,
} from './format';
import type { ColorMode, Graph, State } from './state';

export interface Ctx {
  state: State;
  startS: number;
  endS: number;
  period?: string;
  /** The state changed (URL to update); `refetch` when data must be read again. */
  changed(refetch: boolean): void;
  zoom(startS: number, endS: number): void;
  /** Charts with the same key share their cursor (a dashboard). */
  sync?: string;
  /** A dashboard panel: the chart alone, sized to its box. */
  compact?: boolean;
  /** Chart height in px (compact panels). */
  height?: number;
}

export function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...kids: Array<Node | string>): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
}

export function css(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

/** Unix seconds → a Date whose local fields are those of the chosen zone (uPlot's tick choice). */
export function tzDate(ts: number): Date {
  return tz() === 'UTC' ? uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC') : new Date(ts * 1e3);
}

/** The time axis: ticks in the chosen zone; the labels drawn are kept on the chart for tests. */
export function timeAxis(host: HTMLElement): uPlot.Axis {
  const stroke = css('--fg');
  const grid = { stroke: css('--grid'), width: 1 };
  return {
    stroke,
    grid,
    ticks: grid,
    size: 44,
    values: (_u, splits) => {
      const labels = fmtTimeTicks(splits);
      host.dataset.xticks = JSON.stringify(splits.map((s, i) => [s, labels[i]]));
      return labels;
    },
  };
}

/** A value axis with SI-prefixed ticks and the unit in its label (labels kept for tests). */
export function valueAxis(unit: Unit, host: HTMLElement, label?: string): uPlot.Axis {
  const stroke = css('--fg');
  const ticks = { stroke: css('--grid'), width: 1 };
  // Grid lines only at labelled ticks: on a log axis the unlabelled 2..9 × 10^k lines crowd
  // together below each power of ten and read as stripes across a heatmap.
  const grid = {
    ...ticks,
    // The axis's own filter (uPlot's default, resolved at init) says which ticks get labels.
    filter: (u: uPlot, splits: number[], axisIdx: number, space: number, incr: number) =>
      u.axes[axisIdx].filter?.(u, splits, axisIdx, space, incr) ?? splits,
  };
  const sym = unitSymbol(unit);
  return {
    stroke,
    grid,
    ticks,
    size: 62,
    label: label ?? (sym ? `value (${sym})` : 'value'),
    labelSize: 18,
    labelFont: '12px system-ui, sans-serif',
    values: (_u, splits) => {
      const labels = fmtTicks(splits, unit);
      host.dataset.yticks = JSON.stringify(splits.map((v, i) => [v, labels[i]]));
      return labels;
    },
  };
}

export function chartWidth(host: HTMLElement): number {
  return Math.max(240, Math.floor(host.getBoundingClientRect().width));
}

/** Drag selects a range to zoom into; a click (no drag) is handed to the chart's own code. */
export function zoomHooks(ctx: Ctx): uPlot.Hooks.Arrays['setSelect'] {
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

/** Keeps a chart as wide as its box (the layout changes with the window and the grid). */
export function followWidth(box: HTMLElement, plot: uPlot, height: () => number): () => void {
  let last = 0;
  const ro = new ResizeObserver(() => {
    const w = chartWidth(box);
    if (w !== last) {
      last = w;
      plot.setSize({ width: w, height: height() });
    }
  });
  ro.observe(box);
  return () => ro.disconnect();
}

/** The unit a graph is shown in: chosen, or guessed from the stream name. */
export function graphUnit(g: { unit?: string; name?: string; key?: string; query: string }): Unit {
  if (isUnit(g.unit)) return g.unit;
  return guessUnit(g.name ?? g.key ?? g.query);
}

export function unitSelect(current: Unit, onChange: (u: Unit) => void): HTMLLabelElement {
  const sel = el('select', { 'data-testid': 'unit' });
  for (const u of UNITS) {
    const o = el('option', { value: u }, u ? `${u} (${unitLabel(u)})` : unitLabel(u));
    if (u === current) o.selected = true;
    sel.append(o);
  }
  sel.addEventListener('change', () => onChange(sel.value as Unit));
  return el('label', {}, 'Unit ', sel);
}

/** Tracks whether the pointer is over a chart (synced cursors move on every chart). */
function hovered(over: HTMLElement): () => boolean {
  let inside = false;
  over.addEventListener('mouseenter', () => (inside = true));
  over.addEventListener('mouseleave', () => (inside = false));
  return () => inside;
}

// ---------------------------------------------------------------- histogram graph

interface Slice {
  tsMs: number;
  raw: RawBin[];
  bins: Bin[];
  count: number;
}

/** Samples per decade of value: a bin's count over its width in log10 units. */
export function density(b: Bin): number {
  return b.count / Math.log10(b.hi / b.lo);
}

export const COLOR_MODES: Array<[ColorMode, string]> = [
  ['density', 'density (per decade)'],
  ['count', 'count (per bin)'],
];

/** A horizontal colour legend: the ramp, its end values and what the colour means. */
export function colorLegend(scale: Scale, mode: ColorMode): HTMLElement {
  const w = 200;
  const c = el('canvas', { 'aria-hidden': 'true', width: String(w), height: '10' });
  const g = c.getContext('2d');
  if (g) {
    for (let l = 0; l < LEVELS; l++) {
      g.fillStyle = levelCss(l);
      g.fillRect(Math.floor((l * w) / LEVELS), 0, Math.ceil(w / LEVELS) + 1, 10);
    }
  }
  const what = mode === 'density' ? 'samples per decade of value' : 'samples per bin';
  const mid = levelValue((LEVELS - 1) / 2, scale);
  return el(
    'div',
    { class: 'clegend', 'data-testid': 'color-legend', 'data-mode': mode, 'data-lo': String(scale.lo), 'data-hi': String(scale.hi), role: 'img', 'aria-label': `colour: ${what}, from ${fmtCount(scale.lo)} to ${fmtCount(scale.hi)} (log scale)` },
    el('span', { class: 'muted' }, `colour = ${what}`),
    el('span', { class: 'ramp' }, el('span', {}, fmtCount(scale.lo)), c, el('span', {}, fmtCount(scale.hi))),
    el('span', { class: 'muted' }, `log scale, middle ≈ ${fmtCount(mid)}`),
  );
}

export interface HistOptions {
  /** Only the heatmap, its legend and tooltip (dashboard panels). */
  compact?: boolean;
}

export async function histogramGraph(host: HTMLElement, g: Graph, ctx: Ctx): Promise<() => void> {
  const params = { query: g.query, startS: ctx.startS, endS: ctx.endS, period: ctx.period };
  const [data, qs] = await Promise.all([api.fetchData(params), api.fetchData({ ...params, transform: 'quantile:0.5,0.9,0.99' })]);
  const series = data.series.find((s) => s.key === g.key) ?? data.series[0];
  if (!series) {
    host.append(el('p', { class: 'empty' }, 'No stream matches this query.'));
    return () => {};
  }
  const compact = ctx.compact === true;
  const unit = graphUnit({ ...g, name: g.name ?? series.name });
  const mode: ColorMode = g.color ?? 'density';
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
  let yMin = Infinity;
  let yMax = -Infinity;
  let cellsN = 0;
  const scale: Scale = { lo: Infinity, hi: 0 };
  for (const s of slices) {
    for (const b of s.bins) {
      if (b.lo <= 0) continue;
      cellsN++;
      const v = mode === 'density' ? density(b) : b.count;
      scale.lo = Math.min(scale.lo, v);
      scale.hi = Math.max(scale.hi, v);
      yMin = Math.min(yMin, b.lo);
      yMax = Math.max(yMax, b.hi);
    }
  }
  if (!Number.isFinite(yMin)) {
    yMin = 1;
    yMax = 10;
  }
  if (!Number.isFinite(scale.lo)) {
    scale.lo = 1;
    scale.hi = 1;
  }
  // A count scale starts at one sample, so a bin's colour is comparable across ranges.
  if (mode === 'count') scale.lo = Math.min(1, scale.lo);
  const all = merge(slices.map((s) => s.raw));
  const allBins = bins(all);

  // Layout: toolbar, [heatmap + legend | merged histogram], breakout, objective, pins.
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
    toolbar.append(el('label', { class: `ov ov-${k}`, title: `${label} of each slice (the server's quantile)` }, cb, ` ${label}`));
  }
  const colorSel = el('select', { 'data-testid': 'color-mode' });
  for (const [m, label] of COLOR_MODES) {
    const o = el('option', { value: m }, label);
    if (m === mode) o.selected = true;
    colorSel.append(o);
  }
  colorSel.addEventListener('change', () => {
    g.color = colorSel.value as ColorMode;
    ctx.changed(true);
  });
  toolbar.append(el('label', {}, 'Colour ', colorSel));
  toolbar.append(
    unitSelect(unit, (u) => {
      g.unit = u;
      ctx.changed(true);
    }),
  );
  const objInput = el('input', {
    type: 'number',
    step: 'any',
    min: '0',
    placeholder: unitSymbol(unit) ? `e.g. 1.5 (${unit})` : 'e.g. 1.5',
    'data-testid': 'objective-input',
    size: '8',
  });
  if (g.objective !== undefined) objInput.value = String(g.objective);
  const objSet = el('button', { type: 'button', 'data-testid': 'objective-set' }, 'Set objective');
  const objClear = el('button', { type: 'button' }, 'Clear');
  toolbar.append(el('label', {}, `Objective${unit ? ` (${unit})` : ''} `, objInput), objSet, objClear);
  // What the last draw cost, for the tests and the benchmark; not shown.
  const drawInfo = el('span', { hidden: '', 'data-testid': 'draw-ms' });
  toolbar.append(drawInfo);

  const row = el('div', { class: compact ? 'hrow compact' : 'hrow' });
  const heatCol = el('div', { class: 'heatcol' });
  const heat = el('div', {
    class: 'heat',
    tabindex: '0',
    role: 'application',
    'aria-label': `heatmap of ${streamText(series.name, series.tags)}; arrow keys move the slice, P pins`,
    'data-testid': 'heatmap',
    'data-color': mode,
  });
  heatCol.append(heat, colorLegend(scale, mode));
  row.append(heatCol);
  const side = el('div', { class: 'side', 'data-testid': 'whole-range' });
  const mergedCanvas = el('canvas', { role: 'img', 'aria-label': 'histogram of the whole range' });
  if (!compact) {
    side.append(el('h4', {}, 'Whole range'), mergedCanvas, statsList(allBins, 'merged', unit));
    row.append(side);
  }

  const breakout = el('div', { class: 'breakout', 'data-testid': 'breakout', 'aria-live': 'polite' });
  const objective = el('div', { class: 'objective', 'data-testid': 'objective' });
  const pins = el('ul', { class: 'pins', 'data-testid': 'pins' });
  if (compact) host.append(row);
  else host.append(toolbar, row, el('div', { class: 'brow' }, breakout, objective), pins);

  let selIdx = g.sel !== undefined ? slices.findIndex((s) => s.tsMs === g.sel) : -1;
  const tooltip = el('div', { class: 'tooltip', role: 'tooltip', 'data-testid': 'tooltip' });
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
        cLevel[k] = scaleLevel(mode === 'density' ? density(b) : b.count, scale);
        k++;
      }
    }
  }
  const colours = { p50: css('--p50'), p90: css('--p90'), p99: css('--p99') };
  const height = () => ctx.height ?? 320;
  let isHovered = () => false;
  const opts: uPlot.Options = {
    width: chartWidth(heatCol),
    height: height(),
    tzDate,
    scales: { x: { time: true, range: [ctx.startS, ctx.endS] }, y: { distr: 3, range: [yMin, yMax] } },
    axes: [timeAxis(heat), valueAxis(unit, heat)],
    legend: { show: false },
    cursor: { drag: { x: true, y: false, setScale: false }, points: { show: false }, ...(ctx.sync ? { sync: { key: ctx.sync } } : {}) },
    series: [
      {},
      { label: 'p50', stroke: colours.p50, width: 2, show: ctx.state.overlays.p50, spanGaps: false, points: { show: false } },
      { label: 'p90', stroke: colours.p90, width: 2, show: ctx.state.overlays.p90, spanGaps: false, points: { show: false } },
      { label: 'p99', stroke: colours.p99, width: 2, show: ctx.state.overlays.p99, spanGaps: false, points: { show: false } },
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
          const used = drawCells(u.ctx, cells, u.bbox);
          const ms = performance.now() - t0;
          drawInfo.dataset.ms = String(ms);
          drawInfo.dataset.cells = String(cells.n);
          drawInfo.dataset.mode = used;
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
          heat.dataset.cursor = left < 0 ? '' : String(u.posToVal(left, 'x'));
          if (left < 0 || !isHovered()) {
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
          tooltip.style.left = `${Math.max(0, Math.min(left + 12, u.over.clientWidth - 260))}px`;
          tooltip.style.top = `${top + 12}px`;
        },
      ],
    },
  };
  const plot = new uPlot(opts, [xs, qv(0), qv(1), qv(2)], heat);
  plot.over.append(tooltip);
  isHovered = hovered(plot.over);
  // For tests: where a time (s) and value land on the canvas, in canvas pixels.
  Object.assign(heat, {
    strataProbe: (tS: number, v: number) => ({ x: plot.valToPos(tS, 'x', true), y: plot.valToPos(v, 'y', true) }),
  });

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
    const when = `${fmtTimeZ(s.tsMs)} (${data.period_ms / 60000 >= 1 ? `${data.period_ms / 60000} min` : `${data.period_ms / 1000} s`} slice)`;
    if (s.count === 0) return `${when} · no samples`;
    const head = `${when} · ${fmtCount(s.count)} sample${s.count === 1 ? '' : 's'}`;
    if (!b) return head;
    const per = mode === 'density' ? ` (${fmtCount(density(b))} per decade)` : '';
    return `${head} · [${fmtValue(b.lo, unit)}, ${fmtValue(b.hi, unit)}): ${fmtCount(b.count)}${per}`;
  }

  const pinned: string[] = [];
  function renderPins(): void {
    pins.replaceChildren(
      ...pinned.map((text, i) => {
        const x = el('button', { type: 'button', 'aria-label': `unpin ${text}` }, '×');
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
    if (compact || !downAt || Math.abs(e.clientX - downAt[0]) + Math.abs(e.clientY - downAt[1]) > 3) return;
    downAt = null;
    const r = plot.over.getBoundingClientRect();
    const hit = hitTest(plot, e.clientX - r.left, e.clientY - r.top);
    if (hit) select(hit.idx, describe(hit.slice, hit.bin));
  });
  heat.addEventListener('keydown', (e) => {
    if (compact) return;
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
    const title = el('h4', {}, 'Slice ', el('time', { 'data-testid': 'breakout-ts', 'data-ms': String(s.tsMs), datetime: new Date(s.tsMs).toISOString() }, fmtTimeZ(s.tsMs)));
    if (s.count === 0) {
      breakout.replaceChildren(title, el('p', { class: 'muted' }, 'No samples in this slice.'), statsList(s.bins, 'breakout', unit));
      renderObjective();
      return;
    }
    const c = el('canvas', { role: 'img', 'aria-label': `histogram of the slice at ${fmtTimeZ(s.tsMs)}` });
    breakout.replaceChildren(title, c, statsList(s.bins, 'breakout', unit));
    drawHistogram(c, s.bins, { objective: g.objective, unit, mode });
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
    const kids: Array<Node | string> = [el('h4', {}, `Objective ${fmtValue(t, unit)}`)];
    if (selIdx >= 0 && slices[selIdx].count > 0) {
      const s = slices[selIdx];
      const share = 1 - inverseQuantile(s.bins, t);
      kids.push(
        el(
          'p',
          {},
          'This slice: ',
          el('strong', { 'data-testid': 'objective-share', 'data-value': String(share) }, `${(share * 100).toFixed(3)}%`),
          ' above, ',
          el('strong', { 'data-testid': 'objective-count', 'data-value': String(share * s.count) }, fmtCount(share * s.count)),
          ` of ${fmtCount(s.count)} samples`,
        ),
      );
    }
    kids.push(
      el(
        'p',
        {},
        'Whole range: ',
        el('strong', { 'data-testid': 'objective-total', 'data-value': String(bad) }, fmtCount(bad)),
        ` samples above (people with a bad experience), `,
        el('strong', { 'data-testid': 'objective-total-share', 'data-value': String(n ? bad / n : NaN) }, `${n ? ((bad / n) * 100).toFixed(3) : '–'}%`),
        ` of ${fmtCount(n)}`,
      ),
    );
    objective.replaceChildren(...kids);
  }

  const setObjective = () => {
    const v = Number(objInput.value);
    g.objective = objInput.value.trim() !== '' && Number.isFinite(v) && v > 0 ? v : undefined;
    renderBreakout();
    drawHistogram(mergedCanvas, allBins, { objective: g.objective, unit, mode });
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

  if (!compact) {
    drawHistogram(mergedCanvas, allBins, { objective: g.objective, unit, mode });
    renderBreakout();
  }
  const unfollow = followWidth(heatCol, plot, height);
  return () => {
    unfollow();
    plot.destroy();
  };
}

function statsList(bs: Bin[], id: string, unit: Unit): HTMLElement {
  const n = total(bs);
  const dl = el('dl', { class: 'stats', 'data-testid': `${id}-stats` });
  const row = (k: string, v: string, testid?: string, raw?: number) => {
    const dd = el('dd', testid ? { 'data-testid': testid, 'data-value': String(raw ?? v) } : {}, v);
    dl.append(el('dt', {}, k), dd);
  };
  row('samples', String(n), `${id}-count`, n);
  if (n > 0) {
    row('mean', fmtValue(mean(bs), unit));
    row('min ≥', fmtValue(bs[0].lo, unit));
    row('max <', fmtValue(bs[bs.length - 1].hi, unit));
    row('p50', fmtValue(quantile(bs, 0.5), unit));
    row('p90', fmtValue(quantile(bs, 0.9), unit));
    row('p99', fmtValue(quantile(bs, 0.99), unit));
  }
  return dl;
}

export interface HistDraw {
  objective?: number;
  unit?: Unit;
  mode?: ColorMode;
  width?: number;
  height?: number;
}

/**
 * A histogram as bars on a log value axis (positive bins), with the objective marked. In
 * density mode a bar's height is samples per decade, so its area is its count on this axis.
 */
export function drawHistogram(c: HTMLCanvasElement, bs: Bin[], o: HistDraw = {}): void {
  const w = o.width ?? 240;
  const h = o.height ?? 150;
  const unit = o.unit ?? '';
  const mode = o.mode ?? 'density';
  const dpr = devicePixelRatio || 1;
  c.width = w * dpr;
  c.height = h * dpr;
  c.style.width = `${w}px`;
  c.style.height = `${h}px`;
  c.dataset.mode = mode;
  const g = c.getContext('2d');
  if (!g) return;
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const pos = bs.filter((b) => b.lo > 0);
  g.fillStyle = css('--muted');
  g.font = '10px system-ui, sans-serif';
  if (pos.length === 0) {
    g.fillText('no positive values', 4, h / 2);
    return;
  }
  const lo = Math.log10(pos[0].lo);
  const hi = Math.log10(pos[pos.length - 1].hi);
  const span = Math.max(1e-9, hi - lo);
  const height = (b: Bin) => (mode === 'density' ? density(b) : b.count);
  const maxH = Math.max(...pos.map(height));
  const X = (v: number) => 4 + ((Math.log10(v) - lo) / span) * (w - 8);
  g.fillText(mode === 'density' ? 'samples per decade' : 'samples per bin', 4, 10);
  g.fillStyle = css('--bar');
  for (const b of pos) {
    const bh = (height(b) / maxH) * (h - 30);
    g.fillRect(X(b.lo), h - 14 - bh, Math.max(1, X(b.hi) - X(b.lo) - 0.5), bh);
  }
  g.fillStyle = css('--fg');
  g.fillText(fmtValue(pos[0].lo, unit), 2, h - 2);
  const right = fmtValue(pos[pos.length - 1].hi, unit);
  g.fillText(right, w - 2 - g.measureText(right).width, h - 2);
  if (o.objective !== undefined && o.objective > 0) {
    const x = X(o.objective);
    g.strokeStyle = css('--objective');
    g.setLineDash([4, 3]);
    g.beginPath();
    g.moveTo(x, 14);
    g.lineTo(x, h - 14);
    g.stroke();
  }
}

// ---------------------------------------------------------------- line charts and their legend

interface Line {
  label: string;
  /** Shown in the legend (a stream's name and tag chips). */
  node?: Node;
  values: Array<number | null>;
  colour: string;
}

const PALETTE_VARS = ['--s1', '--s2', '--s3', '--s4', '--s5', '--s6'];

export function seriesColour(i: number): string {
  return css(PALETTE_VARS[i % PALETTE_VARS.length]);
}

/**
 * A time chart of lines with its own legend: what is plotted (`what`, e.g. "mean per 1 min"),
 * one row per line with its value at the cursor, or its latest value when the cursor is away.
 */
export function lineChart(host: HTMLElement, xs: number[], lines: Line[], ctx: Ctx, unit: Unit, what: string, testid: string): () => void {
  const div = el('div', { class: 'line', 'data-testid': testid, 'data-series': String(lines.length) });
  const legend = el('div', { class: 'legend', 'data-testid': 'legend' });
  host.append(div, legend);
  const height = () => ctx.height ?? 240;
  const head = el('div', { class: 'lhead muted' });
  const rows = lines.map((l) => {
    const value = el('span', { class: 'lval', 'data-testid': 'legend-value' });
    const row = el('div', { class: 'lrow' }, el('span', { class: 'swatch', style: `background:${l.colour}`, 'aria-hidden': 'true' }), l.node ?? l.label, ' ', value);
    return { row, value };
  });
  legend.append(head, ...rows.map((r) => r.row));
  const latest = (vals: Array<number | null>) => {
    for (let i = vals.length - 1; i >= 0; i--) if (vals[i] !== null) return i;
    return -1;
  };
  const show = (idx: number | null | undefined) => {
    if (idx === null || idx === undefined) {
      head.textContent = `${what} · latest values`;
      lines.forEach((l, i) => {
        const k = latest(l.values);
        rows[i].value.textContent = k >= 0 ? fmtValue(l.values[k] as number, unit) : 'no data';
      });
      return;
    }
    head.textContent = `${what} · at ${fmtTimeZ(xs[idx] * 1000)}`;
    lines.forEach((l, i) => {
      const v = l.values[idx];
      rows[i].value.textContent = v === null || v === undefined ? 'no data' : fmtValue(v, unit);
    });
  };
  show(null);
  const plot = new uPlot(
    {
      width: chartWidth(host),
      height: height(),
      tzDate,
      scales: { x: { time: true, range: [ctx.startS, ctx.endS] } },
      axes: [timeAxis(div), valueAxis(unit, div)],
      legend: { show: false },
      cursor: { drag: { x: true, y: false, setScale: false }, ...(ctx.sync ? { sync: { key: ctx.sync } } : {}) },
      series: [{}, ...lines.map((l) => ({ label: l.label, stroke: l.colour, width: 2, spanGaps: false }))],
      hooks: {
        setSelect: zoomHooks(ctx),
        setCursor: [
          (u) => {
            const left = u.cursor.left ?? -1;
            div.dataset.cursor = left < 0 ? '' : String(u.posToVal(left, 'x'));
            show(u.cursor.idx);
          },
        ],
      },
    },
    [xs, ...lines.map((l) => l.values)],
    div,
  );
  const unfollow = followWidth(host, plot, height);
  return () => {
    unfollow();
    plot.destroy();
  };
}

export const AGGS = ['mean', 'max', 'min', 'sum', 'count', 'last', 'first', 'stddev'] as const;

function periodText(ms: number): string {
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000} d`;
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  return `${ms / 1000} s`;
}

export async function numericGraph(host: HTMLElement, g: Graph, ctx: Ctx): Promise<() => void> {
  const data = await api.fetchData({ query: g.query, startS: ctx.startS, endS: ctx.endS, period: ctx.period });
  const list = g.key ? data.series.filter((s) => s.key === g.key) : data.series.slice(0, 10);
  const agg = (g.agg ?? 'mean') as (typeof AGGS)[number];
  const unit = graphUnit({ ...g, name: g.name ?? list[0]?.name });
  if (!ctx.compact) {
    const sel = el('select', { 'data-testid': 'agg' });
    for (const a of AGGS) sel.append(el('option', a === agg ? { value: a, selected: '' } : { value: a }, a));
    sel.addEventListener('change', () => {
      g.agg = sel.value;
      ctx.changed(true);
    });
    host.append(
      el(
        'div',
        { class: 'toolbar' },
        el('label', {}, 'Aggregate ', sel),
        unitSelect(unit, (u) => {
          g.unit = u;
          ctx.changed(true);
        }),
      ),
    );
  }
  if (list.length === 0) {
    host.append(el('p', { class: 'empty' }, 'No stream matches this query.'));
    return () => {};
  }
  const xs = (list[0].data as api.NumericSlice[]).map((d) => d.ts_ms / 1000);
  const lines: Line[] = list.map((s, i) => ({
    label: streamText(s.name, s.tags),
    node: streamLabelNode(s.name, s.tags),
    values: (s.data as api.NumericSlice[]).map((d) => (typeof d[agg] === 'number' ? (d[agg] as number) : null)),
    colour: seriesColour(i),
  }));
  return lineChart(host, xs, lines, ctx, unit, `${agg} per ${periodText(data.period_ms)} slice`, 'linechart');
}

function streamLabelNode(name: string, tags: string[]): Node {
  const span = el('span', { class: 'stream' }, el('span', { class: 'sname' }, name));
  for (const t of tags.slice(0, 6)) span.append(' ', el('span', { class: t === 'strata:self' ? 'chip chip-self' : 'chip' }, t));
  return span;
}

/** Most text changes listed. */
const TEXT_ROWS_MAX = 500;

export async function textGraph(host: HTMLElement, g: Graph, ctx: Ctx): Promise<() => void> {
  const data = await api.fetchData({ query: g.query, startS: ctx.startS, endS: ctx.endS, period: ctx.period });
  const s = data.series.find((x) => x.key === g.key) ?? data.series[0];
  const rows = ((s?.data ?? []) as Array<{ ts_ms: number; value: string }>).slice(-TEXT_ROWS_MAX).reverse();
  const zone = tzSuffix(rows[0]?.ts_ms ?? Date.now());
  const table = el('table', { class: 'changes', 'data-testid': 'changes' }, el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, `time (${zone})`), el('th', { scope: 'col' }, 'value'))));
  const body = el('tbody');
  for (const r of rows) body.append(el('tr', {}, el('td', { 'data-ms': String(r.ts_ms) }, fmtTimeZ(r.ts_ms, true).replace(/ UTC.*$/, '')), el('td', {}, r.value)));
  table.append(body);
  host.append(rows.length ? table : el('p', { class: 'empty' }, 'No changes in this range.'));
  return () => {};
}

/** A CAQL value as a number: histograms as their sample count. */
export function caqlNumber(v: unknown): number | null {
  if (typeof v === 'number') return v;
  if (v && typeof v === 'object' && 'bins' in v) return total(bins((v as { bins: RawBin[] }).bins));
  return null;
}

export async function caqlGraph(host: HTMLElement, query: string, ctx: Ctx, unit: Unit = ''): Promise<() => void> {
  const out = await api.caql(query, ctx.startS, ctx.endS, ctx.period);
  if (out.series.length === 0) {
    const hint = /(^|[^:\w])find\s*\(/.test(query)
      ? ' A plain find(…) reads numeric streams only; histogram streams need find:histogram(…).'
      : '';
    host.append(el('p', { class: 'empty', 'data-testid': 'caql-empty' }, `The query returned no streams.${hint}`));
    return () => {};
  }
  const xs = out.series[0].values.map(([t]) => t);
  const hist = out.series.some((s) => s.values.some(([, v]) => v !== null && typeof v === 'object'));
  const lines: Line[] = out.series.map((s, i) => ({
    label: s.label,
    values: s.values.map(([, v]) => caqlNumber(v)),
    colour: seriesColour(i),
  }));
  const what = hist ? `samples per ${periodText(out.period * 1000)} (histogram outputs as their count)` : `value per ${periodText(out.period * 1000)}`;
  return lineChart(host, xs, lines, ctx, unit, what, 'caql-chart');
}
