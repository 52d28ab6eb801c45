// Maintenance windows and the routing tree (crates/alert/src/http.rs: `/maintenance`,
// `/routes`). The windows page lists every window (file and API) with its schedule in the UI's
// time zone, its scope, whether it is active now, when it next starts and ends (the server
// computes both) and the firing alerts it mutes now; a form adds one-off, weekly and cron
// windows (an alert's labels prefill it from the alerts page), the server's 400 shown at the
// field it names. The routes page draws the tree and tests example labels against it.
import './alerts.css';
import * as aapi from './alertapi';
import { ApiError } from './api';
import { el } from './charts';
import { fmtTimeZ, fromInput, localZoneName, toInput, tzSuffix } from './format';
import type { State, View } from './state';

export interface MaintenanceHooks {
  go(v: View, extra?: Partial<State>): void;
  cur(): boolean;
  status(text: string): void;
}

const DAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'];
/** The form's fields, as the API names them in a 400 answer's `field`. */
const FIELDS = ['name', 'start', 'end', 'days', 'at', 'cron', 'duration', 'timezone', 'matchers', 'rulesets', 'tags', 'severities'] as const;
type Field = (typeof FIELDS)[number];
/** Alerts named under one window ("mutes now"). */
const MUTED_SHOWN_MAX = 20;
/** Labels one routes test takes (the server's limit). */
const TEST_LABELS_MAX = 256;

/** A window's one-off time (RFC 3339 or ms since the epoch, as the API takes it) → ms. */
function timeMs(t: string | undefined): number {
  if (t === undefined) return NaN;
  return /^-?\d+$/.test(t.trim()) ? Number(t) : Date.parse(t);
}

/** IANA zones the browser knows, the browser's own and UTC first. */
function zones(): string[] {
  const intl = Intl as unknown as { supportedValuesOf?: (k: string) => string[] };
  const all = intl.supportedValuesOf?.('timeZone') ?? [];
  return [...new Set([localZoneName(), 'UTC', ...all].filter((z) => z && z !== 'local'))];
}

function scheduleText(w: aapi.WindowInfo): string {
  const zone = w.timezone ?? 'UTC';
  if (w.kind === 'once') {
    const end = w.end !== undefined ? timeMs(w.end) : w.next_end_ms;
    return `once, from ${fmtTimeZ(timeMs(w.start))} to ${end === null || Number.isNaN(end) ? '?' : fmtTimeZ(end)}`;
  }
  if (w.kind === 'cron') return `cron “${w.cron}” (${zone}) for ${w.duration}`;
  const days = w.days?.length ? w.days.join(', ') : 'every day';
  return `weekly: ${days} at ${w.at} (${zone}) for ${w.duration}`;
}

function scopeChips(w: aapi.WindowSpec): HTMLElement {
  const span = el('span', { class: 'alabels', 'data-testid': 'mw-scope' });
  const chip = (t: string) => span.append(el('span', { class: 'chip' }, t), ' ');
  for (const m of w.matchers ?? []) chip(m);
  for (const r of w.rulesets ?? []) chip(`ruleset ${r}`);
  for (const t of w.tags ?? []) chip(`tag ${t}`);
  if (w.severities?.length) chip(`severity ${w.severities.join(', ')}`);
  if (!span.childNodes.length) span.append(el('span', { class: 'muted' }, 'every alert'));
  return span;
}

