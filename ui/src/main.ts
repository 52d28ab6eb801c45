import 'uplot/dist/uPlot.min.css';
import './style.css';
import * as api from './api';
import { caqlEditor } from './caql';
import { caqlGraph, el, histogramGraph, numericGraph, textGraph, type Ctx } from './charts';
import { renderDashboard, renderDashboardList, dashboardFromGraphs } from './dashboards';
import { ago, fmtTimeZ, fromInput, graphTitle, isSelf, setTz, streamLabel, toInput, tzLabel } from './format';
import { bench, levelRgb, LEVELS } from './heatmap';
import { renderHome } from './home';
import { renderAlerts } from './alerts';
import { renderRules } from './rules';
import { renderMaintenance, renderRoutes } from './maintenance';
import { installAuth, signIn, signOutButton } from './login';
import { FUNCTIONS } from './caql';
import { autoPeriod, fromUrl, GRAPHS_MAX, RANGES, rangeS, savePrefs, toUrl, type Graph, type State, type View } from './state';

/** Live refresh interval. */
const LIVE_MS = 10_000;

let state: State = fromUrl(location.search);
let cleanups: Array<() => void> = [];
let liveTimer: number | undefined;

const app = document.getElementById('app') as HTMLElement;

function setUrl(push = false): void {
  const url = toUrl(state);
  if (push) history.pushState(null, '', url);
  else history.replaceState(null, '', url);
}

function applyPrefs(): void {
  document.documentElement.dataset.theme = state.theme;
  setTz(state.tz);
  savePrefs(state);
}

// ---------------------------------------------------------------- shell

const NAV: Record<string, string> = { home: 'Home', explore: 'Explore', dashboards: 'Dashboards', alerts: 'Alerts', maintenance: 'Maintenance' };
const navLinks = (['home', 'explore', 'dashboards', 'alerts', 'maintenance'] as View[]).map((v) => {
  const a = el('a', { href: v === 'home' ? '/' : `?view=${v}`, 'data-view': v }, NAV[v]);
  a.addEventListener('click', (e) => {
    if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    go(v);
  });
  return a;
});

const search = el('input', {
  type: 'search',
  id: 'search',
  placeholder: 'Search streams: a name, or a tag query like and(__name:api*,env:prod)',
  role: 'combobox',
  'aria-autocomplete': 'list',
  'aria-controls': 'suggest',
  'aria-expanded': 'false',
  'aria-label': 'search streams',
  autocomplete: 'off',
});
const suggest = el('ul', { id: 'suggest', role: 'listbox', class: 'suggest', 'aria-label': 'matching streams' });
const searchInfo = el('div', { id: 'search-info', class: 'search-info', role: 'status', 'aria-live': 'polite' });
const addAll = el('button', { type: 'button', id: 'add-all' }, 'Add all');
const rangeSel = el('select', { id: 'range', 'aria-label': 'time range' });
for (const r of Object.keys(RANGES)) rangeSel.append(el('option', { value: r }, `last ${r}`));
rangeSel.append(el('option', { value: 'custom' }, 'custom'));
const fromInputEl = el('input', { type: 'datetime-local', id: 'from', step: '60' });
const toInputEl = el('input', { type: 'datetime-local', id: 'to', step: '60' });
const fromLabel = el('label', { for: 'from', class: 'sr-only' }, 'from');
const toLabel = el('label', { for: 'to', class: 'sr-only' }, 'to');
const applyRange = el('button', { type: 'button', id: 'apply-range' }, 'Apply');
const periodInput = el('input', { id: 'period', placeholder: 'auto', size: '4' });
const live = el('input', { type: 'checkbox', id: 'live' });
const tzSel = el('select', { id: 'tz' }, el('option', { value: 'local' }, 'local'), el('option', { value: 'UTC' }, 'UTC'));
const tzText = el('span', { id: 'tz-label', class: 'muted small', 'data-testid': 'tz-label' });
const themeBtn = el('button', { type: 'button', id: 'theme', 'aria-label': 'toggle light and dark theme' }, '◐ theme');
const status = el('div', { id: 'status', role: 'status', 'aria-live': 'polite' });
const rangeBox = el(
  'div',
  { class: 'range', role: 'group', 'aria-label': 'time range' },
  rangeSel,
  fromLabel,
  fromInputEl,
  el('span', { 'aria-hidden': 'true' }, '→'),
  toLabel,
  toInputEl,
  applyRange,
  el('label', {}, 'period ', periodInput),
  el('label', {}, live, ' live'),
);
const view = el('main', { id: 'view', tabindex: '-1' });

