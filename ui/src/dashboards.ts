// Dashboards: a grid of panels (heatmap, line, single value, histogram, text, alert list) over
// one shared time range, with one cursor across every time chart; saved in the server
// (`/api/strata/v1/dashboards`) and shared by URL (`?d=<id>`).
import * as api from './api';
import { caqlGraph, caqlNumber, COLOR_MODES, drawHistogram, el, graphUnit, histogramGraph, lineChart, numericGraph, seriesColour, unitSelect, AGGS, type Ctx } from './charts';
import { ago, fmtCount, fmtTimeZ, fmtValue, graphTitle, isUnit, streamLabel, type Unit } from './format';
import { bins, mean, merge, quantile, total, type RawBin } from './hist';
import { alertList } from './home';
import type { Graph, State, View } from './state';

/** Grid columns, the height of one grid row (px) and the bounds the server also checks. */
export const COLUMNS = 12;
const ROW_PX = 150;
const HEIGHT_ROWS_MAX = 8;
/** Most panels on one dashboard (the server's bound). */
export const PANELS_MAX = 100;

export const PANEL_TYPES: Array<[api.PanelType, string]> = [
  ['heatmap', 'Heatmap (histogram stream)'],
  ['line', 'Line chart'],
  ['value', 'Single value'],
  ['histogram', 'Histogram of the range'],
  ['text', 'Text'],
  ['alerts', 'Firing alerts'],
];

const HIST_STATS = ['p50', 'p90', 'p99', 'p99.9', 'mean', 'count', 'max'];
const NUM_STATS = ['last', 'mean', 'max', 'min', 'sum', 'count'];

export interface DashHooks {
  go(v: View, extra?: Partial<State>): void;
  cur(): boolean;
  status(text: string): void;
}

export interface DashViewHooks extends DashHooks {
  keep(cleanup: () => void): void;
  setUrl(): void;
  /** Draws the view again (through the app, so cleanups and readiness are kept). */
  rerender(): void;
}

/** A URL-safe id from a name: `Web latency!` → `web-latency`. */
export function slug(name: string): string {
  const s = name
    .toLowerCase()
    .normalize('NFKD')
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 48);
  return s || 'dashboard';
}

/** An id not taken yet: the name's slug, then `-2`, `-3`, …. */
async function freeId(name: string): Promise<string> {
  const taken = new Set((await api.dashboards.list()).map((d) => d.id));
  const base = slug(name);
  if (!taken.has(base)) return base;
  for (let i = 2; ; i++) if (!taken.has(`${base}-${i}`)) return `${base}-${i}`;
}

/**
 * Places panels in their order: each goes as high as the columns it covers allow, so panels never
 * overlap and moving one earlier in the order moves it up.
 */
export function layout(panels: api.Panel[]): void {
  const sky = new Array<number>(COLUMNS).fill(0);
  for (const p of panels) {
    p.w = Math.max(1, Math.min(COLUMNS, Math.round(p.w) || COLUMNS));
    p.h = Math.max(1, Math.min(HEIGHT_ROWS_MAX, Math.round(p.h) || 2));
    p.x = Math.max(0, Math.min(COLUMNS - p.w, Math.round(p.x) || 0));
    let y = 0;
    for (let c = p.x; c < p.x + p.w; c++) y = Math.max(y, sky[c]);
    p.y = y;
    for (let c = p.x; c < p.x + p.w; c++) sky[c] = y + p.h;
  }
}

/** Where a new panel of width `w` fits best: the column whose skyline is lowest. */
function freeX(panels: api.Panel[], w: number): number {
  const sky = new Array<number>(COLUMNS).fill(0);
  for (const p of panels) for (let c = p.x; c < p.x + p.w && c < COLUMNS; c++) sky[c] = Math.max(sky[c], p.y + p.h);
  let best = 0;
  let bestY = Infinity;
  for (let x = 0; x + w <= COLUMNS; x++) {
    const y = Math.max(...sky.slice(x, x + w));
    if (y < bestY) {
      bestY = y;
      best = x;
    }
  }
  return best;
}