function windowItem(w: aapi.WindowInfo, remove: (w: aapi.WindowInfo) => void, openAlert: (fp: string) => void): HTMLElement {
  const when =
    w.active && w.next_end_ms !== null
      ? el('span', { class: 'astate st-firing', 'data-testid': 'mw-active' }, `active now, until ${fmtTimeZ(w.next_end_ms)}`)
      : w.next_start_ms !== null && w.next_end_ms !== null
        ? el('span', { class: 'astate st-unknown', 'data-testid': 'mw-inactive' }, `inactive; next from ${fmtTimeZ(w.next_start_ms)} to ${fmtTimeZ(w.next_end_ms)}`)
        : el('span', { class: 'astate st-unknown', 'data-testid': 'mw-over' }, 'over');
  const mutes = el('div', { class: 'small', 'data-testid': 'mw-mutes' });
  if (w.active) {
    if (w.mutes.length === 0) mutes.append(el('span', { class: 'muted' }, 'Mutes no firing alert now.'));
    else {
      mutes.append(`Mutes now (${w.mutes.length}): `);
      for (const m of w.mutes.slice(0, MUTED_SHOWN_MAX)) {
        const b = el('button', { type: 'button', class: 'link', 'data-testid': 'mw-muted', 'data-fp': m.fp }, `${m.rule} ${m.stream}`);
        b.addEventListener('click', () => openAlert(m.fp));
        mutes.append(b, ' ');
      }
    }
  }
  const del =
    w.source === 'api'
      ? el('button', { type: 'button', class: 'danger', 'data-testid': 'mw-delete', 'aria-label': `delete maintenance window ${w.name}` }, 'Delete')
      : el('span', { class: 'muted small' }, 'from the configuration file (read-only)');
  del.addEventListener('click', () => remove(w));
  return el(
    'li',
    { class: 'mwitem', 'data-testid': 'mw-item', 'data-name': w.name, 'data-active': String(w.active), 'data-kind': w.kind },
    el('div', { class: 'ahead' }, el('strong', {}, w.name), when, del),
    el('div', { class: 'small', 'data-testid': 'mw-schedule' }, scheduleText(w)),
    el('div', { class: 'small' }, 'Scope: ', scopeChips(w)),
    w.comment ? el('div', { class: 'small muted' }, w.comment) : '',
    mutes,
  );
}

/** One labelled form control with its error line below it. */
interface Control {
  row: HTMLElement;
  input: HTMLElement;
  err: HTMLElement;
}

function control(field: Field, label: string, input: HTMLElement, hint?: string): Control {
  const err = el('p', { class: 'error small', id: `mw-err-${field}`, 'data-testid': `mw-error-${field}`, role: 'alert' });
  input.id = input.id || `mw-${field}`;
  input.setAttribute('aria-describedby', `mw-err-${field}${hint ? ` mw-hint-${field}` : ''}`);
  const row = el(
    'div',
    { class: 'mwfield', 'data-field': field },
    input.tagName === 'FIELDSET' ? input : el('label', { for: input.id }, label),
    input.tagName === 'FIELDSET' ? '' : input,
    hint ? el('span', { class: 'muted small', id: `mw-hint-${field}` }, hint) : '',
    err,
  );
  return { row, input, err };
}

function checkboxes(legend: string, field: Field, values: string[], labels: string[]): { set: HTMLFieldSetElement; boxes: HTMLInputElement[] } {
  const boxes = values.map((v) => el('input', { type: 'checkbox', value: v, 'data-testid': `mw-${field}-${v}` }));
  const set = el('fieldset', { class: 'mwchecks', id: `mw-${field}` }, el('legend', {}, legend), ...boxes.map((b, i) => el('label', {}, b, ` ${labels[i]}`)));
  return { set, boxes };
}

/** Splits a comma- or newline-separated list. */
function items(text: string): string[] {
  return text
    .split(/[,\n]/)
    .map((x) => x.trim())
    .filter(Boolean);
}

