// How numbers, units, times and stream names are shown: SI-prefixed values (`100µs`, `1.5k`),
// one time zone for every label (browser-local or UTC, chosen in the header), stream names with
// their tags as chips.

// ---------------------------------------------------------------- units and SI prefixes

/** Units a graph can be shown in. The value is what the stream stores. */
export const UNITS = ['', 's', 'ms', 'us', 'ns', 'B', '%'] as const;
export type Unit = (typeof UNITS)[number];

/** Unit → [factor to the base unit, base symbol, label for menus]. */
const UNIT_INFO: Record<Unit, [number, string, string]> = {
  '': [1, '', 'no unit'],
  s: [1, 's', 'seconds'],
  ms: [1e-3, 's', 'milliseconds'],
  us: [1e-6, 's', 'microseconds'],
  ns: [1e-9, 's', 'nanoseconds'],
  B: [1, 'B', 'bytes'],
  '%': [1, '%', 'percent'],
};

export function unitLabel(u: Unit): string {
  return UNIT_INFO[u][2];
}

/** The symbol shown on an axis label: `s`, `B`, `%` or nothing. */
export function unitSymbol(u: Unit): string {
  return UNIT_INFO[u][1];
}

export function isUnit(u: unknown): u is Unit {
  return typeof u === 'string' && (UNITS as readonly string[]).includes(u);
}

/** A unit guessed from a stream name (`…_seconds`, `latency`, `…_bytes`); none if unsure. */
export function guessUnit(name: string): Unit {
  const n = name.toLowerCase();
  if (/(^|[._-])(seconds|secs|duration_s)$/.test(n) || /_seconds(_|$)/.test(n)) return 's';
  if (/(^|[._-])(ms|millis|milliseconds)$/.test(n)) return 'ms';
  if (/(^|[._-])(us|micros|microseconds)$/.test(n)) return 'us';
  if (/(^|[._-])(ns|nanos|nanoseconds)$/.test(n)) return 'ns';
  if (/(^|[._-])bytes$/.test(n)) return 'B';
  if (/(^|[._-])(percent|pct)$/.test(n)) return '%';
  if (/latency|duration|response_time|elapsed/.test(n)) return 's';
  return '';
}

const PREFIXES: Array<[number, string]> = [
  [1e24, 'Y'],
  [1e21, 'Z'],
  [1e18, 'E'],
  [1e15, 'P'],
  [1e12, 'T'],
  [1e9, 'G'],
  [1e6, 'M'],
  [1e3, 'k'],
  [1, ''],
  [1e-3, 'm'],
  [1e-6, 'µ'],
  [1e-9, 'n'],
  [1e-12, 'p'],
  [1e-15, 'f'],
  [1e-18, 'a'],
];

/** `x` with an SI prefix and `digits` significant digits, trailing zeros dropped: 1e-4 → 100µ. */
export function si(x: number, digits = 3): string {
  if (Number.isNaN(x)) return '–';
  if (!Number.isFinite(x)) return x > 0 ? '∞' : '−∞';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a < 1e-18 || a >= 1e27) return x.toExponential(Math.max(0, digits - 1));
  for (let i = 0; i < PREFIXES.length; i++) {
    const [p, sym] = PREFIXES[i];
    if (a >= p * (1 - 1e-12)) {
      let v = Number((x / p).toPrecision(digits));
      // Rounding up to 1000 moves to the next prefix (999.96 → 1k, not 1000).
      if (Math.abs(v) >= 1000 && i > 0) {
        const [p2, sym2] = PREFIXES[i - 1];
        v = Number((x / p2).toPrecision(digits));
        return `${v}${sym2}`;
      }
      return `${v}${sym}`;
    }
  }
  return x.toExponential(digits - 1);
}

/** A value in a unit, SI-prefixed in its base unit: (0.0015, 's') → 1.5ms; (1.5, 'ms') → 1.5ms. */
export function fmtValue(x: number, unit: Unit = '', digits = 3): string {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  if (unit === '%') return `${Number(x.toPrecision(digits))}%`;
  const [k, sym] = UNIT_INFO[unit];
  const base = x * k;
  const text = si(base, digits);
  return sym ? `${text}${sym}` : text;
}