let panelSeq = 0;
function newPanelId(panels: api.Panel[]): string {
  const ids = new Set(panels.map((p) => p.id));
  for (;;) {
    const id = `p${Date.now().toString(36)}${(panelSeq++).toString(36)}`;
    if (!ids.has(id)) return id;
  }
}

/** A dashboard of the explore view's graphs: heatmaps for histograms, lines for numbers. */
export async function dashboardFromGraphs(name: string, graphs: Graph[]): Promise<string> {
  const panels: api.Panel[] = [];
  for (const g of graphs) {
    if (g.kind !== 'histogram' && g.kind !== 'numeric') continue;
    const p: api.Panel = {
      id: newPanelId(panels),
      type: g.kind === 'histogram' ? 'heatmap' : 'line',
      query: g.query,
      key: g.key,
      name: g.name,
      tags: g.tags,
      kind: g.kind,
      unit: g.unit,
      color: g.color,
      stat: g.agg,
      x: 0,
      y: 0,
      w: g.kind === 'histogram' ? 12 : 6,
      h: 2,
    };
    p.x = freeX(panels, p.w);
    panels.push(p);
    layout(panels);
  }
  const id = await freeId(name);
  await api.dashboards.save({ id, name, panels });
  return id;
}

// ---------------------------------------------------------------- the list

export async function renderDashboardList(host: HTMLElement, hooks: DashHooks): Promise<void> {
  const list = await api.dashboards.list();
  if (!hooks.cur()) return;
  const name = el('input', { id: 'dash-new-name', placeholder: 'e.g. Checkout latency', required: '' });
  const create = el('button', { type: 'submit', id: 'dash-create' }, 'Create');
  const form = el('form', { class: 'row', 'aria-label': 'new dashboard' }, el('label', { for: 'dash-new-name' }, 'New dashboard '), name, create);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const n = name.value.trim();
    if (!n) return;
    try {
      const id = await freeId(n);
      await api.dashboards.save({ id, name: n, panels: [] });
      hooks.go('dashboard', { dash: id });
    } catch (err) {
      hooks.status(`Dashboard: ${(err as Error).message}`);
    }
  });
  const ul = el('ul', { class: 'dashlist', 'data-testid': 'dash-list' });
  for (const d of list) {
    const a = el('a', { href: `?d=${encodeURIComponent(d.id)}`, 'data-testid': 'dash-open', 'data-id': d.id }, d.name);
    a.addEventListener('click', (e) => {
      if (e.ctrlKey || e.metaKey || e.shiftKey) return;
      e.preventDefault();
      hooks.go('dashboard', { dash: d.id });
    });
    ul.append(el('li', {}, a, el('span', { class: 'muted small' }, ` · changed ${fmtTimeZ(d.updated_ms)} (${ago(d.updated_ms)})`)));
  }
  if (list.length === 0) ul.append(el('li', { class: 'muted' }, 'No dashboards yet: create one, or make one from the graphs in Explore.'));
  host.replaceChildren(el('div', { class: 'page' }, el('h1', {}, 'Dashboards'), form, ul));
}

// ---------------------------------------------------------------- one dashboard

function graphOf(p: api.Panel): Graph {
  return {
    query: p.query ?? '',
    key: p.key,
    name: p.name,
    tags: p.tags,
    kind: p.kind,
    agg: p.stat,
    unit: isUnit(p.unit) ? p.unit : undefined,
    color: p.color,
  };
}

function panelTitle(p: api.Panel): Node {
  if (p.title) return document.createTextNode(p.title);
  if (p.type === 'text') return document.createTextNode('');
  if (p.type === 'alerts') return document.createTextNode('Firing alerts');
  if (p.caql) return el('code', {}, p.caql);
  if (p.query) return graphTitle(graphOf(p)).node;
  return el('span', { class: 'muted' }, 'no source yet');
}

