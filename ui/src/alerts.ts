// The alerts page: instances that are not ok, grouped by severity (1 first), kept current by
// long polling the alerts API (ETag + wait); one selected instance shows its labels and
// annotations, acknowledgement and deliveries (when notifications are on), its history, and its
// rule's expression graphed with the severity ladder's thresholds and the firing intervals.
import uPlot from 'uplot';
import './alerts.css';
import * as aapi from './alertapi';
import * as api from './api';
import { chartWidth, css, el, followWidth, seriesColour, timeAxis, tzDate, valueAxis, zoomHooks, type Ctx } from './charts';
import { fmtCount, fmtTimeZ, fmtValue, fromInput, tzSuffix } from './format';
import { allocCells, drawCells, scaleLevel, type Scale } from './heatmap';
import { bins, merge, type RawBin } from './hist';
import type { State, View } from './state';

export interface AlertHooks {
  go(v: View, extra?: Partial<State>): void;
  cur(): boolean;
  keep(cleanup: () => void): void;
  status(text: string): void;
  setUrl(): void;
}

/** Seconds one long poll waits for a change (under the server's request timeout). */
const POLL_WAIT_S = 25;
/** Series graphed as lines at most (a histogram expression merges its series). */
const LINES_MAX = 10;
/** Transitions listed in an instance's history. */
const HISTORY_ROWS_MAX = 200;

// ---------------------------------------------------------------- thresholds

export interface Threshold {
  level: number;
  kind: 'when' | 'clear';
  value: number;
  /** The comparison it came from, for the legend. */
  text: string;
}

/** Reducers whose argument is a value on the histogram's value axis (`count_above(1.5)`). */
const ARG_ON_AXIS = new Set(['count_above', 'count_below', 'count_between', 'ratio_above', 'ratio_below', 'ratio_between', 'inverse_percentile', 'inverse_quantile', 'rate_above', 'rate_below']);
/** Reducers whose result is a value on the value axis (`percentile(99) > 2`). */
const RESULT_ON_AXIS = new Set(['percentile', 'quantile', 'median', 'mean', 'average', 'min', 'max', 'value']);
const COMPARISON = /(?:\b([a-z_]+)\s*(?:\(([^)]*)\))?\s*)?(>=|<=|==|!=|>|<)\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)/g;

/**
 * The horizontal lines a condition draws on the value axis: for a histogram, the values its
 * reducers look at (`count_above(1.5) >= 500` → 1.5, `percentile(99) > 2` → 2); for numbers,
 * the value compared with (`> 5`, `value > 5`). Counts and ratios are not values: no line.
 */
export function thresholdsOf(cond: string, level: number, kind: 'when' | 'clear'): Threshold[] {
  const out: Threshold[] = [];
  for (const m of cond.matchAll(COMPARISON)) {
    const fn = m[1] ?? 'value';
    const text = m[0].trim();
    if (ARG_ON_AXIS.has(fn)) {
      for (const a of (m[2] ?? '').split(',')) {
        const v = Number(a.trim());
        if (a.trim() !== '' && Number.isFinite(v)) out.push({ level, kind, value: v, text });
      }
    } else if (RESULT_ON_AXIS.has(fn)) {
      out.push({ level, kind, value: Number(m[4]), text });
    }
  }
  return out;
}

export function ladderThresholds(levels: aapi.LevelSpec[] | undefined): Threshold[] {
  const out: Threshold[] = [];
  for (const l of levels ?? []) {
    if (l.when) out.push(...thresholdsOf(l.when, l.level, 'when'));
    if (l.clear) out.push(...thresholdsOf(l.clear, l.level, 'clear'));
  }
  return out;
}

/** The colour of a severity level (1 worst). */
export function levelColour(level: number): string {
  return css(['--bad', '--p90', '--s5', '--s6', '--line'][Math.max(0, Math.min(4, level - 1))]);
}

