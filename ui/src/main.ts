import 'uplot/dist/uPlot.min.css';
import './style.css';
import * as api from './api';
import { caqlGraph, el, histogramGraph, numericGraph, textGraph, type Ctx } from './charts';
import { bench } from './heatmap';
import { autoPeriod, fromUrl, GRAPHS_MAX, RANGES, rangeS, toUrl, type Graph, type State } from './state';

/** Live refresh interval. */
const LIVE_MS = 10_000;

let state: State = fromUrl(location.search);
let cleanups: Array<() => void> = [];
let liveTimer: number | undefined;

const app = document.getElementById('app') as HTMLElement;

function setUrl(): void {
  history.replaceState(null, '', toUrl(state));
}

function applyTheme(): void {
  document.documentElement.dataset.theme = state.theme;
}

// ---------------------------------------------------------------- shell

const search = el('input', {
  type: 'search',
  id: 'search',
  placeholder: 'Search streams: name, or a tag query like and(__name:api*,env:prod)',
  role: 'combobox',
  'aria-autocomplete': 'list',
  'aria-controls': 'suggest',
  'aria-expanded': 'false',
  'aria-label': 'search streams',
  autocomplete: 'off',
});
const suggest = el('ul', { id: 'suggest', role: 'listbox', class: 'suggest', 'aria-label': 'matching streams' });
const addAll = el('button', { type: 'button', id: 'add-all' }, 'Add all');
const rangeSel = el('select', { id: 'range', 'aria-label': 'time range' });
for (const r of Object.keys(RANGES)) rangeSel.append(el('option', { value: r }, `last ${r}`));
rangeSel.append(el('option', { value: 'custom' }, 'custom'));
const fromInput = el('input', { type: 'datetime-local', id: 'from', 'aria-label': 'from (UTC)', step: '60' });
const toInput = el('input', { type: 'datetime-local', id: 'to', 'aria-label': 'to (UTC)', step: '60' });
const applyRange = el('button', { type: 'button', id: 'apply-range' }, 'Apply');
const periodInput = el('input', { id: 'period', placeholder: 'auto', size: '5', 'aria-label': 'period (e.g. 1m, 5m)' });
const live = el('input', { type: 'checkbox', id: 'live' });
const themeBtn = el('button', { type: 'button', id: 'theme', 'aria-label': 'toggle light and dark theme' }, '◐ theme');
const status = el('div', { id: 'status', role: 'status', 'aria-live': 'polite' });

const wsName = el('input', { id: 'ws-name', placeholder: 'worksheet name', 'aria-label': 'worksheet name' });
const wsSave = el('button', { type: 'button', id: 'ws-save' }, 'Save');
const wsSaveNew = el('button', { type: 'button', id: 'ws-save-new' }, 'Save as new');
const wsList = el('ul', { id: 'ws-list', class: 'wslist' });

const caqlText = el('textarea', { id: 'caql', rows: '3', placeholder: 'CAQL, e.g. find("latency") | histogram:percentile(99)', 'aria-label': 'CAQL query' });
const caqlRun = el('button', { type: 'button', id: 'caql-run' }, 'Run');
const caqlOut = el('div', { id: 'caql-out' });

const graphsHost = el('main', { id: 'graphs', 'aria-label': 'graphs' });

app.append(
  el(
    'header',
    {},
    el('h1', {}, 'Strata'),
    el('div', { class: 'searchbox' }, search, addAll, suggest),
    el('div', { class: 'range' }, rangeSel, fromInput, toInput, applyRange, el('label', {}, 'period ', periodInput), el('label', {}, live, ' live'), themeBtn),
  ),
  el(
    'div',
    { class: 'body' },
    el(
      'aside',
      {},
      el('section', { 'aria-label': 'worksheets' }, el('h2', {}, 'Worksheets'), wsName, el('div', {}, wsSave, wsSaveNew), wsList),
      el('section', { 'aria-label': 'analytics query' }, el('h2', {}, 'CAQL'), caqlText, caqlRun),
    ),
    el('div', { class: 'content' }, status, caqlOut, graphsHost),
  ),
);

// ---------------------------------------------------------------- explore

let found: api.SeriesInfo[] = [];
let searchSeq = 0;
let activeIdx = -1;

function toQuery(text: string): string {
  const t = text.trim();
  if (t.includes(':') || t.includes('(')) return t;
  return `__name:*${t}*`;
}

async function runSearch(): Promise<void> {
  const seq = ++searchSeq;
  const text = search.value.trim();
  if (!text) {
    found = [];
    renderSuggest();
    return;
  }
  try {
    const list = await api.find(toQuery(text));
    if (seq !== searchSeq) return;
    found = list;
    status.textContent = '';
  } catch (e) {
    if (seq !== searchSeq) return;
    found = [];
    status.textContent = `search: ${(e as Error).message}`;
  }
  activeIdx = -1;
  renderSuggest();
}