async function quantileLines(body: HTMLElement, p: api.Panel, ctx: Ctx): Promise<() => void> {
  const data = await api.fetchData({ query: p.query ?? '', startS: ctx.startS, endS: ctx.endS, period: ctx.period, transform: 'quantile:0.5,0.9,0.99' });
  const s = data.series.find((x) => x.key === p.key) ?? data.series[0];
  if (!s) {
    body.append(el('p', { class: 'empty' }, 'No stream matches.'));
    return () => {};
  }
  const xs = s.data.map((d) => d.ts_ms / 1000);
  const lines = ['p50', 'p90', 'p99'].map((label, i) => ({
    label,
    values: s.data.map((d) => {
      const v = (d as api.HistSlice).value;
      return Array.isArray(v) && typeof v[i] === 'number' ? v[i] : null;
    }),
    colour: seriesColour(i),
  }));
  return lineChart(body, xs, lines, ctx, graphUnit(graphOf(p)), 'quantiles per slice', 'linechart');
}

async function valuePanel(body: HTMLElement, p: api.Panel, ctx: Ctx): Promise<void> {
  const unit: Unit = graphUnit(graphOf(p));
  let v: number | null = null;
  let caption = '';
  if (p.caql) {
    const out = await api.caql(p.caql, ctx.startS, ctx.endS, ctx.period);
    const vals = out.series[0]?.values ?? [];
    for (let i = vals.length - 1; i >= 0 && v === null; i--) v = caqlNumber(vals[i][1]);
    caption = 'latest value';
  } else {
    const data = await api.fetchData({ query: p.query ?? '', startS: ctx.startS, endS: ctx.endS, period: ctx.period });
    const s = data.series.find((x) => x.key === p.key) ?? data.series[0];
    if (s?.kind === 'histogram') {
      const all = bins(merge(s.data.map((d) => ((d as api.HistSlice).value as { bins?: RawBin[] } | null)?.bins ?? [])));
      const stat = p.stat && HIST_STATS.includes(p.stat) ? p.stat : 'p99';
      const n = total(all);
      if (stat === 'count') v = n;
      else if (n > 0) v = stat === 'mean' ? mean(all) : stat === 'max' ? all[all.length - 1].hi : quantile(all, Number(stat.slice(1)) / 100);
      caption = `${stat} of the range`;
    } else if (s) {
      const slices = s.data as api.NumericSlice[];
      const stat = p.stat && NUM_STATS.includes(p.stat) ? p.stat : 'last';
      const present = slices.filter((d) => typeof d.count === 'number' && d.count > 0);
      if (present.length) {
        if (stat === 'last') v = present[present.length - 1].last ?? null;
        else if (stat === 'max') v = Math.max(...present.map((d) => d.max ?? -Infinity));
        else if (stat === 'min') v = Math.min(...present.map((d) => d.min ?? Infinity));
        else if (stat === 'sum') v = present.reduce((a, d) => a + (d.sum ?? 0), 0);
        else if (stat === 'count') v = present.reduce((a, d) => a + (d.count ?? 0), 0);
        else {
          const n = present.reduce((a, d) => a + (d.count ?? 0), 0);
          v = n ? present.reduce((a, d) => a + (d.sum ?? 0), 0) / n : null;
        }
      }
      caption = stat === 'last' ? 'latest value' : `${stat} of the range`;
    }
  }
  const text = v === null ? 'no data' : p.stat === 'count' ? fmtCount(v) : fmtValue(v, unit);
  // The range it was computed over, so a reader (a test) can ask the API for the same one.
  const range = { 'data-start-s': String(ctx.startS), 'data-end-s': String(ctx.endS) };
  body.append(el('div', { class: 'bigvalue', 'data-testid': 'value', 'data-value': v === null ? '' : String(v), ...range }, text), el('div', { class: 'muted small' }, caption));
}

async function histPanel(body: HTMLElement, p: api.Panel, ctx: Ctx, width: number, height: number): Promise<void> {
  const data = await api.fetchData({ query: p.query ?? '', startS: ctx.startS, endS: ctx.endS, period: ctx.period });
  const s = data.series.find((x) => x.key === p.key) ?? data.series[0];
  const all = bins(merge((s?.data ?? []).map((d) => ((d as api.HistSlice).value as { bins?: RawBin[] } | null)?.bins ?? [])));
  const unit = graphUnit(graphOf(p));
  const c = el('canvas', { role: 'img', 'aria-label': 'histogram of the range' });
  const n = total(all);
  body.append(c, el('p', { class: 'small', 'data-testid': 'hist-stats', 'data-count': String(n) }, n ? `${fmtCount(n)} samples · p50 ${fmtValue(quantile(all, 0.5), unit)} · p90 ${fmtValue(quantile(all, 0.9), unit)} · p99 ${fmtValue(quantile(all, 0.99), unit)}` : 'no samples in this range'));
  drawHistogram(c, all, { unit, mode: p.color ?? 'density', width: Math.max(200, width), height: Math.max(80, height - 30) });
}

