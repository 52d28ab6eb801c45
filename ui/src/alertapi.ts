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
  /** With notifications on (the alerts list): its acknowledgement, the windows muting it now. */
  acked?: Ack | null;
  muted_by?: string[];
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

// ---------------------------------------------------------------- maintenance windows and routes

/** A window as the API takes it (the fields of a `[[maintenance]]` table). */
export interface WindowSpec {
  name?: string;
  start?: string;
  end?: string;
  days?: string[];
  at?: string;
  cron?: string;
  duration?: string;
  timezone?: string;
  matchers?: string[];
  rulesets?: string[];
  tags?: string[];
  severities?: number[];
  comment?: string;
}

/** A window as listed: whether it is active now, its occurrence in progress or next one. */
export interface WindowInfo extends WindowSpec {
  name: string;
  source: 'api' | 'file';
  kind: 'once' | 'weekly' | 'cron';
  active: boolean;
  next_start_ms: number | null;
  next_end_ms: number | null;
  mutes: Array<{ fp: string; rule: string; stream: string; state: string; severity: number }>;
}

/** `null` when notifications are off (404). */
export async function windows(): Promise<WindowInfo[] | null> {
  const res = await fetch('/api/strata/v1/maintenance');
  if (res.status === 404) return null;
  return (await answer<{ windows: WindowInfo[] }>(res)).windows;
}

/** Creates or replaces an API window; a refused one throws with `body.field` naming the field. */
export async function putWindow(name: string, spec: WindowSpec): Promise<{ replaced: boolean }> {
  return answer(await fetch(`/api/strata/v1/maintenance/${encodeURIComponent(name)}`, { method: 'PUT', body: JSON.stringify(spec), headers: { 'content-type': 'application/json' } }));
}

export async function deleteWindow(name: string): Promise<void> {
  await answer<unknown>(await fetch(`/api/strata/v1/maintenance/${encodeURIComponent(name)}`, { method: 'DELETE' }));
}

export interface Timing {
  timed: boolean;
  group_wait_ms: number;
  group_interval_ms: number;
  repeat_interval_ms: number | null;
}

export interface RouteNode {
  id: string;
  receiver: string;
  matchers: string[];
  group_by: string[];
  continue: boolean;
  timing: Timing;
  routes: RouteNode[];
}

/** The routing tree; `null` when notifications are off (404). */
export async function routes(): Promise<{ route: RouteNode; receivers: string[] } | null> {
  const res = await fetch('/api/strata/v1/routes');
  if (res.status === 404) return null;
  return answer(res);
}

export interface RouteTest {
  labels: Record<string, string>;
  receivers: Array<{ receiver: string; route: string; group_labels: Record<string, string>; timing: Timing }>;
  windows: Array<{ name: string; active: boolean }>;
  inhibit: number[];
}

/** Where an alert with these labels goes (the function `strata rules routes test` uses). */
/** One test notification to receiver `name`; throws with the receiver's own words when it refused. */
export async function testReceiver(name: string): Promise<{ receiver: string; delivered: boolean }> {
  return answer(await fetch(`/api/strata/v1/receivers/${encodeURIComponent(name)}/test`, { method: 'POST' }));
}

export async function routeTest(labels: Record<string, string>): Promise<RouteTest> {
  return answer(await fetch('/api/strata/v1/routes/test', { method: 'POST', body: JSON.stringify({ labels }), headers: { 'content-type': 'application/json' } }));
}