/** The "add a window" form; `prefill` holds an alert's labels. */
function windowForm(prefill: aapi.Instance | undefined, saved: (name: string) => void): { root: HTMLElement; focus(): void } {
  const now = Date.now();
  const name = el('input', { 'data-testid': 'mw-name', required: 'true', autocomplete: 'off' });
  const kind = el('select', { 'data-testid': 'mw-kind' }, el('option', { value: 'once' }, 'one-off'), el('option', { value: 'weekly' }, 'weekly'), el('option', { value: 'cron' }, 'cron'));
  const start = el('input', { type: 'datetime-local', step: '60', 'data-testid': 'mw-start' });
  const end = el('input', { type: 'datetime-local', step: '60', 'data-testid': 'mw-end' });
  const days = checkboxes('Days (none: every day)', 'days', DAYS, DAYS);
  const at = el('input', { type: 'time', step: '60', 'data-testid': 'mw-at' });
  const cron = el('input', { placeholder: '0 2 * * sun', 'data-testid': 'mw-cron', autocomplete: 'off', spellcheck: 'false' });
  const duration = el('input', { placeholder: '2h', 'data-testid': 'mw-duration', autocomplete: 'off' });
  const tz = el('select', { 'data-testid': 'mw-timezone' });
  for (const z of zones()) tz.append(el('option', { value: z }, z));
  tz.value = localZoneName() === 'local' ? 'UTC' : localZoneName();
  const matchers = el('textarea', { rows: '3', 'data-testid': 'mw-matchers', spellcheck: 'false' });
  const rulesets = el('input', { 'data-testid': 'mw-rulesets', placeholder: 'login-slow, api-errors', autocomplete: 'off' });
  const tags = el('input', { 'data-testid': 'mw-tags', placeholder: 'env:prod, dc:*', autocomplete: 'off' });
  const sev = checkboxes('Severities (none: every severity)', 'severities', ['1', '2', '3', '4', '5'], ['1', '2', '3', '4', '5']);
  const comment = el('input', { id: 'mw-comment', 'data-testid': 'mw-comment', autocomplete: 'off' });
  const submit = el('button', { type: 'submit', class: 'primary', 'data-testid': 'mw-submit' }, 'Add window');
  const formError = el('p', { class: 'error', 'data-testid': 'mw-form-error', role: 'alert' });
  const c: Record<Field, Control> = {
    name: control('name', 'Name', name),
    start: control('start', `Start (${tzSuffix(now)})`, start),
    end: control('end', `End (${tzSuffix(now)})`, end),
    days: control('days', '', days.set),
    at: control('at', 'At (local time in the zone below)', at),
    cron: control('cron', 'Cron (minute hour day month weekday)', cron),
    duration: control('duration', 'Duration', duration, 'e.g. 30m, 2h; every window must end'),
    timezone: control('timezone', 'Time zone', tz),
    matchers: control('matchers', 'Label matchers (one per line)', matchers, 'e.g. app="web", env=~"prod|stage"'),
    rulesets: control('rulesets', 'Rulesets', rulesets),
    tags: control('tags', 'Tags', tags),
    severities: control('severities', '', sev.set),
  };
  if (prefill) {
    const day = new Date(now).toISOString().slice(0, 10);
    name.value = `mute-${prefill.rule}-${day}`.replace(/[^A-Za-z0-9_.-]+/g, '-');
    matchers.value = Object.entries(prefill.labels)
      .filter(([k]) => k !== 'severity')
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join('\n');
    comment.value = `muted from the alerts page: ${prefill.rule} ${prefill.stream}`;
  }
  start.value = toInput(now);
  end.value = toInput(now + 3600_000);
  const show = () => {
    const k = kind.value;
    c.start.row.hidden = k !== 'once';
    c.end.row.hidden = k !== 'once';
    c.days.row.hidden = k !== 'weekly';
    c.at.row.hidden = k !== 'weekly';
    c.cron.row.hidden = k !== 'cron';
    c.duration.row.hidden = k === 'once';
    c.timezone.row.hidden = k === 'once';
  };
  kind.addEventListener('change', show);
  show();
  const clear = () => {
    formError.textContent = '';
    for (const f of FIELDS) {
      c[f].err.textContent = '';
      c[f].input.removeAttribute('aria-invalid');
    }
  };
  const fail = (field: string | undefined, message: string) => {
    const ctl = FIELDS.includes(field as Field) ? c[field as Field] : undefined;
    if (ctl && !ctl.row.hidden) {
      ctl.err.textContent = message;
      ctl.input.setAttribute('aria-invalid', 'true');
      ctl.input.focus();
    } else formError.textContent = message;
  };
  const spec = (): aapi.WindowSpec | null => {
    const k = kind.value;
    const s: aapi.WindowSpec = { name: name.value.trim() };
    if (!name.value.trim()) {
      fail('name', 'Give the window a name.');
      return null;
    }
    if (k === 'once') {
      const a = fromInput(start.value);
      const b = fromInput(end.value);
      if (Number.isNaN(a)) {
        fail('start', 'Give a start time.');
        return null;
      }
      // The API refuses open-ended windows; say so before sending.
      if (Number.isNaN(b)) {
        fail('end', 'Give an end time: open-ended windows are refused.');
        return null;
      }
      s.start = new Date(a).toISOString().replace('.000Z', 'Z');
      s.end = new Date(b).toISOString().replace('.000Z', 'Z');
    } else {
      if (!duration.value.trim()) {
        fail('duration', 'Give a duration: open-ended windows are refused.');
        return null;
      }
      s.duration = duration.value.trim();
      s.timezone = tz.value;
      if (k === 'weekly') {
        if (!at.value) {
          fail('at', 'Give the local start time.');
          return null;
        }
        s.at = at.value;
        s.days = days.boxes.filter((b) => b.checked).map((b) => b.value);
      } else s.cron = cron.value.trim();
    }
    const ms = matchers.value.split('\n').map((x) => x.trim()).filter(Boolean);
    if (ms.length) s.matchers = ms;
    if (items(rulesets.value).length) s.rulesets = items(rulesets.value);
    if (items(tags.value).length) s.tags = items(tags.value);
    const sv = sev.boxes.filter((b) => b.checked).map((b) => Number(b.value));
    if (sv.length) s.severities = sv;
    if (comment.value.trim()) s.comment = comment.value.trim();
    return s;
  };
  const form = el(
    'form',
    { class: 'mwform', 'data-testid': 'mw-form', 'aria-labelledby': 'h-mw-add', novalidate: 'true' },
    el('h2', { id: 'h-mw-add' }, prefill ? `Mute ${prefill.rule} with a maintenance window` : 'Add a maintenance window'),
    el('p', { class: 'muted small', 'data-testid': 'mw-must-end' }, 'Every window ends: a one-off window needs an end, a weekly or cron one a duration (open-ended windows are refused). Times are in the UI’s time zone; weekly and cron windows in the zone you pick.'),
    c.name.row,
    el('div', { class: 'mwfield' }, el('label', { for: 'mw-kind' }, 'Kind'), kind),
    c.start.row,
    c.end.row,
    c.days.row,
    c.at.row,
    c.cron.row,
    c.duration.row,
    c.timezone.row,
    el('h3', {}, 'Scope (empty: every alert)'),
    c.matchers.row,
    c.rulesets.row,
    c.tags.row,
    c.severities.row,
    el('div', { class: 'mwfield' }, el('label', { for: 'mw-comment' }, 'Comment'), comment),
    formError,
    el('div', { class: 'row' }, submit),
  );
  kind.id = 'mw-kind';
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clear();
    const s = spec();
    if (!s) return;
    submit.disabled = true;
    try {
      await aapi.putWindow(name.value.trim(), s);
      saved(name.value.trim());
    } catch (err) {
      const body = err instanceof ApiError ? err.body : {};
      fail(typeof body.field === 'string' ? body.field : undefined, (err as Error).message);
    } finally {
      submit.disabled = false;
    }
  });
  return { root: form, focus: () => name.focus() };
}