app.append(
  el('a', { class: 'skip', href: '#view' }, 'Skip to content'),
  el(
    'header',
    {},
    el('a', { class: 'brand', href: '/', 'aria-label': 'Strata home' }, el('span', { class: 'logo', 'aria-hidden': 'true' }), 'Strata'),
    el('nav', { 'aria-label': 'main' }, ...navLinks),
    el('div', { class: 'searchbox', role: 'search' }, search, addAll, suggest, searchInfo),
    rangeBox,
    el('div', { class: 'prefs' }, el('label', {}, 'Times ', tzSel), tzText, themeBtn, signOutButton()),
  ),
  status,
  view,
);

// ---------------------------------------------------------------- explore view

const wsName = el('input', { id: 'ws-name', placeholder: 'worksheet name', 'aria-label': 'worksheet name' });
const wsSave = el('button', { type: 'button', id: 'ws-save' }, 'Save');
const wsSaveNew = el('button', { type: 'button', id: 'ws-save-new' }, 'Save as new');
const wsList = el('ul', { id: 'ws-list', class: 'wslist' });
const toDash = el('button', { type: 'button', id: 'to-dashboard' }, 'Make a dashboard of these graphs');
const caqlOut = el('div', { id: 'caql-out' });
const graphsHost = el('section', { id: 'graphs', 'aria-label': 'graphs' });
const emptyExplore = el('p', { class: 'muted', id: 'explore-empty' }, 'Search for a stream above to graph it, open a worksheet, or run a CAQL query.');
const editor = caqlEditor((q) => {
  state.caql = q || undefined;
  void render();
});
const exploreAside = el(
  'aside',
  { 'aria-label': 'worksheets and analytics' },
  el('section', { 'aria-labelledby': 'h-ws' }, el('h2', { id: 'h-ws' }, 'Worksheets'), wsName, el('div', { class: 'row' }, wsSave, wsSaveNew), wsList, toDash),
  el('section', { 'aria-labelledby': 'h-caql' }, el('h2', { id: 'h-caql' }, 'CAQL'), editor.root),
);
const exploreContent = el('div', { class: 'content' }, el('h1', { class: 'sr-only' }, 'Explore'), emptyExplore, caqlOut, graphsHost);
const exploreRoot = el('div', { class: 'body explore' }, exploreAside, exploreContent);

// ---------------------------------------------------------------- search

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
    searchInfo.textContent = '';
    renderSuggest();
    return;
  }
  try {
    const list = await api.find(toQuery(text), api.FIND_LIMIT, 'recent');
    if (seq !== searchSeq) return;
    found = list;
    searchInfo.textContent = list.length === 0 ? `No stream matches “${text}”.` : '';
  } catch (e) {
    if (seq !== searchSeq) return;
    found = [];
    searchInfo.textContent = `Search: ${(e as Error).message}`;
  }
  activeIdx = -1;
  renderSuggest();
}