/** Firing intervals (ms) from transitions: from entering `firing` to leaving it; open ones end at `endMs`. */
export function firingIntervals(ts: aapi.Transition[], endMs: number): Array<[number, number]> {
  const byFp = new Map<string, aapi.Transition[]>();
  for (const t of ts) {
    const list = byFp.get(t.fp) ?? [];
    list.push(t);
    byFp.set(t.fp, list);
  }
  const out: Array<[number, number]> = [];
  for (const list of byFp.values()) {
    list.sort((a, b) => a.t - b.t);
    let open: number | null = null;
    for (const t of list) {
      if (t.state === 'firing' && open === null) open = t.t;
      else if (t.state !== 'firing' && open !== null) {
        out.push([open, t.t]);
        open = null;
      }
    }
    if (open !== null) out.push([open, endMs]);
  }
  return out.sort((a, b) => a[0] - b[0]);
}

// ---------------------------------------------------------------- the expression graph

export interface RuleGraph {
  expr: string;
  /** Only these output streams (an instance's), else every one. */
  streams?: string[];
  levels?: aapi.LevelSpec[];
  shaded: Array<[number, number]>;
}

interface Drawn {
  level: number;
  kind: string;
  value: number;
  y: number;
}

/**
 * The expression over the range (a heatmap when it yields histograms, lines otherwise) with
 * each level's thresholds as horizontal lines (`when` solid, `clear` dashed) and the firing
 * intervals shaded. What was drawn is kept on the element for the tests.
 */