function textPanel(body: HTMLElement, p: api.Panel): void {
  const blocks = (p.text ?? '').split(/\n\s*\n/);
  for (const b of blocks) {
    if (!b.trim()) continue;
    if (b.startsWith('# ')) body.append(el('h3', {}, b.slice(2).trim()));
    else body.append(el('p', {}, b.trim()));
  }
}

async function alertsPanel(body: HTMLElement): Promise<void> {
  const firing = await api.firingAlerts();
  if (firing === null) body.append(el('p', { class: 'muted' }, 'Alerting is not available on this server.'));
  else if (firing.length === 0) body.append(el('p', {}, 'No alert is firing.'));
  else body.append(alertList(firing));
}

/** Draws one panel's content into `body`; returns its cleanup. */
async function renderPanel(body: HTMLElement, p: api.Panel, ctx: Ctx): Promise<() => void> {
  const height = p.h * ROW_PX - 64;
  const pctx: Ctx = { ...ctx, compact: true, height, changed: () => {} };
  switch (p.type) {
    case 'text':
      textPanel(body, p);
      return () => {};
    case 'alerts':
      await alertsPanel(body);
      return () => {};
    case 'value':
      if (!p.query && !p.caql) break;
      await valuePanel(body, p, ctx);
      return () => {};
    case 'histogram':
      if (!p.query) break;
      await histPanel(body, p, ctx, body.getBoundingClientRect().width, height);
      return () => {};
    case 'heatmap':
      if (!p.query) break;
      return histogramGraph(body, graphOf(p), { ...pctx, height: height - 30 });
    case 'line':
      if (p.caql) return caqlGraph(body, p.caql, { ...pctx, height: height - 40 }, isUnit(p.unit) ? p.unit : '');
      if (!p.query) break;
      if (p.kind === 'histogram') return quantileLines(body, p, { ...pctx, height: height - 40 });
      return numericGraph(body, graphOf(p), { ...pctx, height: height - 40 });
  }
  body.append(el('p', { class: 'muted' }, 'This panel has no source yet: edit it to pick a stream or a query.'));
  return () => {};
}

/** Dashboard being edited (kept across re-renders of the same dashboard, e.g. a range change). */
let editing: { id: string; doc: api.Dashboard; dirty: boolean } | null = null;