function renderSuggest(): void {
  let selfHeader = false;
  const items: HTMLElement[] = [];
  found.forEach((s, i) => {
    if (isSelf(s.tags) && !selfHeader && i > 0) {
      selfHeader = true;
      items.push(el('li', { role: 'presentation', class: 'sep muted' }, 'self-monitoring (strata:self)'));
    }
    const li = el(
      'li',
      { role: 'option', id: `opt-${i}`, 'data-key': s.key, 'aria-selected': String(i === activeIdx), class: i === activeIdx ? 'active' : '' },
      el('span', { class: `kind kind-${s.kind}` }, s.kind),
      ' ',
      streamLabel(s.name, s.tags),
      s.activity_ms ? el('span', { class: 'muted small' }, ` · ${ago(s.activity_ms[1])}`) : '',
    );
    li.addEventListener('mousedown', (e) => {
      e.preventDefault();
      pick([s]);
    });
    items.push(li);
  });
  suggest.replaceChildren(...items);
  search.setAttribute('aria-expanded', String(found.length > 0));
  if (activeIdx >= 0) search.setAttribute('aria-activedescendant', `opt-${activeIdx}`);
  else search.removeAttribute('aria-activedescendant');
}

function pick(list: api.SeriesInfo[]): void {
  for (const s of list) {
    if (state.graphs.length >= GRAPHS_MAX) break;
    if (state.graphs.some((g) => g.key === s.key)) continue;
    state.graphs.push({ query: api.exactQuery(s), key: s.key, name: s.name, tags: s.tags, kind: s.kind });
  }
  found = [];
  search.value = '';
  searchInfo.textContent = '';
  renderSuggest();
  if (state.view !== 'explore') go('explore');
  else void render();
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
    searchInfo.textContent = '';
    renderSuggest();
  }
});
search.addEventListener('blur', () => setTimeout(() => {
  if (document.activeElement !== search) {
    found = [];
    renderSuggest();
  }
}, 200));
addAll.addEventListener('click', () => pick(found));

// ---------------------------------------------------------------- range, zone, theme, live

function syncControls(): void {
  const custom = state.startS !== undefined && state.endS !== undefined;
  rangeSel.value = custom ? 'custom' : state.range;
  const [a, b] = rangeS(state);
  fromInputEl.value = toInput(a * 1000);
  toInputEl.value = toInput(b * 1000);
  const zone = tzLabel(a * 1000);
  fromLabel.textContent = `from (${zone})`;
  toLabel.textContent = `to (${zone})`;
  fromInputEl.title = `from, ${zone}`;
  toInputEl.title = `to, ${zone}`;
  periodInput.value = state.period ?? '';
  periodInput.setAttribute('aria-label', 'period (e.g. 1m, 5m; empty: automatic)');
  live.checked = state.live;
  tzSel.value = state.tz;
  tzText.textContent = tzLabel();
  wsName.value = state.wsName ?? '';
  editor.setValue(state.caql ?? '');
  const timed = state.view === 'explore' || state.view === 'dashboard' || state.view === 'alerts' || state.view === 'rules';
  rangeBox.hidden = !timed;
  for (const a2 of navLinks) {
    const v = a2.dataset.view;
    const cur = v === state.view || (v === 'dashboards' && state.view === 'dashboard') || (v === 'alerts' && (state.view === 'rules' || state.view === 'routes'));
    if (cur) a2.setAttribute('aria-current', 'page');
    else a2.removeAttribute('aria-current');
  }
}

rangeSel.addEventListener('change', () => {
  if (rangeSel.value === 'custom') {
    fromInputEl.focus();
    return;
  }
  state.range = rangeSel.value;
  state.startS = undefined;
  state.endS = undefined;
  void render();
});
applyRange.addEventListener('click', () => {
  const am = fromInput(fromInputEl.value);
  const bm = fromInput(toInputEl.value);
  if (!(bm > am)) {
    status.textContent = 'Range: “to” must be after “from”.';
    return;
  }
  state.startS = Math.floor(am / 1000);
  state.endS = Math.floor(bm / 1000);
  void render();
});
periodInput.addEventListener('change', () => {
  state.period = periodInput.value.trim() || undefined;
  void render();
});
live.addEventListener('change', () => {
  state.live = live.checked;
  setLive();
  setUrl();
});
tzSel.addEventListener('change', () => {
  state.tz = tzSel.value === 'UTC' ? 'UTC' : 'local';
  applyPrefs();
  void render();
});
themeBtn.addEventListener('click', () => {
  state.theme = state.theme === 'dark' ? 'light' : 'dark';
  applyPrefs();
  void render();
});