export async function renderMaintenance(host: HTMLElement, state: State, hooks: MaintenanceHooks): Promise<void> {
  const [list, alerts] = await Promise.all([aapi.windows(), state.mute ? aapi.alerts() : Promise.resolve(null)]);
  if (!hooks.cur()) return;
  const alertsBtn = el('button', { type: 'button', 'data-testid': 'to-alerts' }, 'Alerts');
  alertsBtn.addEventListener('click', () => hooks.go('alerts'));
  const routesBtn = el('button', { type: 'button', 'data-testid': 'to-routes' }, 'Routing tree');
  routesBtn.addEventListener('click', () => hooks.go('routes'));
  const head = el('div', { class: 'dhead' }, el('h1', {}, 'Maintenance windows'), alertsBtn, routesBtn);
  if (list === null) {
    host.replaceChildren(el('div', { class: 'page' }, head, el('p', { class: 'muted', 'data-testid': 'notify-off' }, 'Notifications are not configured on this server: there are no maintenance windows.')));
    return;
  }
  const ul = el('ul', { class: 'mwlist', 'data-testid': 'mw-list' });
  const refresh = async () => {
    const fresh = await aapi.windows();
    draw(fresh ?? []);
  };
  const remove = async (w: aapi.WindowInfo) => {
    if (!confirm(`Delete maintenance window “${w.name}”? Alerts it mutes are notified again.`)) return;
    try {
      await aapi.deleteWindow(w.name);
      hooks.status(`Deleted maintenance window “${w.name}”.`);
      await refresh();
    } catch (e) {
      hooks.status(`Maintenance: ${(e as Error).message}`);
    }
  };
  const draw = (ws: aapi.WindowInfo[]) => {
    ul.replaceChildren(...ws.map((w) => windowItem(w, (x) => void remove(x), (fp) => hooks.go('alerts', { alert: fp }))));
    if (ws.length === 0) ul.replaceChildren(el('li', { class: 'muted', 'data-testid': 'mw-none' }, 'No maintenance window.'));
  };
  draw(list);
  const prefill = alerts?.alerts.find((a) => a.fp === state.mute);
  const form = windowForm(prefill, (name) => {
    hooks.status(`Saved maintenance window “${name}”.`);
    void refresh();
  });
  host.replaceChildren(
    el(
      'div',
      { class: 'page mw-page' },
      head,
      el('div', { class: 'mwlayout' }, el('section', { 'aria-labelledby': 'h-mw-list' }, el('h2', { id: 'h-mw-list' }, `Windows (times in ${tzSuffix(Date.now())})`), ul), el('section', { class: 'reditor' }, form.root)),
    ),
  );
  if (prefill) form.focus();
}

