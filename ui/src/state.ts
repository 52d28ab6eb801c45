// The whole UI state, kept in the URL so every view can be shared as a link: `/` is the landing
// page, `?s=<json>` the explore view (or any view, with its range), `?d=<id>` a dashboard.
// The theme and time zone are also remembered in localStorage as the browser's preference.
import { isUnit, type Tz, type Unit } from './format';

export type View = 'home' | 'explore' | 'dashboards' | 'dashboard' | 'alerts' | 'rules' | 'maintenance' | 'routes';

/** How the heatmap colours a cell: samples per decade of value (default) or per bin. */
export type ColorMode = 'density' | 'count';

export interface Graph {
  query: string;
  key?: string;
  /** The stream's name and tags, shown instead of its key. */
  name?: string;
  tags?: string[];
  title?: string;
  kind?: string;
  /** Numeric streams: which aggregate to plot. */
  agg?: string;
  /** Histogram streams: the objective threshold. */
  objective?: number;
  /** Histogram streams: the selected slice (ms). */
  sel?: number;
  /** The unit of the stream's values (guessed from the name when unset). */
  unit?: Unit;
  /** Histogram streams: heatmap colouring. */
  color?: ColorMode;
}

export interface State {
  view: View;
  /** The dashboard shown (view `dashboard`). */
  dash?: string;
  graphs: Graph[];
  /** Relative range ('15m', '1h', …) ending now, unless start/end are set. */
  range: string;
  startS?: number;
  endS?: number;
  period?: string;
  overlays: { p50: boolean; p90: boolean; p99: boolean };
  theme: 'light' | 'dark';
  tz: Tz;
  live: boolean;
  caql?: string;
  ws?: string;
  wsName?: string;
  /** The alert instance shown on the alerts page (its fingerprint). */
  alert?: string;
  /** The ruleset open in the rule editor. */
  rule?: string;
  /** The alert whose labels prefill a new maintenance window (its fingerprint). */
  mute?: string;
}

/** Most graphs in one view (each is a request and a canvas). */
export const GRAPHS_MAX = 24;

export const RANGES: Record<string, number> = {
  '15m': 900,
  '1h': 3600,
  '6h': 21600,
  '24h': 86400,
  '7d': 604800,
  '30d': 2592000,
};

const VIEWS: View[] = ['home', 'explore', 'dashboards', 'dashboard', 'alerts', 'rules', 'maintenance', 'routes'];
const PREFS_KEY = 'strata.prefs';

function storedPrefs(): { theme?: 'light' | 'dark'; tz?: Tz } {
  try {
    const v = JSON.parse(localStorage.getItem(PREFS_KEY) ?? '{}') as { theme?: unknown; tz?: unknown };
    return {
      theme: v.theme === 'dark' || v.theme === 'light' ? v.theme : undefined,
      tz: v.tz === 'UTC' || v.tz === 'local' ? v.tz : undefined,
    };
  } catch {
    return {};
  }
}

export function savePrefs(s: State): void {
  try {
    localStorage.setItem(PREFS_KEY, JSON.stringify({ theme: s.theme, tz: s.tz }));
  } catch {
    // Private mode: the URL still holds both.
  }
}

export function defaults(): State {
  const dark = typeof matchMedia === 'function' && matchMedia('(prefers-color-scheme: dark)').matches;
  const prefs = storedPrefs();
  return {
    view: 'home',
    graphs: [],
    range: '1h',
    overlays: { p50: true, p90: true, p99: true },
    theme: prefs.theme ?? (dark ? 'dark' : 'light'),
    tz: prefs.tz ?? 'local',
    live: false,
  };
}

function cleanGraph(g: Graph): Graph {
  const out: Graph = { ...g };
  if (out.unit !== undefined && !isUnit(out.unit)) delete out.unit;
  if (out.color !== undefined && out.color !== 'density' && out.color !== 'count') delete out.color;
  if (out.tags !== undefined && !(Array.isArray(out.tags) && out.tags.every((t) => typeof t === 'string'))) delete out.tags;
  return out;
}