export async function ruleGraph(host: HTMLElement, g: RuleGraph, ctx: Ctx): Promise<() => void> {
  const out = await api.caql(g.expr, ctx.startS, ctx.endS, ctx.period);
  const chosen = g.streams ? out.series.filter((s) => g.streams?.includes(s.label)) : out.series;
  const series = chosen.length ? chosen : out.series;
  const thresholds = ladderThresholds(g.levels);
  const box = el('div', { class: 'rgraph', 'data-testid': 'rule-graph' });
  const legend = el('ul', { class: 'rlegend', 'data-testid': 'rule-graph-legend' });
  for (const t of thresholds) {
    legend.append(
      el('li', {}, el('span', { class: `rswatch ${t.kind}`, style: `border-color:${levelColour(t.level)}`, 'aria-hidden': 'true' }), `severity ${t.level} ${t.kind}: `, el('code', {}, t.text)),
    );
  }
  if (g.shaded.length) legend.append(el('li', {}, el('span', { class: 'rswatch shade', 'aria-hidden': 'true' }), `firing (${g.shaded.length} interval${g.shaded.length === 1 ? '' : 's'})`));
  if (series.length === 0) {
    host.append(el('p', { class: 'empty', 'data-testid': 'rule-graph-empty' }, 'The expression returned no streams over this range.'), legend);
    return () => {};
  }
  host.append(box, legend);
  const xs = series[0].values.map(([t]) => t);
  const hist = series.some((s) => s.values.some(([, v]) => v !== null && typeof v === 'object'));
  box.dataset.kind = hist ? 'heatmap' : 'line';
  const height = () => 260;
  const drawnShades: Array<[number, number]> = [];
  const drawOverlays = (u: uPlot) => {
    const c = u.ctx;
    const { left, top, width, height: h } = u.bbox;
    c.save();
    c.fillStyle = css('--bad');
    c.globalAlpha = 0.16;
    drawnShades.length = 0;
    for (const [a, b] of g.shaded) {
      const x0 = Math.max(left, u.valToPos(a / 1000, 'x', true));
      const x1 = Math.min(left + width, u.valToPos(b / 1000, 'x', true));
      if (x1 > x0) {
        c.fillRect(x0, top, x1 - x0, h);
        drawnShades.push([a, b]);
      }
    }
    c.restore();
    const drawn: Drawn[] = [];
    for (const t of thresholds) {
      const y = u.valToPos(t.value, 'y', true);
      if (!(y >= top && y <= top + h)) continue;
      c.save();
      c.strokeStyle = levelColour(t.level);
      c.lineWidth = 2 * devicePixelRatio;
      c.setLineDash(t.kind === 'clear' ? [6 * devicePixelRatio, 4 * devicePixelRatio] : []);
      c.beginPath();
      c.moveTo(left, y);
      c.lineTo(left + width, y);
      c.stroke();
      c.restore();
      drawn.push({ level: t.level, kind: t.kind, value: t.value, y });
    }
    box.dataset.thresholds = JSON.stringify(drawn);
    box.dataset.shaded = JSON.stringify(drawnShades);
  };
  const extend = (lo: number, hi: number): [number, number] => {
    for (const t of thresholds) {
      lo = Math.min(lo, t.value);
      hi = Math.max(hi, t.value);
    }
    return [lo, hi];
  };
  let plot: uPlot;
  if (hist) {
    // One histogram per slice: the chosen streams merged.
    const perSlice: RawBin[][] = xs.map((_, i) =>
      merge(series.map((s) => {
        const v = s.values[i]?.[1] as { bins?: RawBin[] } | null;
        return v && typeof v === 'object' && Array.isArray(v.bins) ? v.bins : [];
      })),
    );
    const cellsList: Array<{ i: number; lo: number; hi: number; d: number }> = [];
    let yMin = Infinity;
    let yMax = -Infinity;
    const scale: Scale = { lo: Infinity, hi: 0 };
    perSlice.forEach((raw, i) => {
      for (const b of bins(raw)) {
        if (b.lo <= 0) continue;
        const d = b.count / Math.log10(b.hi / b.lo);
        cellsList.push({ i, lo: b.lo, hi: b.hi, d });
        scale.lo = Math.min(scale.lo, d);
        scale.hi = Math.max(scale.hi, d);
        yMin = Math.min(yMin, b.lo);
        yMax = Math.max(yMax, b.hi);
      }
    });
    if (!Number.isFinite(yMin)) [yMin, yMax] = [0.001, 10];
    [yMin, yMax] = extend(yMin, yMax);
    // Room around a threshold at the edge, on the log axis.
    yMin = Math.max(1e-12, yMin / 1.5);
    yMax *= 1.5;
    const cells = allocCells(Math.max(1, cellsList.length));
    const stepS = out.period;
    plot = new uPlot(
      {
        width: chartWidth(host),
        height: height(),
        tzDate,
        scales: { x: { time: true, range: [ctx.startS, ctx.endS] }, y: { distr: 3, range: [yMin, yMax] } },
        axes: [timeAxis(box), valueAxis('', box)],
        legend: { show: false },
        cursor: { drag: { x: true, y: false, setScale: false }, points: { show: false } },
        series: [{}, { show: false }],
        hooks: {
          drawClear: [
            (u) => {
              cells.n = 0;
              for (const c of cellsList) {
                const k = cells.n++;
                cells.x0[k] = u.valToPos(xs[c.i], 'x', true);
                cells.x1[k] = u.valToPos(xs[c.i] + stepS, 'x', true);
                cells.y0[k] = u.valToPos(c.hi, 'y', true);
                cells.y1[k] = u.valToPos(c.lo, 'y', true);
                cells.level[k] = scaleLevel(c.d, scale);
              }
              drawCells(u.ctx, cells, u.bbox);
            },
          ],
          draw: [drawOverlays],
          setSelect: zoomHooks(ctx),
        },
      },
      [xs, xs.map(() => null)],
      box,
    );
    box.setAttribute('role', 'img');
    box.setAttribute('aria-label', `heatmap of ${g.expr} with the severity thresholds and firing intervals`);
  } else {
    const shown = series.slice(0, LINES_MAX);
    const ys = shown.map((s) => s.values.map(([, v]) => (typeof v === 'number' ? v : null)));
    plot = new uPlot(
      {
        width: chartWidth(host),
        height: height(),
        tzDate,
        scales: {
          x: { time: true, range: [ctx.startS, ctx.endS] },
          y: { range: (_u, lo, hi) => extend(lo ?? 0, hi ?? 1).map((v, i) => v + (i ? 1 : -1) * 0.05 * Math.abs(v || 1)) as [number, number] },
        },
        axes: [timeAxis(box), valueAxis('', box)],
        legend: { show: false },
        cursor: { drag: { x: true, y: false, setScale: false } },
        series: [{}, ...shown.map((s, i) => ({ label: s.label, stroke: seriesColour(i), width: 2, spanGaps: false }))],
        hooks: { draw: [drawOverlays], setSelect: zoomHooks(ctx) },
      },
      [xs, ...ys],
      box,
    );
    box.setAttribute('role', 'img');
    box.setAttribute('aria-label', `${g.expr} as lines with the severity thresholds and firing intervals`);
  }
  // For the tests: the canvas pixel of a time (s) and value.
  Object.assign(box, { strataProbe: (tS: number, v: number) => ({ x: plot.valToPos(tS, 'x', true), y: plot.valToPos(v, 'y', true) }) });
  const unfollow = followWidth(host, plot, height);
  return () => {
    unfollow();
    plot.destroy();
  };
}

