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

async function json<T>(res: Response): Promise<T> {
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`${res.status}: ${text.slice(0, 200)}`);
  }
  if (!res.ok) {
    const e = body as { error?: string };
    throw new Error(e.error ?? `${res.status}`);
  }
  return body as T;
}

export async function find(query: string, limit = FIND_LIMIT): Promise<SeriesInfo[]> {
  const q = new URLSearchParams({ query, limit: String(limit) });
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

export interface Worksheet {
  id?: string;
  name: string;
  graphs: unknown[];
  updated_ms?: number;
  [k: string]: unknown;
}

const WS = '/api/strata/v1/worksheets';

export async function listWorksheets(): Promise<Array<{ id: string; name: string; updated_ms: number }>> {
  return json(await fetch(WS));
}

export async function getWorksheet(id: string): Promise<Worksheet> {
  return json(await fetch(`${WS}/${encodeURIComponent(id)}`));
}

export async function saveWorksheet(ws: Worksheet): Promise<Worksheet> {
  const body = JSON.stringify(ws);
  const headers = { 'content-type': 'application/json' };
  if (ws.id) return json(await fetch(`${WS}/${encodeURIComponent(ws.id)}`, { method: 'PUT', body, headers }));
  return json(await fetch(WS, { method: 'POST', body, headers }));
}

export async function deleteWorksheet(id: string): Promise<void> {
  await json(await fetch(`${WS}/${encodeURIComponent(id)}`, { method: 'DELETE' }));
}

/** An exact tag query for one stream: its name in base64 and its tags. */
export function exactQuery(s: { name: string; tags: string[] }): string {
  const bytes = new TextEncoder().encode(s.name);
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  const parts = [`__name:b"${btoa(bin)}"`, ...s.tags];
  return parts.length === 1 ? parts[0] : `and(${parts.join(',')})`;
}