export async function renderDashboard(host: HTMLElement, id: string, ctx: Ctx, hooks: DashViewHooks): Promise<void> {
  let doc: api.Dashboard;
  if (editing && editing.id === id) doc = editing.doc;
  else {
    editing = null;
    doc = await api.dashboards.get(id);
    if (!hooks.cur()) return;
  }
  document.title = `${doc.name} · Strata`;
  const panels = [...doc.panels].sort((a, b) => a.y - b.y || a.x - b.x);
  layout(panels);
  doc.panels = panels;
  const isEditing = editing !== null;
  const sync = `dash-${id}`;

  const title = el('h1', { 'data-testid': 'dash-title' }, doc.name);
  const toolbar = el('div', { class: 'toolbar dtools' });
  const grid = el('div', { class: 'dgrid', 'data-testid': 'dash-grid', 'data-editing': String(isEditing) });
  const editorBox = el('div', { id: 'panel-editor' });
  const page = el('div', { class: 'page dashboard', 'data-id': id }, el('div', { class: 'dhead' }, title, toolbar), doc.description ? el('p', { class: 'muted' }, doc.description) : '', editorBox, grid);
  host.replaceChildren(page);

  const rerender = () => hooks.rerender();
  const markDirty = () => {
    if (editing) editing.dirty = true;
    rerender();
  };

  if (!isEditing) {
    const edit = el('button', { type: 'button', 'data-testid': 'dash-edit' }, 'Edit');
    edit.addEventListener('click', () => {
      editing = { id, doc: structuredClone(doc), dirty: false };
      rerender();
    });
    const share = el('button', { type: 'button', 'data-testid': 'dash-share' }, 'Copy link');
    share.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(location.href);
        hooks.status('Link copied: it opens this dashboard with this time range.');
      } catch {
        hooks.status(`Link: ${location.href}`);
      }
    });
    const del = el('button', { type: 'button', class: 'danger', 'data-testid': 'dash-delete' }, 'Delete');
    del.addEventListener('click', async () => {
      if (!confirm(`Delete dashboard “${doc.name}”?`)) return;
      await api.dashboards.remove(id);
      hooks.go('dashboards');
    });
    toolbar.append(edit, share, del, el('span', { class: 'muted small' }, `changed ${doc.updated_ms ? fmtTimeZ(doc.updated_ms) : ''}`));
  } else {
    const nameIn = el('input', { id: 'dash-name', value: doc.name, 'aria-label': 'dashboard name' });
    nameIn.addEventListener('change', () => {
      doc.name = nameIn.value.trim() || doc.name;
      if (editing) editing.dirty = true;
    });
    title.replaceChildren(nameIn);
    const add = el('button', { type: 'button', 'data-testid': 'dash-add' }, 'Add panel');
    add.addEventListener('click', () => openEditor(null));
    const saveBtn = el('button', { type: 'button', class: 'primary', 'data-testid': 'dash-save' }, 'Save');
    saveBtn.addEventListener('click', async () => {
      try {
        const saved = await api.dashboards.save({ ...doc, id });
        editing = null;
        hooks.status(`Saved dashboard “${saved.name}”.`);
        rerender();
      } catch (e) {
        hooks.status(`Dashboard: ${(e as Error).message}`);
      }
    });
    const cancel = el('button', { type: 'button', 'data-testid': 'dash-cancel' }, 'Cancel');
    cancel.addEventListener('click', () => {
      if (editing?.dirty && !confirm('Drop the unsaved changes?')) return;
      editing = null;
      rerender();
    });
    toolbar.append(add, saveBtn, cancel, el('span', { class: 'muted small' }, editing?.dirty ? 'unsaved changes' : ''));
  }

  function openEditor(existing: api.Panel | null): void {
    const p: api.Panel = existing ? { ...existing } : { id: newPanelId(doc.panels), type: 'heatmap', x: 0, y: 0, w: 6, h: 2 };
    editorBox.replaceChildren(panelEditor(p, (done) => {
      editorBox.replaceChildren();
      if (!done) return;
      if (existing) Object.assign(existing, done);
      else {
        done.x = freeX(doc.panels, done.w);
        // Last in the order: placed as high as the columns it covers allow.
        done.y = doc.panels.reduce((m, q) => Math.max(m, q.y + q.h), 0);
        doc.panels.push(done);
      }
      markDirty();
    }));
    editorBox.querySelector<HTMLElement>('select, input')?.focus();
  }

  if (doc.panels.length === 0) {
    grid.append(el('p', { class: 'muted empty' }, isEditing ? 'Add a panel to start.' : 'This dashboard has no panels yet: Edit, then Add panel.'));
  }
  const jobs: Array<Promise<void>> = [];
  doc.panels.forEach((p, i) => {
    const section = el('section', {
      class: `dpanel type-${p.type}`,
      'data-testid': 'dash-panel',
      'data-type': p.type,
      'data-panel': p.id,
      style: `grid-column: ${p.x + 1} / span ${p.w}; grid-row: ${p.y + 1} / span ${p.h}; --rows: ${p.h}`,
    });
    const titleNode = panelTitle(p);
    const body = el('div', { class: 'dbody' });
    const titleText = titleNode.textContent ?? '';
    // Each panel is a region named by its type and title, so two views of one stream differ.
    const typeName = PANEL_TYPES.find(([t]) => t === p.type)?.[1] ?? p.type;
    section.setAttribute('aria-label', titleText ? `${typeName}: ${titleText}` : typeName);
    if (titleText) section.append(el('h2', { class: 'ptitle' }, titleNode));
    section.append(body);
    if (isEditing) section.append(panelControls(p, i));
    grid.append(section);
    jobs.push(
      (async () => {
        try {
          const cleanup = await renderPanel(body, p, { ...ctx, sync });
          hooks.keep(cleanup);
        } catch (e) {
          body.append(el('p', { class: 'error' }, (e as Error).message));
        }
      })(),
    );
  });

  function panelControls(p: api.Panel, i: number): HTMLElement {
    const b = (label: string, aria: string, fn: () => void, testid: string) => {
      const x = el('button', { type: 'button', 'aria-label': `${aria} (${p.title || p.type} panel)`, 'data-testid': testid }, label);
      x.addEventListener('click', fn);
      return x;
    };
    const move = (d: number) => () => {
      const j = i + d;
      if (j < 0 || j >= doc.panels.length) return;
      [doc.panels[i], doc.panels[j]] = [doc.panels[j], doc.panels[i]];
      // Moving earlier or later in the order moves up or down in the grid.
      doc.panels.forEach((q, k) => (q.y = k));
      markDirty();
    };
    return el(
      'div',
      { class: 'pcontrols' },
      b('Edit', 'edit', () => openEditor(p), 'panel-edit'),
      b('↑', 'move up', move(-1), 'panel-up'),
      b('↓', 'move down', move(1), 'panel-down'),
      b('←', 'move left', () => ((p.x = Math.max(0, p.x - 1)), markDirty()), 'panel-left'),
      b('→', 'move right', () => ((p.x = Math.min(COLUMNS - p.w, p.x + 1)), markDirty()), 'panel-right'),
      b('−', 'narrower', () => ((p.w = Math.max(1, p.w - 1)), markDirty()), 'panel-narrower'),
      b('+', 'wider', () => ((p.w = Math.min(COLUMNS, p.w + 1)), markDirty()), 'panel-wider'),
      b('Remove', 'remove', () => {
        doc.panels.splice(i, 1);
        markDirty();
      }, 'panel-remove'),
    );
  }
  await Promise.all(jobs);
}