export function fromUrl(search: string): State {
  const s = defaults();
  const params = new URLSearchParams(search);
  const raw = params.get('s');
  const dash = params.get('d');
  let out = s;
  if (raw) {
    try {
      const v = JSON.parse(raw) as Partial<State>;
      out = { ...s, ...v, overlays: { ...s.overlays, ...(v.overlays ?? {}) } };
      out.graphs = Array.isArray(v.graphs)
        ? v.graphs.filter((g) => g && typeof g.query === 'string').slice(0, GRAPHS_MAX).map(cleanGraph)
        : [];
      if (!(out.range in RANGES)) out.range = '1h';
      if (out.tz !== 'UTC' && out.tz !== 'local') out.tz = s.tz;
      if (out.theme !== 'dark' && out.theme !== 'light') out.theme = s.theme;
      // Links from before views existed open the explore view.
      if (!VIEWS.includes(out.view)) out.view = out.graphs.length || out.caql ? 'explore' : 'home';
      if (v.view === undefined) out.view = 'explore';
    } catch {
      out = s;
    }
  }
  if (dash) {
    out.view = 'dashboard';
    out.dash = dash;
  } else if (params.get('view') === 'dashboards') {
    out.view = 'dashboards';
  } else if (params.get('view') === 'explore') {
    out.view = 'explore';
  } else if (['alerts', 'rules', 'maintenance', 'routes'].includes(params.get('view') ?? '')) {
    out.view = params.get('view') as View;
  }
  return out;
}

/** The URL of a state: only what differs from the defaults, so links stay short. */
export function toUrl(s: State): string {
  const d = defaults();
  const o: Record<string, unknown> = {};
  const { view, dash, ...rest } = s;
  for (const [k, v] of Object.entries(rest)) {
    if (v === undefined) continue;
    if (k === 'graphs' && Array.isArray(v) && v.length === 0) continue;
    if (k === 'overlays' && JSON.stringify(v) === JSON.stringify(d.overlays)) continue;
    if (k === 'live' && v === false) continue;
    if (k === 'range' && v === d.range) continue;
    o[k] = v;
  }
  // The theme and zone are kept when they differ from this browser's preference, and always
  // in explore links, so a shared link shows what its sender saw.
  if (s.theme === d.theme && view !== 'explore') delete o.theme;
  if (s.tz === d.tz && view !== 'explore') delete o.tz;
  const json = () => encodeURIComponent(JSON.stringify(o));
  if (view === 'dashboard' && dash) {
    return `?d=${encodeURIComponent(dash)}${Object.keys(o).length ? `&s=${json()}` : ''}`;
  }
  if (view === 'dashboards') return `?view=dashboards${Object.keys(o).length ? `&s=${json()}` : ''}`;
  if (view === 'home') return Object.keys(o).length ? `?s=${encodeURIComponent(JSON.stringify({ view, ...o }))}` : location.pathname;
  return `?s=${encodeURIComponent(JSON.stringify({ view, ...o }))}`;
}

/** The range in unix seconds. */
export function rangeS(s: State, nowMs = Date.now()): [number, number] {
  if (s.startS !== undefined && s.endS !== undefined && s.endS > s.startS) return [s.startS, s.endS];
  const end = Math.ceil(nowMs / 1000);
  return [end - (RANGES[s.range] ?? 3600), end];
}

/** Periods the server accepts with its default 60 s base period. */
const PERIODS: Array<[string, number]> = [
  ['1m', 60],
  ['5m', 300],
  ['15m', 900],
  ['1h', 3600],
  ['6h', 21600],
  ['1d', 86400],
];
/** Most slices asked for one graph (the heatmap's columns). */
export const SLICES_MAX = 1500;

export function autoPeriod(s: State, spanS: number): string | undefined {
  if (s.period) return s.period;
  for (const [name, secs] of PERIODS) if (spanS / secs <= SLICES_MAX) return name;
  return '1d';
}

/** Period text (`5m`, `90s`) → seconds; NaN if it is not one. */
export function periodSeconds(p: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(p.trim());
  if (!m) return NaN;
  const k = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 }[m[2] ?? 's'] ?? 1;
  return Number(m[1]) * k;
}