function renderSuggest(): void {
  suggest.replaceChildren(
    ...found.map((s, i) => {
      const li = el('li', { role: 'option', id: `opt-${i}`, 'data-key': s.key, 'aria-selected': String(i === activeIdx), class: i === activeIdx ? 'active' : '' },
        el('span', { class: `kind kind-${s.kind}` }, s.kind), ' ', s.name, ' ', el('span', { class: 'muted' }, s.tags.join(', ')));
      li.addEventListener('mousedown', (e) => {
        e.preventDefault();
        pick([s]);
      });
      return li;
    }),
  );
  search.setAttribute('aria-expanded', String(found.length > 0));
  if (activeIdx >= 0) search.setAttribute('aria-activedescendant', `opt-${activeIdx}`);
  else search.removeAttribute('aria-activedescendant');
}

function pick(list: api.SeriesInfo[]): void {
  for (const s of list) {
    if (state.graphs.length >= GRAPHS_MAX) break;
    if (state.graphs.some((g) => g.key === s.key)) continue;
    state.graphs.push({ query: api.exactQuery(s), key: s.key, title: s.key, kind: s.kind });
  }
  found = [];
  search.value = '';
  renderSuggest();
  render();
}

let debounce: number | undefined;
search.addEventListener('input', () => {
  clearTimeout(debounce);
  debounce = window.setTimeout(() => void runSearch(), 150);
});
search.addEventListener('keydown', (e) => {
  if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
    if (found.length === 0) return;
    activeIdx = (activeIdx + (e.key === 'ArrowDown' ? 1 : found.length - 1)) % found.length;
    renderSuggest();
    e.preventDefault();
  } else if (e.key === 'Enter') {
    if (activeIdx >= 0 && found[activeIdx]) pick([found[activeIdx]]);
    else void runSearch();
    e.preventDefault();
  } else if (e.key === 'Escape') {
    found = [];
    renderSuggest();
  }
});
addAll.addEventListener('click', () => pick(found));

// ---------------------------------------------------------------- range, theme, live

function toLocalInput(s: number): string {
  return new Date(s * 1000).toISOString().slice(0, 16);
}

function syncControls(): void {
  const custom = state.startS !== undefined && state.endS !== undefined;
  rangeSel.value = custom ? 'custom' : state.range;
  const [a, b] = rangeS(state);
  fromInput.value = toLocalInput(a);
  toInput.value = toLocalInput(b);
  periodInput.value = state.period ?? '';
  live.checked = state.live;
  wsName.value = state.wsName ?? '';
  caqlText.value = state.caql ?? '';
}

rangeSel.addEventListener('change', () => {
  if (rangeSel.value === 'custom') return;
  state.range = rangeSel.value;
  state.startS = undefined;
  state.endS = undefined;
  render();
});
applyRange.addEventListener('click', () => {
  const a = Date.parse(`${fromInput.value}:00Z`) / 1000;
  const b = Date.parse(`${toInput.value}:00Z`) / 1000;
  if (!(b > a)) {
    status.textContent = 'range: "to" must be after "from"';
    return;
  }
  state.startS = a;
  state.endS = b;
  render();
});
periodInput.addEventListener('change', () => {
  state.period = periodInput.value.trim() || undefined;
  render();
});
live.addEventListener('change', () => {
  state.live = live.checked;
  setLive();
  setUrl();
});
themeBtn.addEventListener('click', () => {
  state.theme = state.theme === 'dark' ? 'light' : 'dark';
  applyTheme();
  render();
});

function setLive(): void {
  clearInterval(liveTimer);
  liveTimer = undefined;
  if (state.live) {
    liveTimer = window.setInterval(() => {
      // Live refresh follows "now"; a zoomed (absolute) range stays where it is.
      if (state.startS === undefined) void render();
    }, LIVE_MS);
  }
}

// ---------------------------------------------------------------- graphs

let renderSeq = 0;

async function render(): Promise<void> {
  const seq = ++renderSeq;
  setUrl();
  syncControls();
  for (const c of cleanups) c();
  cleanups = [];
  const [startS, endS] = rangeS(state);
  const ctx: Ctx = {
    state,
    startS,
    endS,
    period: autoPeriod(state, endS - startS),
    changed: (refetch) => (refetch ? void render() : setUrl()),
    zoom: (a, b) => {
      state.startS = a;
      state.endS = b;
      void render();
    },
  };
  // Keep each panel's height while it refetches, so a refresh does not make the page jump.
  const heights = [...graphsHost.querySelectorAll<HTMLElement>('.pbody')].map((b) => b.offsetHeight);
  graphsHost.replaceChildren();
  graphsHost.dataset.ready = 'false';
  graphsHost.dataset.renders = String(seq);
  const jobs: Array<Promise<void>> = [];
  if (state.caql) jobs.push(renderCaql(ctx, seq));
  else caqlOut.replaceChildren();
  state.graphs.forEach((g, i) => {
    const panel = el('section', { class: 'panel', 'data-testid': 'graph', 'data-kind': g.kind ?? '', 'aria-label': g.title ?? g.query });
    const remove = el('button', { type: 'button', class: 'remove', 'aria-label': `remove ${g.title ?? g.query}` }, '×');
    remove.addEventListener('click', () => {
      state.graphs.splice(i, 1);
      void render();
    });
    panel.append(el('h3', {}, el('span', { class: `kind kind-${g.kind}` }, g.kind ?? '?'), ' ', g.title ?? g.query, remove));
    const body = el('div', { class: 'pbody' });
    if (heights[i]) body.style.minHeight = `${heights[i]}px`;
    panel.append(body);
    graphsHost.append(panel);
    jobs.push(renderGraph(body, g, ctx, seq));
  });
  await Promise.all(jobs);
  if (seq === renderSeq) graphsHost.dataset.ready = 'true';
}