/** The panel editor: type, title, source (a stream or CAQL), statistic, unit, size, text. */
function panelEditor(p: api.Panel, done: (p: api.Panel | null) => void): HTMLElement {
  const form = el('form', { class: 'peditor card', 'aria-label': 'panel editor', 'data-testid': 'panel-editor' });
  const typeSel = el('select', { id: 'pe-type' });
  for (const [t, label] of PANEL_TYPES) typeSel.append(el('option', t === p.type ? { value: t, selected: '' } : { value: t }, label));
  const titleIn = el('input', { id: 'pe-title', value: p.title ?? '', placeholder: 'default: the stream name' });
  const streamIn = el('input', { id: 'pe-stream', placeholder: 'search a stream by name', autocomplete: 'off', value: '' });
  const picked = el('div', { class: 'small', 'data-testid': 'pe-picked' }, p.name ? streamLabel(p.name, p.tags ?? []) : el('span', { class: 'muted' }, 'no stream picked'));
  const results = el('ul', { class: 'plain pe-results', 'aria-label': 'matching streams' });
  const caqlIn = el('textarea', { id: 'pe-caql', rows: '2', placeholder: 'or a CAQL query, e.g. find:histogram("api_latency") | histogram:percentile(99)' }, p.caql ?? '');
  const statSel = el('select', { id: 'pe-stat' });
  const textIn = el('textarea', { id: 'pe-text', rows: '4', placeholder: '# A heading\n\nA paragraph.' }, p.text ?? '');
  const wIn = el('input', { id: 'pe-w', type: 'number', min: '1', max: String(COLUMNS), value: String(p.w) });
  const hIn = el('input', { id: 'pe-h', type: 'number', min: '1', max: String(HEIGHT_ROWS_MAX), value: String(p.h) });
  const colorSel = el('select', { id: 'pe-color' });
  for (const [m, label] of COLOR_MODES) colorSel.append(el('option', m === (p.color ?? 'density') ? { value: m, selected: '' } : { value: m }, label));
  let unit: Unit = isUnit(p.unit) ? p.unit : '';
  const unitBox = unitSelect(unit, (u) => (unit = u));

  const fillStats = () => {
    const kind = p.kind ?? '';
    const list = typeSel.value === 'line' && kind !== 'histogram' ? [...AGGS] : kind === 'histogram' ? HIST_STATS : NUM_STATS;
    statSel.replaceChildren(...list.map((s) => el('option', s === p.stat ? { value: s, selected: '' } : { value: s }, s)));
  };
  fillStats();
  const field = (label: string, input: HTMLElement, id: string) => el('div', { class: 'field', 'data-field': id }, el('label', { for: id }, label), input);
  const fStream = el('div', { class: 'field', 'data-field': 'pe-stream' }, el('label', { for: 'pe-stream' }, 'Stream'), streamIn, results, picked);
  const fCaql = field('CAQL', caqlIn, 'pe-caql');
  const fStat = field('Statistic', statSel, 'pe-stat');
  const fText = field('Text', textIn, 'pe-text');
  const fColor = field('Colour', colorSel, 'pe-color');
  const show = () => {
    const t = typeSel.value as api.PanelType;
    fStream.hidden = t === 'text' || t === 'alerts';
    fCaql.hidden = !(t === 'line' || t === 'value');
    fStat.hidden = !(t === 'value' || (t === 'line' && p.kind !== 'histogram'));
    fText.hidden = t !== 'text';
    fColor.hidden = !(t === 'heatmap' || t === 'histogram');
    unitBox.hidden = t === 'text' || t === 'alerts';
    fillStats();
  };
  typeSel.addEventListener('change', show);
  let seq = 0;
  streamIn.addEventListener('input', async () => {
    const my = ++seq;
    const text = streamIn.value.trim();
    if (!text) {
      results.replaceChildren();
      return;
    }
    const t = typeSel.value;
    const kind = t === 'heatmap' || t === 'histogram' ? ',__type:histogram' : '';
    const q = text.includes(':') || text.includes('(') ? text : `and(__name:*${text}*${kind})`;
    try {
      const found = await api.find(q, 15, 'recent');
      if (my !== seq) return;
      results.replaceChildren(
        ...found.map((s) => {
          const b = el('button', { type: 'button', class: 'link', 'data-key': s.key }, el('span', { class: `kind kind-${s.kind}` }, s.kind), ' ', streamLabel(s.name, s.tags));
          b.addEventListener('click', () => {
            Object.assign(p, { query: api.exactQuery(s), key: s.key, name: s.name, tags: s.tags, kind: s.kind });
            picked.replaceChildren(streamLabel(s.name, s.tags));
            results.replaceChildren();
            streamIn.value = '';
            fillStats();
            show();
          });
          return el('li', {}, b);
        }),
      );
      if (found.length === 0) results.replaceChildren(el('li', { class: 'muted' }, 'No stream matches.'));
    } catch (e) {
      results.replaceChildren(el('li', { class: 'error' }, (e as Error).message));
    }
  });
  const apply = el('button', { type: 'submit', class: 'primary', 'data-testid': 'pe-apply' }, 'Apply');
  const cancel = el('button', { type: 'button' }, 'Cancel');
  cancel.addEventListener('click', () => done(null));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const t = typeSel.value as api.PanelType;
    const out: api.Panel = { ...p, type: t, w: Number(wIn.value) || p.w, h: Number(hIn.value) || p.h };
    const title = titleIn.value.trim();
    if (title) out.title = title;
    else delete out.title;
    const q = caqlIn.value.trim();
    if ((t === 'line' || t === 'value') && q) out.caql = q;
    else delete out.caql;
    if (!fStat.hidden) out.stat = statSel.value;
    if (t === 'text') out.text = textIn.value;
    else delete out.text;
    if (!fColor.hidden) out.color = colorSel.value === 'count' ? 'count' : 'density';
    if (unit) out.unit = unit;
    else delete out.unit;
    done(out);
  });
  form.append(
    el('h2', {}, 'Panel'),
    el('div', { class: 'fields' }, field('Type', typeSel, 'pe-type'), field('Title', titleIn, 'pe-title'), fStream, fCaql, fStat, fColor, unitBox, fText, field('Width (of 12 columns)', wIn, 'pe-w'), field(`Height (rows of ${ROW_PX} px)`, hIn, 'pe-h')),
    el('div', { class: 'row' }, apply, cancel),
  );
  show();
  return form;
}
