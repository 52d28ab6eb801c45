// The whole UI state, kept in the URL (`?s=<json>`) so every view can be shared as a link.

export interface Graph {
  query: string;
  key?: string;
  title?: string;
  kind?: string;
  /** Numeric streams: which aggregate to plot. */
  agg?: string;
  /** Histogram streams: the objective threshold. */
  objective?: number;
  /** Histogram streams: the selected slice (ms). */
  sel?: number;
}

export interface State {
  graphs: Graph[];
  /** Relative range ('15m', '1h', …) ending now, unless start/end are set. */
  range: string;
  startS?: number;
  endS?: number;
  period?: string;
  overlays: { p50: boolean; p90: boolean; p99: boolean };
  theme: 'light' | 'dark';
  live: boolean;
  caql?: string;
  ws?: string;
  wsName?: string;
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

export function defaults(): State {
  const dark = typeof matchMedia === 'function' && matchMedia('(prefers-color-scheme: dark)').matches;
  return {
    graphs: [],
    range: '1h',
    overlays: { p50: true, p90: true, p99: true },
    theme: dark ? 'dark' : 'light',
    live: false,
  };
}

export function fromUrl(search: string): State {
  const s = defaults();
  const raw = new URLSearchParams(search).get('s');
  if (!raw) return s;
  try {
    const v = JSON.parse(raw) as Partial<State>;
    const out: State = { ...s, ...v, overlays: { ...s.overlays, ...(v.overlays ?? {}) } };
    out.graphs = Array.isArray(v.graphs) ? v.graphs.filter((g) => g && typeof g.query === 'string').slice(0, GRAPHS_MAX) : [];
    if (!(out.range in RANGES)) out.range = '1h';
    return out;
  } catch {
    return s;
  }
}

export function toUrl(s: State): string {
  return `?s=${encodeURIComponent(JSON.stringify(s))}`;
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