function setLive(): void {
  clearInterval(liveTimer);
  liveTimer = undefined;
  if (state.live) {
    liveTimer = window.setInterval(() => {
      // Live refresh follows "now"; a zoomed (absolute) range stays where it is.
      if (state.startS === undefined && (state.view === 'explore' || state.view === 'dashboard')) void render();
    }, LIVE_MS);
  }
}

// ---------------------------------------------------------------- views

function go(v: View, extra: Partial<State> = {}): void {
  state = { ...state, view: v, ...extra };
  if (v !== 'dashboard') state.dash = undefined;
  if (v !== 'alerts') state.alert = undefined;
  if (v !== 'rules') state.rule = undefined;
  if (v !== 'maintenance') state.mute = undefined;
  setUrl(true);
  void render();
  view.focus({ preventScroll: true });
}

let renderSeq = 0;

function baseCtx(): Ctx {
  const [startS, endS] = rangeS(state);
  return {
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
}

async function render(): Promise<void> {
  const seq = ++renderSeq;
  setUrl();
  syncControls();
  for (const c of cleanups) c();
  cleanups = [];
  view.dataset.ready = 'false';
  // A message belongs to the view it was written in.
  if (view.dataset.view !== state.view) status.textContent = '';
  view.dataset.view = state.view;
  const ctx = baseCtx();
  const cur = () => seq === renderSeq;
  const keep = (c: () => void) => {
    if (cur()) cleanups.push(c);
    else c();
  };
  try {
    if (state.view === 'home') {
      document.title = 'Strata';
      await renderHome(view, { open: openStream, openWorksheet: (id) => void openWorksheet(id), go, cur, keep });
    } else if (state.view === 'dashboards') {
      document.title = 'Dashboards · Strata';
      await renderDashboardList(view, { go, cur, status: (t) => (status.textContent = t) });
    } else if (state.view === 'alerts' || state.view === 'rules') {
      document.title = `${state.view === 'alerts' ? 'Alerts' : 'Rules'} · Strata`;
      const hooks = { go, cur, keep, status: (t: string) => (status.textContent = t), setUrl: () => setUrl() };
      await (state.view === 'alerts' ? renderAlerts(view, ctx, hooks) : renderRules(view, ctx, hooks));
    } else if (state.view === 'maintenance' || state.view === 'routes') {
      document.title = `${state.view === 'maintenance' ? 'Maintenance' : 'Routing'} · Strata`;
      const hooks = { go, cur, status: (t: string) => (status.textContent = t) };
      await (state.view === 'maintenance' ? renderMaintenance(view, state, hooks) : renderRoutes(view, hooks));
    } else if (state.view === 'dashboard') {
      await renderDashboard(view, state.dash ?? '', ctx, { go, cur, keep, status: (t) => (status.textContent = t), setUrl: () => setUrl(), rerender: () => void render() });
    } else {
      document.title = 'Explore · Strata';
      await renderExplore(ctx, seq);
    }
  } catch (e) {
    if (cur()) view.replaceChildren(el('p', { class: 'error', role: 'alert' }, (e as Error).message));
  }
  if (cur()) view.dataset.ready = 'true';
}

/** Opens one stream in the explore view (from the landing page). */
function openStream(s: api.SeriesInfo): void {
  state.graphs = [{ query: api.exactQuery(s), key: s.key, name: s.name, tags: s.tags, kind: s.kind }];
  state.caql = undefined;
  state.ws = undefined;
  state.wsName = undefined;
  go('explore');
}

async function renderExplore(ctx: Ctx, seq: number): Promise<void> {
  if (view.firstChild !== exploreRoot) view.replaceChildren(exploreRoot);
  // Keep each panel's height while it refetches, so a refresh does not make the page jump.
  const heights = [...graphsHost.querySelectorAll<HTMLElement>('.pbody')].map((b) => b.offsetHeight);
  graphsHost.replaceChildren();
  graphsHost.dataset.ready = 'false';
  graphsHost.dataset.renders = String(seq);
  emptyExplore.hidden = state.graphs.length > 0 || state.caql !== undefined;
  toDash.hidden = state.graphs.length === 0;
  void refreshWorksheets();
  const jobs: Array<Promise<void>> = [];
  if (state.caql) jobs.push(renderCaql(ctx, seq));
  else {
    caqlOut.replaceChildren();
    editor.setError(null);
  }
  state.graphs.forEach((g, i) => {
    const title = graphTitle(g);
    const panel = el('section', { class: 'panel', 'data-testid': 'graph', 'data-kind': g.kind ?? '', 'aria-label': title.text });
    const remove = el('button', { type: 'button', class: 'remove', 'aria-label': `remove ${title.text}` }, '×');
    remove.addEventListener('click', () => {
      state.graphs.splice(i, 1);
      void render();
    });
    const head = el('h3', {}, el('span', { class: `kind kind-${g.kind}` }, g.kind ?? '…'), ' ', title.node, remove);
    panel.append(head);
    const body = el('div', { class: 'pbody' });
    if (heights[i]) body.style.minHeight = `${heights[i]}px`;
    panel.append(body);
    graphsHost.append(panel);
    jobs.push(
      renderGraph(body, g, ctx, seq).then(() => {
        // The kind (and the name, for a one-stream query) may have been learnt while drawing.
        const t = graphTitle(g);
        panel.dataset.kind = g.kind ?? '';
        panel.setAttribute('aria-label', t.text);
        head.replaceChildren(el('span', { class: `kind kind-${g.kind}` }, g.kind ?? '?'), ' ', t.node, remove);
      }),
    );
  });
  await Promise.all(jobs);
  if (seq === renderSeq) graphsHost.dataset.ready = 'true';
}

async function renderGraph(body: HTMLElement, g: Graph, ctx: Ctx, seq: number): Promise<void> {
  try {
    if (!g.kind || !g.name) {
      const infos = await api.find(g.query, 2);
      const info = infos.find((s) => s.key === g.key) ?? infos[0];
      g.kind = g.kind ?? info?.kind;
      // A query that names exactly one stream is titled by that stream.
      if (info && (g.key === info.key || (g.key === undefined && infos.length === 1))) {
        g.key = info.key;
        g.name = info.name;
        g.tags = info.tags;
      }
    }
    if (seq !== renderSeq) return;
    const draw = g.kind === 'histogram' ? histogramGraph : g.kind === 'text' ? textGraph : numericGraph;
    const cleanup = await draw(body, g, ctx);
    if (seq !== renderSeq) cleanup();
    else cleanups.push(cleanup);
  } catch (e) {
    body.append(el('p', { class: 'error', role: 'alert' }, (e as Error).message));
  }
}

async function renderCaql(ctx: Ctx, seq: number): Promise<void> {
  const box = el('section', { class: 'panel', 'data-testid': 'caql-panel', 'aria-label': 'CAQL result' }, el('h3', {}, 'CAQL ', el('code', {}, state.caql ?? '')));
  caqlOut.replaceChildren(box);
  try {
    const cleanup = await caqlGraph(box, state.caql ?? '', ctx);
    editor.setError(null);
    if (seq !== renderSeq) cleanup();
    else cleanups.push(cleanup);
  } catch (e) {
    editor.setError(e as Error);
    box.append(el('p', { class: 'error', 'data-testid': 'caql-result-error' }, (e as Error).message));
  }
}

// ---------------------------------------------------------------- worksheets

async function refreshWorksheets(): Promise<void> {
  try {
    const list = await api.worksheets.list();
    wsList.replaceChildren(
      ...list.map((w) => {
        const open = el('button', { type: 'button', class: 'link', 'data-testid': 'ws-open', 'data-id': w.id }, w.name);
        open.addEventListener('click', () => void openWorksheet(w.id));
        const del = el('button', { type: 'button', class: 'icon', 'aria-label': `delete worksheet ${w.name}`, 'data-testid': 'ws-delete' }, '×');
        del.addEventListener('click', async () => {
          if (!confirm(`Delete worksheet "${w.name}"?`)) return;
          await api.worksheets.remove(w.id);
          if (state.ws === w.id) {
            state.ws = undefined;
            setUrl();
          }
          await refreshWorksheets();
        });
        const when = el('time', { class: 'muted small', datetime: new Date(w.updated_ms).toISOString(), 'data-testid': 'ws-date' }, fmtTimeZ(w.updated_ms));
        return el('li', { 'data-testid': 'ws-item', class: state.ws === w.id ? 'current' : '' }, el('div', { class: 'wsmain' }, open, when), del);
      }),
    );
    if (list.length === 0) wsList.replaceChildren(el('li', { class: 'muted small' }, 'No worksheets saved yet.'));
  } catch (e) {
    wsList.replaceChildren(el('li', { class: 'error' }, (e as Error).message));
  }
}

async function openWorksheet(id: string): Promise<void> {
  try {
    const w = await api.worksheets.get(id);
    const saved = (w.state ?? {}) as Partial<State>;
    const { theme: _t, tz: _z, view: _v, ...rest } = saved;
    state = { ...state, ...rest, view: 'explore', graphs: (w.graphs as Graph[]).slice(0, GRAPHS_MAX), ws: w.id, wsName: w.name };
    setUrl(true);
    await render();
  } catch (e) {
    status.textContent = `Worksheet: ${(e as Error).message}`;
  }
}

/** Saves the worksheet. A name that another worksheet has is never duplicated: the user is
 * asked whether to replace that one. */
async function save(asNew: boolean): Promise<void> {
  const name = wsName.value.trim();
  if (!name) {
    status.textContent = 'Worksheet: give it a name.';
    wsName.focus();
    return;
  }
  const { graphs, ws: _ws, wsName: _n, view: _v, dash: _d, theme: _t, tz: _z, ...rest } = state;
  const doc: api.Worksheet = { id: asNew ? undefined : state.ws, name, graphs, state: rest };
  try {
    let saved: api.Worksheet;
    try {
      saved = await api.worksheets.save(doc);
    } catch (e) {
      const err = e as api.ApiError;
      const other = typeof err.body?.id === 'string' ? err.body.id : undefined;
      if (err.status !== 409 || !other) throw e;
      if (asNew) {
        status.textContent = `Worksheet: “${name}” exists; choose another name to save a new one.`;
        wsName.focus();
        return;
      }
      if (!confirm(`A worksheet named “${name}” exists. Replace it with this one?`)) {
        status.textContent = 'Worksheet: not saved.';
        return;
      }
      saved = await api.worksheets.save({ ...doc, id: other });
    }
    state.ws = saved.id;
    state.wsName = name;
    status.textContent = `Saved worksheet “${name}”.`;
    setUrl();
    await refreshWorksheets();
  } catch (e) {
    status.textContent = `Worksheet: ${(e as Error).message}`;
  }
}
wsSave.addEventListener('click', () => void save(false));
wsSaveNew.addEventListener('click', () => void save(true));
toDash.addEventListener('click', async () => {
  const name = prompt('Name of the new dashboard', state.wsName ?? 'My dashboard');
  if (!name) return;
  try {
    const id = await dashboardFromGraphs(name, state.graphs);
    go('dashboard', { dash: id });
  } catch (e) {
    status.textContent = `Dashboard: ${(e as Error).message}`;
  }
});

// ---------------------------------------------------------------- start

declare global {
  interface Window {
    strataBench: typeof bench;
    strata: { caqlFunctions: string[]; levelRgb: typeof levelRgb; levels: number };
  }
}
window.strataBench = bench;
window.strata = { caqlFunctions: FUNCTIONS.map((f) => f.name), levelRgb, levels: LEVELS };

window.addEventListener('popstate', () => {
  state = fromUrl(location.search);
  applyPrefs();
  void render();
});
applyPrefs();
installAuth();
// A server with a token: nothing is asked of it before the user signed in (login.ts).
void signIn().then(() => {
  setLive();
  void render();
});