// ---------------------------------------------------------------- the list

const SEVERITY_NAMES: Record<number, string> = { 0: 'No severity (no data, errors)', 1: 'Severity 1', 2: 'Severity 2', 3: 'Severity 3', 4: 'Severity 4', 5: 'Severity 5' };
const STATE_ORDER = ['firing', 'error', 'nodata', 'pending', 'recovering', 'resolved'];

function stateBadge(state: string, flapping: boolean): HTMLElement {
  const b = el('span', { class: 'abadges' }, el('span', { class: `astate st-${state}`, 'data-testid': 'alert-state' }, state));
  if (flapping) b.append(el('span', { class: 'astate st-flapping', 'data-testid': 'alert-flapping', title: 'the state changes often (flap detection)' }, 'flapping'));
  return b;
}

function labelChips(labels: Record<string, string>): HTMLElement {
  const span = el('span', { class: 'alabels' });
  for (const [k, v] of Object.entries(labels)) {
    if (k === 'alertname' || k === 'severity') continue;
    span.append(el('span', { class: 'chip' }, `${k}=${v}`), ' ');
  }
  return span;
}

function groups(list: aapi.Instance[]): Map<number, aapi.Instance[]> {
  const m = new Map<number, aapi.Instance[]>();
  for (const a of list) {
    const sev = a.state === 'nodata' || a.state === 'error' ? 0 : a.severity;
    const g = m.get(sev) ?? [];
    g.push(a);
    m.set(sev, g);
  }
  const rank = (s: string) => (STATE_ORDER.indexOf(s) + 1 || 99);
  for (const g of m.values()) g.sort((a, b) => rank(a.state) - rank(b.state) || a.since - b.since || a.rule.localeCompare(b.rule));
  // 1 first, "no severity" last.
  return new Map([...m.entries()].sort(([a], [b]) => (a || 9) - (b || 9)));
}

function renderList(host: HTMLElement, list: aapi.Instance[], selected: string | undefined, pick: (fp: string) => void): void {
  if (list.length === 0) {
    host.replaceChildren(el('p', { 'data-testid': 'alerts-none' }, el('span', { class: 'dot ok', 'aria-hidden': 'true' }), ' No alert is pending, firing or recovering.'));
    return;
  }
  const sections: HTMLElement[] = [];
  for (const [sev, items] of groups(list)) {
    const firing = items.filter((a) => a.state === 'firing').length;
    const ul = el('ul', { class: 'alist' });
    for (const a of items) {
      const b = el(
        'button',
        { type: 'button', class: `aitem sev-${sev}`, 'data-testid': 'alert-item', 'data-fp': a.fp, 'data-state': a.state, 'data-rule': a.rule, 'aria-pressed': String(a.fp === selected) },
        el('span', { class: 'ahead' }, stateBadge(a.state, a.flapping), el('strong', {}, a.rule), el('time', { class: 'muted small', datetime: new Date(a.since).toISOString(), 'data-testid': 'alert-since', 'data-ms': String(a.since) }, `since ${fmtTimeZ(a.since)}`)),
        a.annotations.summary ? el('span', { class: 'asummary', 'data-testid': 'alert-summary' }, a.annotations.summary) : '',
        el('span', { class: 'astream small' }, a.stream || '(the ruleset itself)', ' ', labelChips(a.labels)),
      );
      if (a.suppressed) b.append(el('span', { class: 'muted small' }, ' · suppressed by its parent ruleset'));
      const notes = el('span', { class: 'abadges small' });
      if (a.acked) notes.append(el('span', { class: 'astate st-acked', 'data-testid': 'alert-acked', title: a.acked.note || 'acknowledged' }, `acknowledged${a.acked.by ? ` by ${a.acked.by}` : ''}`));
      if (a.muted_by?.length) notes.append(el('span', { class: 'astate st-muted', 'data-testid': 'alert-muted' }, `muted by ${a.muted_by.join(', ')}`));
      if (notes.childNodes.length) b.append(notes);
      b.addEventListener('click', () => pick(a.fp));
      ul.append(el('li', {}, b));
    }
    const h = el('h2', { id: `h-sev-${sev}` }, SEVERITY_NAMES[sev] ?? `Severity ${sev}`, el('span', { class: 'count', 'data-testid': 'sev-count' }, `${items.length} alert${items.length === 1 ? '' : 's'}${firing && firing !== items.length ? `, ${firing} firing` : ''}`));
    sections.push(el('section', { class: `sevgroup sev-${sev}`, 'data-testid': 'sev-group', 'data-severity': String(sev), 'aria-labelledby': `h-sev-${sev}` }, h, ul));
  }
  host.replaceChildren(...sections);
}