// ---------------------------------------------------------------- routes

function timingText(t: aapi.Timing): string {
  if (!t.timed) return 'at once';
  const d = (ms: number) => (ms % 3600_000 === 0 ? `${ms / 3600_000}h` : ms % 60_000 === 0 ? `${ms / 60_000}m` : `${ms / 1000}s`);
  return `wait ${d(t.group_wait_ms)}, interval ${d(t.group_interval_ms)}, repeat ${t.repeat_interval_ms === null ? 'none' : d(t.repeat_interval_ms)}`;
}

function treeNode(r: aapi.RouteNode): HTMLElement {
  const li = el(
    'li',
    { 'data-testid': 'route-node', 'data-route': r.id, 'data-receiver': r.receiver },
    el(
      'div',
      { class: 'rnode' },
      el('span', { class: 'muted small' }, `route ${r.id} `),
      el('strong', {}, r.receiver),
      ' ',
      r.matchers.length ? el('code', {}, r.matchers.join(', ')) : el('span', { class: 'muted small' }, r.id === '0' ? 'every alert' : 'every alert reaching it'),
      el('span', { class: 'muted small' }, ` · group by ${r.group_by.length ? r.group_by.join(', ') : '(nothing)'} · ${timingText(r.timing)}${r.continue ? ' · continue' : ''}`),
    ),
  );
  if (r.routes.length) li.append(el('ul', {}, ...r.routes.map(treeNode)));
  return li;
}