async function renderGraph(body: HTMLElement, g: Graph, ctx: Ctx, seq: number): Promise<void> {
  try {
    const kind = g.kind ?? (await api.find(g.query, 1))[0]?.kind;
    g.kind = kind;
    if (seq !== renderSeq) return;
    const draw = kind === 'histogram' ? histogramGraph : kind === 'text' ? textGraph : numericGraph;
    const cleanup = await draw(body, g, ctx);
    if (seq !== renderSeq) cleanup();
    else cleanups.push(cleanup);
  } catch (e) {
    body.append(el('p', { class: 'error', role: 'alert' }, (e as Error).message));
  }
}

async function renderCaql(ctx: Ctx, seq: number): Promise<void> {
  const box = el('section', { class: 'panel', 'data-testid': 'caql-panel' }, el('h3', {}, 'CAQL: ', state.caql ?? ''));
  caqlOut.replaceChildren(box);
  try {
    const cleanup = await caqlGraph(box, state.caql ?? '', ctx);
    if (seq !== renderSeq) cleanup();
    else cleanups.push(cleanup);
  } catch (e) {
    box.append(el('p', { class: 'error', role: 'alert', 'data-testid': 'caql-error' }, (e as Error).message));
  }
}

caqlRun.addEventListener('click', () => {
  state.caql = caqlText.value.trim() || undefined;
  void render();
});
caqlText.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) caqlRun.click();
});

// ---------------------------------------------------------------- worksheets

async function refreshWorksheets(): Promise<void> {
  try {
    const list = await api.listWorksheets();
    wsList.replaceChildren(
      ...list.map((w) => {
        const open = el('button', { type: 'button', class: 'link', 'data-testid': 'ws-open', 'data-id': w.id }, w.name);
        open.addEventListener('click', () => void openWorksheet(w.id));
        const del = el('button', { type: 'button', 'aria-label': `delete worksheet ${w.name}`, 'data-testid': 'ws-delete' }, '×');
        del.addEventListener('click', async () => {
          if (!confirm(`Delete worksheet "${w.name}"?`)) return;
          await api.deleteWorksheet(w.id);
          if (state.ws === w.id) state.ws = undefined;
          await refreshWorksheets();
        });
        return el('li', { 'data-testid': 'ws-item', class: state.ws === w.id ? 'current' : '' }, open, del);
      }),
    );
  } catch (e) {
    wsList.replaceChildren(el('li', { class: 'error' }, (e as Error).message));
  }
}

async function openWorksheet(id: string): Promise<void> {
  try {
    const w = await api.getWorksheet(id);
    const saved = (w.state ?? {}) as Partial<State>;
    state = { ...state, ...saved, graphs: (w.graphs as Graph[]).slice(0, GRAPHS_MAX), ws: w.id, wsName: w.name };
    applyTheme();
    await refreshWorksheets();
    await render();
  } catch (e) {
    status.textContent = `worksheet: ${(e as Error).message}`;
  }
}

async function save(asNew: boolean): Promise<void> {
  const name = wsName.value.trim();
  if (!name) {
    status.textContent = 'worksheet: give it a name';
    wsName.focus();
    return;
  }
  const { graphs, ws: _ws, wsName: _n, ...rest } = state;
  try {
    const saved = await api.saveWorksheet({ id: asNew ? undefined : state.ws, name, graphs, state: rest });
    state.ws = saved.id;
    state.wsName = name;
    status.textContent = `saved worksheet "${name}"`;
    setUrl();
    await refreshWorksheets();
  } catch (e) {
    status.textContent = `worksheet: ${(e as Error).message}`;
  }
}
wsSave.addEventListener('click', () => void save(false));
wsSaveNew.addEventListener('click', () => void save(true));

// ---------------------------------------------------------------- start

declare global {
  interface Window {
    strataBench: typeof bench;
  }
}
window.strataBench = bench;

window.addEventListener('popstate', () => {
  state = fromUrl(location.search);
  applyTheme();
  void render();
});
applyTheme();
setLive();
void refreshWorksheets();
void render();