/** Labels for axis ticks: the fewest significant digits (2–6) that keep every label distinct. */
export function fmtTicks(values: Array<number | null>, unit: Unit = ''): string[] {
  // uPlot leaves out ticks it has no room for as nulls: those get no label.
  const label = (v: number | null, d: number) => (v === null || v === undefined ? '' : fmtValue(v, unit, d));
  const shown = values.filter((v) => v !== null).length;
  for (let d = 2; d <= 6; d++) {
    const out = values.map((v) => label(v, d));
    if (new Set(out.filter((l) => l !== '')).size === shown) return out;
  }
  return values.map((v) => label(v, 7));
}

/** A count: exact below 10 000, SI-prefixed above (12.3k). */
export function fmtCount(n: number): string {
  if (!Number.isFinite(n)) return '–';
  if (Math.abs(n) < 10_000) return Number.isInteger(n) ? String(n) : String(Number(n.toPrecision(4)));
  return si(n, 3);
}

// ---------------------------------------------------------------- time zone

export type Tz = 'local' | 'UTC';

let zone: Tz = 'local';

export function setTz(t: Tz): void {
  zone = t;
}

export function tz(): Tz {
  return zone;
}

/** The IANA name of the browser's zone (`Europe/Berlin`), or `local`. */
export function localZoneName(): string {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'local';
  } catch {
    return 'local';
  }
}

/** `+05:30` for a UTC offset in minutes. */
function offsetText(minutes: number): string {
  const sign = minutes < 0 ? '−' : '+';
  const m = Math.abs(minutes);
  return `${sign}${String(Math.floor(m / 60)).padStart(2, '0')}:${String(m % 60).padStart(2, '0')}`;
}

/** What the header says: `UTC`, or `local (Asia/Kolkata, UTC+05:30)`. */
export function tzLabel(atMs = Date.now()): string {
  if (zone === 'UTC') return 'UTC';
  const off = -new Date(atMs).getTimezoneOffset();
  return `local (${localZoneName()}, UTC${offsetText(off)})`;
}

/** The short suffix after a time: `UTC` or `UTC+05:30`. */
export function tzSuffix(atMs: number): string {
  if (zone === 'UTC') return 'UTC';
  const off = -new Date(atMs).getTimezoneOffset();
  return off === 0 ? 'UTC' : `UTC${offsetText(off)}`;
}

interface Parts {
  y: number;
  mo: number;
  d: number;
  h: number;
  mi: number;
  s: number;
}

/** The wall-clock fields of `ms` in the chosen zone. */
export function parts(ms: number): Parts {
  const t = new Date(ms);
  return zone === 'UTC'
    ? { y: t.getUTCFullYear(), mo: t.getUTCMonth() + 1, d: t.getUTCDate(), h: t.getUTCHours(), mi: t.getUTCMinutes(), s: t.getUTCSeconds() }
    : { y: t.getFullYear(), mo: t.getMonth() + 1, d: t.getDate(), h: t.getHours(), mi: t.getMinutes(), s: t.getSeconds() };
}

const p2 = (n: number) => String(n).padStart(2, '0');

/** `2026-11-22 14:05` (or with `:ss`) in the chosen zone. */
export function fmtTime(ms: number, seconds = false): string {
  const p = parts(ms);
  const hm = `${p2(p.h)}:${p2(p.mi)}${seconds ? `:${p2(p.s)}` : ''}`;
  return `${p.y}-${p2(p.mo)}-${p2(p.d)} ${hm}`;
}

/** A time with its zone, for tooltips and lists: `2026-11-22 14:05 UTC+05:30`. */
export function fmtTimeZ(ms: number, seconds = false): string {
  return `${fmtTime(ms, seconds)} ${tzSuffix(ms)}`;
}

/** The value of a `datetime-local` input for `ms`, in the chosen zone. */
export function toInput(ms: number): string {
  const p = parts(ms);
  return `${p.y}-${p2(p.mo)}-${p2(p.d)}T${p2(p.h)}:${p2(p.mi)}`;
}

