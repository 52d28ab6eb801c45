// The server's native API, as the UI uses it.
import type { RawBin } from './hist';

export interface SeriesInfo {
  key: string;
  name: string;
  tags: string[];
  kind: 'numeric' | 'histogram' | 'text' | string;
  activity_ms: [number, number] | null;
}

export interface NumericSlice {
  ts_ms: number;
  count?: number;
  sum?: number;
  min?: number;
  max?: number;
  mean?: number;
  stddev?: number;
  first?: number;
  last?: number;
}

export interface HistSlice {
  ts_ms: number;
  value: { bins: RawBin[]; b64: string } | number[] | number | null;
}

export interface FetchSeries extends SeriesInfo {
  data: Array<NumericSlice | HistSlice | { ts_ms: number; value: string }>;
}

export interface FetchResult {
  start_ms: number;
  end_ms: number;
  period_ms: number;
  truncated: boolean;
  series: FetchSeries[];
}

/** Most series listed in the search box. */
export const FIND_LIMIT = 50;

/** An error answer: its message, status and the rest of its JSON (a CAQL error's position). */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly body: Record<string, unknown>,
  ) {
    super(message);
  }
}

async function json<T>(res: Response): Promise<T> {
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ApiError(`${res.status}: ${text.slice(0, 200)}`, res.status, {});
  }
  if (!res.ok) {
    const e = (body ?? {}) as Record<string, unknown>;
    throw new ApiError(typeof e.error === 'string' ? e.error : `${res.status}`, res.status, e);
  }
  return body as T;
}

/** Series matching a tag query; `recent` orders them by last activity, self-monitoring last. */
export async function find(query: string, limit = FIND_LIMIT, order?: 'recent'): Promise<SeriesInfo[]> {
  const q = new URLSearchParams({ query, limit: String(limit) });
  if (order) q.set('order', order);
  return json<SeriesInfo[]>(await fetch(`/api/strata/v1/find?${q}`));
}

export interface FetchParams {
  query: string;
  startS: number;
  endS: number;
  period?: string;
  transform?: string;
}

export async function fetchData(p: FetchParams): Promise<FetchResult> {
  const q = new URLSearchParams({ query: p.query, start: String(p.startS), end: String(p.endS) });
  if (p.period) q.set('period', p.period);
  if (p.transform) q.set('transform', p.transform);
  return json<FetchResult>(await fetch(`/api/strata/v1/fetch?${q}`));
}

export interface CaqlResult {
  start: number;
  end: number;
  period: number;
  series: Array<{ label: string; tags: Record<string, string>; values: Array<[number, unknown]> }>;
}

export async function caql(query: string, startS: number, endS: number, period?: string): Promise<CaqlResult> {
  const q = new URLSearchParams({ query, start: String(startS), end: String(endS) });
  if (period) q.set('period', period);
  return json<CaqlResult>(await fetch(`/api/strata/v1/caql?${q}`));
}

// ---------------------------------------------------------------- overview (landing page)

export interface Overview {
  version: string;
  started_ms: number;
  now_ms: number;
  series: { total: number; numeric: number; histogram: number; text: number; self: number; mine: { numeric: number; histogram: number; text: number } };
  streams: SeriesInfo[];
  self_streams: SeriesInfo[];
  scanned: number;
  scan_truncated: boolean;
  listeners: { http: string | null; statsd: string | null; graphite: string | null; tls: boolean };
  auth: boolean;
  ingest: { accepted: number; rejected: number; by_endpoint: Record<string, { accepted: number; rejected: number }> };
  requests: Record<string, number>;
  store: { write_errors: number; head_samples: number; blocks: number; block_bytes: number; quarantined: number };
  /** Hosts whose agent reports: their saved worksheet, or the one the server offers to make. */
  hosts: HostOffer[];
}

export interface HostOffer {
  host: string;
  last_ms: number | null;
  worksheet: string | null;
  offer: { id: string; body: Worksheet } | null;
}

export async function overview(limit = 20): Promise<Overview> {
  return json<Overview>(await fetch(`/api/strata/v1/overview?limit=${limit}`));
}

// ---------------------------------------------------------------- worksheets and dashboards

export interface Saved {
  id?: string;
  name: string;
  updated_ms?: number;
  [k: string]: unknown;
}

export interface Listed {
  id: string;
  name: string;
  updated_ms: number;
}

/** A saved-document collection: worksheets or dashboards (same API, same rules). */
export class Collection<T extends Saved> {
  constructor(readonly base: string) {}

  async list(): Promise<Listed[]> {
    return json(await fetch(this.base));
  }

  async get(id: string): Promise<T> {
    return json(await fetch(`${this.base}/${encodeURIComponent(id)}`));
  }

  /** Creates (POST, the server picks the id) or replaces / creates at `doc.id` (PUT). */
  async save(doc: T): Promise<T> {
    const body = JSON.stringify(doc);
    const headers = { 'content-type': 'application/json' };
    if (doc.id) return json(await fetch(`${this.base}/${encodeURIComponent(doc.id)}`, { method: 'PUT', body, headers }));
    return json(await fetch(this.base, { method: 'POST', body, headers }));
  }

  async remove(id: string): Promise<void> {
    await json(await fetch(`${this.base}/${encodeURIComponent(id)}`, { method: 'DELETE' }));
  }
}

export interface Worksheet extends Saved {
  graphs: unknown[];
}

export type PanelType = 'heatmap' | 'line' | 'value' | 'histogram' | 'text' | 'alerts';

export interface Panel {
  id: string;
  type: PanelType;
  title?: string;
  /** A stream (tag query, and the exact key when one stream was picked). */
  query?: string;
  key?: string;
  name?: string;
  tags?: string[];
  kind?: string;
  /** A CAQL query (line and value panels), instead of a stream. */
  caql?: string;
  /** Line/value: the aggregate or statistic (`mean`, `p99`, …). */
  stat?: string;
  unit?: string;
  color?: 'density' | 'count';
  text?: string;
  x: number;
  y: number;
  w: number;
  h: number;
}

export interface Dashboard extends Saved {
  panels: Panel[];
  description?: string;
  range?: string;
}

export const worksheets = new Collection<Worksheet>('/api/strata/v1/worksheets');
export const dashboards = new Collection<Dashboard>('/api/strata/v1/dashboards');

// ---------------------------------------------------------------- alerts (when the server has them)

export interface AlertInstance {
  fp: string;
  rule: string;
  stream?: string;
  state: string;
  severity: number;
  since: number;
  value: number | null;
  labels: Record<string, string> | Array<[string, string]>;
  annotations: Record<string, string> | Array<[string, string]>;
}

/** Firing alerts, or null when this server has no alerting (404). */
export async function firingAlerts(): Promise<AlertInstance[] | null> {
  const res = await fetch('/api/strata/v1/alerts?state=firing');
  if (res.status === 404) return null;
  const body = await json<{ alerts: AlertInstance[] }>(res);
  return body.alerts ?? [];
}

/** An exact tag query for one stream: its name in base64 and its tags. */
export function exactQuery(s: { name: string; tags: string[] }): string {
  const bytes = new TextEncoder().encode(s.name);
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  const parts = [`__name:b"${btoa(bin)}"`, ...s.tags];
  return parts.length === 1 ? parts[0] : `and(${parts.join(',')})`;
}