/** `a=b c="d e"` (spaces, commas or new lines between pairs) → labels; throws naming the bad pair. */
export function parseLabels(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  const gap = /[\s,]*/y;
  const pair = /([^=\s,"]+)=("(?:[^"\\]|\\.)*"|[^\s,"]*)/y;
  let pos = 0;
  for (let n = 0; ; n++) {
    gap.lastIndex = pos;
    gap.exec(text);
    pos = gap.lastIndex;
    if (pos >= text.length) return out;
    if (n >= TEST_LABELS_MAX) throw new Error(`at most ${TEST_LABELS_MAX} labels`);
    pair.lastIndex = pos;
    const m = pair.exec(text);
    if (!m) throw new Error(`“${text.slice(pos).split(/[\s,]/)[0]}” is not name=value`);
    out[m[1]] = m[2].startsWith('"') ? (JSON.parse(m[2]) as string) : m[2];
    pos = pair.lastIndex;
  }
}

/** Each receiver with a "send a test notification" button and what came of it. */
function receiverList(names: string[]): HTMLElement {
  const row = (name: string) => {
    const out = el('span', { class: 'small', 'data-testid': 'rt-test-result', 'aria-live': 'polite' });
    const button = el('button', { type: 'button', 'data-testid': 'rt-test', 'data-receiver': name }, 'Send a test notification');
    button.addEventListener('click', async () => {
      button.disabled = true;
      out.className = 'small';
      out.textContent = ' sending…';
      try {
        await aapi.testReceiver(name);
        out.textContent = ' delivered';
        out.dataset.delivered = 'true';
      } catch (x) {
        out.className = 'small error';
        out.textContent = ` ${(x as Error).message}`;
        out.dataset.delivered = 'false';
      } finally {
        button.disabled = false;
      }
    });
    return el('li', { 'data-testid': 'rt-receiver-row', 'data-receiver': name }, el('strong', {}, name), ' ', button, out);
  };
  return el('section', { 'aria-labelledby': 'h-rt-receivers' }, el('h2', { id: 'h-rt-receivers' }, 'Receivers'), el('ul', { class: 'rreceivers' }, ...names.map(row)));
}

export async function renderRoutes(host: HTMLElement, hooks: MaintenanceHooks): Promise<void> {
  const tree = await aapi.routes();
  if (!hooks.cur()) return;
  const alertsBtn = el('button', { type: 'button' }, 'Alerts');
  alertsBtn.addEventListener('click', () => hooks.go('alerts'));
  const mwBtn = el('button', { type: 'button', 'data-testid': 'to-maintenance' }, 'Maintenance windows');
  mwBtn.addEventListener('click', () => hooks.go('maintenance'));
  const head = el('div', { class: 'dhead' }, el('h1', {}, 'Routing tree'), alertsBtn, mwBtn);
  if (tree === null) {
    host.replaceChildren(el('div', { class: 'page' }, head, el('p', { class: 'muted', 'data-testid': 'notify-off' }, 'Notifications are not configured on this server: there is no routing tree.')));
    return;
  }
  const treeBox = el('ul', { class: 'rtree', 'data-testid': 'route-tree' }, treeNode(tree.route));
  const labels = el('textarea', { id: 'rt-labels', rows: '3', spellcheck: 'false', 'data-testid': 'rt-labels', placeholder: 'alertname=login-slow app=web severity=1', 'aria-describedby': 'rt-error' });
  const run = el('button', { type: 'submit', 'data-testid': 'rt-submit' }, 'Test');
  const err = el('p', { class: 'error', id: 'rt-error', 'data-testid': 'rt-error', role: 'alert' });
  const result = el('div', { 'data-testid': 'rt-result', 'aria-live': 'polite' });
  const form = el(
    'form',
    { class: 'reditor mwform rtform', 'aria-labelledby': 'h-rt' },
    el('h2', { id: 'h-rt' }, 'Test an alert'),
    el('label', { for: 'rt-labels' }, 'Labels of an example alert (name=value, separated by spaces or new lines)'),
    labels,
    err,
    el('div', { class: 'row' }, run),
    result,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    err.textContent = '';
    result.replaceChildren();
    labels.removeAttribute('aria-invalid');
    for (const n of treeBox.querySelectorAll('[data-hit]')) n.removeAttribute('data-hit');
    let l: Record<string, string>;
    try {
      l = parseLabels(labels.value);
    } catch (x) {
      err.textContent = (x as Error).message;
      labels.setAttribute('aria-invalid', 'true');
      return;
    }
    try {
      const t = await aapi.routeTest(l);
      const rows = t.receivers.map((d) =>
        el(
          'li',
          { 'data-testid': 'rt-receiver', 'data-receiver': d.receiver, 'data-route': d.route },
          el('strong', {}, d.receiver),
          ` via route ${d.route}, grouped by {${Object.entries(d.group_labels)
            .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
            .join(', ')}} (${timingText(d.timing)})`,
        ),
      );
      for (const d of t.receivers) treeBox.querySelector(`[data-route="${CSS.escape(d.route)}"]`)?.setAttribute('data-hit', 'true');
      const extra = [
        ...t.windows.map((w) => el('li', { 'data-testid': 'rt-window', 'data-name': w.name }, `in scope of maintenance window “${w.name}” (${w.active ? 'active now: muted' : 'not active now'})`)),
        ...t.inhibit.map((n) => el('li', {}, `a target of inhibit rule ${n} (muted while a matching source alert fires)`)),
      ];
      result.replaceChildren(el('h3', {}, 'Goes to'), el('ul', {}, ...rows), extra.length ? el('ul', { class: 'small' }, ...extra) : '');
    } catch (x) {
      err.textContent = (x as Error).message;
    }
  });
  host.replaceChildren(
    el(
      'div',
      { class: 'page routes-page' },
      head,
      el('div', { class: 'mwlayout' }, el('div', {}, el('section', { 'aria-labelledby': 'h-rt-tree' }, el('h2', { id: 'h-rt-tree' }, 'Routes'), treeBox), receiverList(tree.receivers)), form),
    ),
  );
}