/** A `datetime-local` input's value (in the chosen zone) → ms, NaN if empty or invalid. */
export function fromInput(v: string): number {
  if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d)?$/.test(v)) return NaN;
  const withSeconds = v.length === 16 ? `${v}:00` : v;
  return zone === 'UTC' ? Date.parse(`${withSeconds}Z`) : new Date(withSeconds).getTime();
}

/**
 * Tick labels for a time axis (unix seconds), in the chosen zone: `HH:MM`, with the date where
 * the day changes or on the first tick, seconds when ticks are under a minute apart, and dates
 * alone when ticks are a day or more apart.
 */
export function fmtTimeTicks(secs: Array<number | null>): string[] {
  const step = secs.length > 1 && secs[0] !== null && secs[1] !== null ? secs[1] - secs[0] : 3600;
  let lastDay = '';
  return secs.map((t) => {
    if (t === null || t === undefined) return '';
    const p = parts(t * 1000);
    const day = `${p.y}-${p2(p.mo)}-${p2(p.d)}`;
    const newDay = day !== lastDay;
    lastDay = day;
    if (step >= 86_400) return `${p2(p.mo)}-${p2(p.d)}`;
    const hm = step < 60 ? `${p2(p.h)}:${p2(p.mi)}:${p2(p.s)}` : `${p2(p.h)}:${p2(p.mi)}`;
    return newDay ? `${hm}\n${p2(p.mo)}-${p2(p.d)}` : hm;
  });
}

/** "3 min ago", "2 h ago", "5 d ago"; a future time is "just now". */
export function ago(ms: number, nowMs = Date.now()): string {
  const s = Math.max(0, (nowMs - ms) / 1000);
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86_400)} d ago`;
}

/** "4 min", "3 h 5 min", "2 d 3 h". */
export function duration(s: number): string {
  if (s < 60) return `${Math.floor(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86_400)} d ${Math.floor((s % 86_400) / 3600)} h`;
}

// ---------------------------------------------------------------- stream names

/** A stream's name and tags from its canonical key `name|ST[a:b,c:d]`. */
export function splitKey(key: string): { name: string; tags: string[] } {
  const at = key.lastIndexOf('|ST[');
  if (at < 0 || !key.endsWith(']')) return { name: key, tags: [] };
  const inner = key.slice(at + 4, -1);
  return { name: key.slice(0, at), tags: inner ? inner.split(',') : [] };
}

/** Self-monitoring streams carry the tag `strata:self`. */
export function isSelf(tags: string[]): boolean {
  return tags.includes('strata:self');
}

/** A stream shown as people read it: the name, then one chip per tag. */
export function streamLabel(name: string, tags: string[], opts: { chipsMax?: number } = {}): HTMLElement {
  const span = document.createElement('span');
  span.className = 'stream';
  const n = document.createElement('span');
  n.className = 'sname';
  n.textContent = name;
  span.append(n);
  const max = opts.chipsMax ?? 8;
  for (const t of tags.slice(0, max)) {
    const c = document.createElement('span');
    c.className = t === 'strata:self' ? 'chip chip-self' : 'chip';
    c.textContent = t;
    span.append(' ', c);
  }
  if (tags.length > max) {
    const more = document.createElement('span');
    more.className = 'chip muted';
    more.textContent = `+${tags.length - max}`;
    more.title = tags.slice(max).join(', ');
    span.append(' ', more);
  }
  return span;
}

/** Plain text for a stream, for legends and aria labels: `api_latency {svc:api, env:prod}`. */
export function streamText(name: string, tags: string[]): string {
  return tags.length ? `${name} {${tags.join(', ')}}` : name;
}

/** A graph's title: its stream's name and tag chips (from the graph, or parsed from its key). */
export function graphTitle(g: { name?: string; tags?: string[]; key?: string; title?: string; query: string }): { node: HTMLElement; text: string } {
  const parsed = g.key ? splitKey(g.key) : undefined;
  const name = g.name ?? parsed?.name;
  const tags = g.tags ?? parsed?.tags ?? [];
  if (name === undefined) {
    const span = document.createElement('span');
    span.className = 'stream';
    const code = document.createElement('code');
    code.textContent = g.title ?? g.query;
    span.append(code);
    return { node: span, text: g.title ?? g.query };
  }
  return { node: streamLabel(name, tags), text: streamText(name, tags) };
}