// ---------------------------------------------------------------- the detail

function historyTable(ts: aapi.Transition[]): HTMLElement {
  if (ts.length === 0) return el('p', { class: 'muted', 'data-testid': 'alert-history-empty' }, 'No transition in this range (widen the time range above).');
  const zone = tzSuffix(ts[0].t);
  const body = el('tbody');
  for (const t of ts.slice(0, HISTORY_ROWS_MAX)) {
    const flags = [t.late ? 'late' : '', t.eager ? 'eager' : '', t.backfill ? 'backfill' : '', t.flapping ? 'flapping' : ''].filter(Boolean).join(', ');
    body.append(
      el(
        'tr',
        { 'data-testid': 'history-row', 'data-from': t.from, 'data-to': t.state, 'data-t': String(t.t) },
        el('td', {}, fmtTimeZ(t.t).replace(/ UTC.*$/, '')),
        el('td', {}, `${t.from} → `, el('strong', {}, t.state)),
        el('td', {}, t.severity ? String(t.severity) : '–'),
        el('td', {}, t.value === null ? '–' : fmtValue(t.value)),
        el('td', { class: 'small' }, t.annotations.summary ?? '', flags ? el('span', { class: 'muted' }, ` (${flags})`) : ''),
      ),
    );
  }
  return el(
    'table',
    { class: 'changes', 'data-testid': 'alert-history' },
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, `period end (${zone})`), el('th', { scope: 'col' }, 'transition'), el('th', { scope: 'col' }, 'severity'), el('th', { scope: 'col' }, 'value'), el('th', { scope: 'col' }, 'annotation'))),
    body,
  );
}

async function ackBox(a: aapi.Instance, status: (t: string) => void, refresh: () => void): Promise<HTMLElement | null> {
  const n = await aapi.notifications(a.fp);
  if (n === null) return el('p', { class: 'muted small', 'data-testid': 'notify-off' }, 'Notifications are not configured on this server: no acknowledgements or deliveries.');
  const box = el('section', { class: 'ackbox', 'aria-labelledby': 'h-ack', 'data-testid': 'ack-box' }, el('h3', { id: 'h-ack' }, 'Acknowledgement and deliveries'));
  const current = n.acks.find((x) => x.fp === a.fp);
  if (current) {
    const take = el('button', { type: 'button', 'data-testid': 'ack-remove' }, 'Take back');
    take.addEventListener('click', async () => {
      try {
        await aapi.unack(a.fp);
        status('Acknowledgement taken back.');
        refresh();
      } catch (e) {
        status(`Acknowledge: ${(e as Error).message}`);
      }
    });
    box.append(
      el('p', { 'data-testid': 'ack-current' }, `Acknowledged ${fmtTimeZ(current.at)}${current.by ? ` by ${current.by}` : ''}${current.until ? `, until ${fmtTimeZ(current.until)}` : ', until it resolves'}: `, el('q', {}, current.note || '(no note)'), ' ', take),
    );
  } else if (a.state === 'firing' || a.state === 'recovering') {
    const note = el('input', { id: 'ack-note', 'data-testid': 'ack-note', placeholder: 'what is being done' });
    const until = el('input', { id: 'ack-until', type: 'datetime-local', step: '60', 'data-testid': 'ack-until' });
    const go = el('button', { type: 'button', 'data-testid': 'ack-submit' }, 'Acknowledge');
    go.addEventListener('click', async () => {
      const u = until.value ? fromInput(until.value) : undefined;
      if (u !== undefined && !(u > Date.now())) {
        status('Acknowledge: “until” must be in the future.');
        until.focus();
        return;
      }
      try {
        await aapi.ack(a.fp, note.value.trim(), u);
        status('Acknowledged: no reminders or escalation for this alert.');
        refresh();
      } catch (e) {
        status(`Acknowledge: ${(e as Error).message}`);
      }
    });
    box.append(
      el(
        'div',
        { class: 'ackform' },
        el('label', { for: 'ack-note' }, 'Note'),
        note,
        el('label', { for: 'ack-until' }, `Until (${tzSuffix(Date.now())}, empty: until it resolves)`),
        until,
        go,
      ),
    );
  }
  if (n.deliveries.length === 0) box.append(el('p', { class: 'muted small', 'data-testid': 'deliveries-none' }, 'No notification delivered for this alert yet.'));
  else {
    const body = el('tbody');
    for (const d of n.deliveries.slice(-50).reverse()) {
      body.append(
        el(
          'tr',
          { 'data-testid': 'delivery-row' },
          el('td', {}, fmtTimeZ(d.t_ms).replace(/ UTC.*$/, '')),
          el('td', {}, d.receiver + (d.via && d.via !== d.receiver ? ` (via ${d.via})` : '')),
          el('td', {}, d.status),
          el('td', {}, d.outcome),
          el('td', {}, String(d.attempts)),
          el('td', { class: 'small' }, d.error ?? ''),
        ),
      );
    }
    box.append(
      el(
        'table',
        { class: 'changes', 'data-testid': 'deliveries' },
        el('thead', {}, el('tr', {}, ...['sent', 'receiver', 'status', 'outcome', 'attempts', 'error'].map((h) => el('th', { scope: 'col' }, h)))),
        body,
      ),
    );
  }
  return box;
}

