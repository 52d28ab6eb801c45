// The alerting API as the alerts page and the rule editor use it (crates/alert/src/http.rs).
import { ApiError } from './api';

export interface Instance {
  fp: string;
  rule: string;
  stream: string;
  state: string;
  severity: number;
  since: number;
  active_since?: number | null;
  fired?: number | null;
  value: number | null;
  flapping: boolean;
  suppressed: boolean;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

export interface Transition extends Instance {
  t: number;
  written: number;
  from: string;
  from_severity: number;
  late: boolean;
  eager: boolean;
  backfill: boolean;
}

export interface LevelSpec {
  level: number;
  when?: string;
  clear?: string;
}

export interface RuleSpec {
  name: string;
  expr?: string;
  text?: string;
  absent?: string;
  window?: string;
  severity?: LevelSpec[];
  [k: string]: unknown;
}

export interface RuleInfo {
  name: string;
  source: string;
  read_only: boolean;
  health: string;
  error: string | null;
  last_evaluation: number | null;
  streams: number | null;
  period_ms?: number;
  definition?: string;
  spec?: RuleSpec;
}

export interface Ack {
  fp: string;
  fired: number;
  at: number;
  until: number | null;
  by: string;
  note: string;
}

export interface Delivery {
  receiver: string;
  via: string;
  key: string;
  status: string;
  t_ms: number;
  attempts: number;
  outcome: string;
  error: string | null;
}

export interface Backtest {
  start: number;
  end: number;
  transitions: Transition[];
  into: Record<string, number>;
  /** The rulesets of the body as the server parsed them. */
  rulesets?: RuleSpec[];
}

async function answer<T>(res: Response): Promise<T> {
  const text = await res.text();
  let body: unknown = {};
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    throw new ApiError(`${res.status}: ${text.slice(0, 200)}`, res.status, {});
  }
  if (!res.ok) {
    const e = (body ?? {}) as Record<string, unknown>;
    throw new ApiError(typeof e.error === 'string' ? e.error : `${res.status}`, res.status, e);
  }
  return body as T;
}

/** The alerts list and its ETag; `etag` + `waitS` waits for a change (304: `null`). */
export async function alerts(etag?: string, waitS = 0, signal?: AbortSignal): Promise<{ alerts: Instance[]; etag: string } | null> {
  const q = waitS > 0 ? `?wait=${waitS}s` : '';
  const headers: Record<string, string> = etag ? { 'if-none-match': etag } : {};
  const res = await fetch(`/api/strata/v1/alerts${q}`, { headers, signal });
  if (res.status === 304) return null;
  const body = await answer<{ alerts: Instance[] }>(res);
  return { alerts: body.alerts ?? [], etag: res.headers.get('etag') ?? '' };
}

/** Transitions of one instance over [start, end) (unix seconds, as the API takes them). */
export async function history(fp: string, startS: number, endS: number): Promise<Transition[]> {
  const q = new URLSearchParams({ fp, start: String(startS), end: String(endS), limit: '1000' });
  return (await answer<{ transitions: Transition[] }>(await fetch(`/api/strata/v1/alerts/history?${q}`))).transitions;
}

export async function rules(): Promise<RuleInfo[]> {
  return (await answer<{ rules: RuleInfo[] }>(await fetch('/api/strata/v1/rules'))).rules;
}

export async function rule(name: string): Promise<RuleInfo> {
  return answer<RuleInfo>(await fetch(`/api/strata/v1/rules/${encodeURIComponent(name)}`));
}

export async function saveRule(name: string, toml: string): Promise<RuleInfo> {
  return answer<RuleInfo>(await fetch(`/api/strata/v1/rules/${encodeURIComponent(name)}`, { method: 'PUT', body: toml, headers: { 'content-type': 'application/toml' } }));
}

export async function deleteRule(name: string): Promise<void> {
  await answer<unknown>(await fetch(`/api/strata/v1/rules/${encodeURIComponent(name)}`, { method: 'DELETE' }));
}

/** The transitions `toml`'s rulesets would have made over [start, end) (unix seconds). */
export async function backtest(toml: string, startS: number, endS: number): Promise<Backtest> {
  const q = new URLSearchParams({ start: String(startS), end: String(endS) });
  return answer<Backtest>(await fetch(`/api/strata/v1/rules/evaluate?${q}`, { method: 'POST', body: toml, headers: { 'content-type': 'application/toml' } }));
}

/** Deliveries and acknowledgements of one alert; `null` when notifications are off (404). */
export async function notifications(fp: string): Promise<{ deliveries: Delivery[]; acks: Ack[] } | null> {
  const res = await fetch(`/api/strata/v1/notifications?fp=${encodeURIComponent(fp)}`);
  if (res.status === 404) return null;
  return answer(res);
}

export async function ack(fp: string, note: string, untilMs?: number): Promise<Ack> {
  const body = JSON.stringify({ note, by: 'web UI', ...(untilMs !== undefined ? { until: untilMs } : {}) });
  return answer<Ack>(await fetch(`/api/strata/v1/alerts/${encodeURIComponent(fp)}/ack`, { method: 'POST', body, headers: { 'content-type': 'application/json' } }));
}

export async function unack(fp: string): Promise<void> {
  await answer<unknown>(await fetch(`/api/strata/v1/alerts/${encodeURIComponent(fp)}/ack`, { method: 'DELETE' }));
}