async function renderDetail(host: HTMLElement, a: aapi.Instance, ctx: Ctx, hooks: AlertHooks, refresh: () => void): Promise<() => void> {
  const endMs = ctx.endS * 1000;
  const [ts, info] = await Promise.all([aapi.history(a.fp, ctx.startS, ctx.endS), aapi.rule(a.rule).catch(() => null)]);
  const dl = el('dl', { class: 'adl' });
  const row = (k: string, v: Node | string) => dl.append(el('dt', {}, k), el('dd', {}, v));
  row('state', stateBadge(a.state, a.flapping));
  row('severity', a.severity ? String(a.severity) : '–');
  row('since', fmtTimeZ(a.since));
  if (a.fired) row('fired', fmtTimeZ(a.fired));
  if (a.value !== null) row('value', fmtCount(a.value));
  row('stream', a.stream || '(the ruleset itself)');
  for (const [k, v] of Object.entries(a.labels)) row(`label ${k}`, v);
  for (const [k, v] of Object.entries(a.annotations)) row(k, el('span', { 'data-testid': `annotation-${k}` }, v));
  const graphHost = el('div', { class: 'rghost' });
  const editRule = el('button', { type: 'button', class: 'link', 'data-testid': 'open-rule' }, info?.read_only ? 'view its ruleset' : 'edit its ruleset');
  editRule.addEventListener('click', () => hooks.go('rules', { rule: a.rule }));
  const mute = el('button', { type: 'button', class: 'link', 'data-testid': 'mute-alert' }, 'Mute with a maintenance window…');
  mute.addEventListener('click', () => hooks.go('maintenance', { mute: a.fp }));
  if (a.muted_by?.length) row('muted by', el('span', { 'data-testid': 'detail-muted' }, a.muted_by.join(', ')));
  host.replaceChildren(
    el('h2', { 'data-testid': 'alert-detail-title' }, a.rule, ' ', el('span', { class: 'muted small' }, a.stream)),
    dl,
    el('p', { class: 'small row' }, editRule, ' · ', mute),
  );
  const acks = await ackBox(a, hooks.status, refresh);
  if (acks) host.append(acks);
  host.append(el('h3', {}, 'Expression and thresholds'));
  const spec = info?.spec;
  let cleanup = () => {};
  if (spec?.expr) {
    host.append(el('p', { class: 'small' }, el('code', {}, spec.expr), spec.window ? ` · window ${spec.window}` : ''), graphHost);
    try {
      cleanup = await ruleGraph(graphHost, { expr: spec.expr, streams: a.stream ? [a.stream] : undefined, levels: spec.severity, shaded: firingIntervals(ts, endMs) }, ctx);
    } catch (e) {
      graphHost.append(el('p', { class: 'error' }, `Graph: ${(e as Error).message}`));
    }
  } else {
    host.append(el('p', { class: 'muted' }, 'This ruleset has no CAQL expression to graph (a text, absence or built-in rule).'));
  }
  host.append(el('h3', {}, 'History'), historyTable(ts));
  return cleanup;
}

// ---------------------------------------------------------------- the page

export async function renderAlerts(host: HTMLElement, ctx: Ctx, hooks: AlertHooks): Promise<void> {
  const first = await aapi.alerts();
  if (!hooks.cur()) return;
  let list = first?.alerts ?? [];
  let etag = first?.etag ?? '';
  const listHost = el('div', { class: 'alistbox', 'data-testid': 'alert-groups' });
  const detail = el('section', { class: 'adetail', 'data-testid': 'alert-detail', 'aria-label': 'selected alert', 'aria-live': 'polite' });
  const rulesBtn = el('button', { type: 'button', 'data-testid': 'to-rules' }, 'Rules and backtests');
  rulesBtn.addEventListener('click', () => hooks.go('rules'));
  const windowsBtn = el('button', { type: 'button', 'data-testid': 'to-maintenance' }, 'Maintenance windows');
  windowsBtn.addEventListener('click', () => hooks.go('maintenance'));
  const routesBtn = el('button', { type: 'button', 'data-testid': 'to-routes' }, 'Routing tree');
  routesBtn.addEventListener('click', () => hooks.go('routes'));
  const summary = el('p', { class: 'muted', 'data-testid': 'alerts-summary' });
  host.replaceChildren(
    el('div', { class: 'page alerts-page' }, el('div', { class: 'dhead' }, el('h1', {}, 'Alerts'), summary, rulesBtn, windowsBtn, routesBtn), el('div', { class: 'alayout' }, el('section', { 'aria-label': 'alerts by severity' }, listHost), detail)),
  );
  let detailCleanup = () => {};
  let detailSeq = 0;
  const showDetail = async () => {
    const seq = ++detailSeq;
    detailCleanup();
    detailCleanup = () => {};
    const fp = ctx.state.alert;
    const a = list.find((x) => x.fp === fp);
    if (!a) {
      detail.dataset.ready = 'true';
      detail.replaceChildren(el('p', { class: 'muted' }, fp ? 'This alert is no longer active (it resolved or was forgotten).' : 'Select an alert to see its history, its expression graphed with the thresholds, and its notifications.'));
      return;
    }
    detail.dataset.ready = 'false';
    try {
      const c = await renderDetail(detail, a, ctx, hooks, () => void showDetail());
      if (seq === detailSeq && hooks.cur()) detailCleanup = c;
      else c();
    } catch (e) {
      detail.append(el('p', { class: 'error', role: 'alert' }, (e as Error).message));
    }
    if (seq === detailSeq) detail.dataset.ready = 'true';
  };
  const pick = (fp: string) => {
    ctx.state.alert = fp;
    hooks.setUrl();
    draw();
    void showDetail();
  };
  const draw = () => {
    const firing = list.filter((a) => a.state === 'firing').length;
    summary.textContent = `${firing} firing, ${list.length - firing} other not ok · updated ${fmtTimeZ(Date.now(), true)}`;
    renderList(listHost, list, ctx.state.alert, pick);
  };
  draw();
  await showDetail();
  // Long poll: the server answers when the list changes (or 304 after the wait).
  const abort = new AbortController();
  hooks.keep(() => {
    abort.abort();
    detailCleanup();
  });
  void (async () => {
    while (!abort.signal.aborted && hooks.cur()) {
      try {
        const next = await aapi.alerts(etag, POLL_WAIT_S, abort.signal);
        if (!next || abort.signal.aborted) continue;
        list = next.alerts;
        etag = next.etag;
        draw();
      } catch {
        if (abort.signal.aborted) return;
        await new Promise((r) => setTimeout(r, 5_000));
      }
    }
  })();
}
