// The rule editor: the rulesets (file-provisioned ones read-only), a TOML editor, "Backtest"
// (the transitions the ruleset would have made over the chosen range, graphed with its
// thresholds) before "Save", and the server's validation errors shown at their line and column.
import './alerts.css';
import * as aapi from './alertapi';
import { ApiError } from './api';
import { firingIntervals, ruleGraph } from './alerts';
import { el, type Ctx } from './charts';
import { fmtTimeZ, fmtValue, tzSuffix } from './format';
import type { State, View } from './state';

export interface RuleHooks {
  go(v: View, extra?: Partial<State>): void;
  cur(): boolean;
  keep(cleanup: () => void): void;
  status(text: string): void;
  setUrl(): void;
}

/** Transitions listed under a backtest. */
const BACKTEST_ROWS_MAX = 500;

const TEMPLATE = `[[ruleset]]
name = "login-slow"
expr = 'find:histogram("login")'
window = "rolling:merge(5m)"
annotations = { summary = "{{ count_above(1.5) }} people ({{ ratio_above(1.5) | percent }}) waited more than 1.5 s to log in" }

[[ruleset.severity]]
level = 1
when = "count_above(1.5) >= 500"
clear = "count_above(1.5) < 400"

[[ruleset.severity]]
level = 3
when = "count_above(1.5) >= 100"
`;

/** The `name = "…"` of the TOML text (the ruleset is saved under it). */
export function nameOf(text: string): string | null {
  const m = /^\s*name\s*=\s*["']([^"']*)["']/m.exec(text);
  return m ? m[1] : null;
}

/** The 0-based character offset of a 1-based line and column. */
function offsetOf(text: string, line: number, column: number): number {
  const lines = text.split('\n');
  let off = 0;
  for (let i = 0; i < Math.min(line - 1, lines.length); i++) off += lines[i].length + 1;
  return Math.min(text.length, off + Math.max(0, column - 1));
}

export async function renderRules(host: HTMLElement, ctx: Ctx, hooks: RuleHooks): Promise<void> {
  const infos = await aapi.rules();
  if (!hooks.cur()) return;
  const listBox = el('ul', { class: 'rlist', 'data-testid': 'rule-list' });
  const newBtn = el('button', { type: 'button', 'data-testid': 'rule-new' }, 'New ruleset');
  const alertsBtn = el('button', { type: 'button' }, 'Alerts');
  alertsBtn.addEventListener('click', () => hooks.go('alerts'));
  const area = el('textarea', { id: 'rule-text', class: 'rtext', rows: '18', spellcheck: 'false', 'data-testid': 'rule-text', 'aria-describedby': 'rule-error rule-source' });
  const source = el('p', { id: 'rule-source', class: 'muted small', 'data-testid': 'rule-source' });
  const errorBox = el('div', { id: 'rule-error', class: 'rerror', 'data-testid': 'rule-error', role: 'alert' });
  const backtestBtn = el('button', { type: 'button', 'data-testid': 'rule-backtest' }, 'Backtest');
  const saveBtn = el('button', { type: 'button', 'data-testid': 'rule-save' }, 'Save');
  const deleteBtn = el('button', { type: 'button', 'data-testid': 'rule-delete' }, 'Delete');
  const rangeNote = el('span', { class: 'muted small' });
  const result = el('section', { class: 'rresult', 'data-testid': 'backtest', 'aria-label': 'backtest result', 'aria-live': 'polite' });
  const editor = el(
    'section',
    { class: 'reditor', 'aria-labelledby': 'h-rule-edit' },
    el('h2', { id: 'h-rule-edit' }, 'Ruleset (TOML)'),
    source,
    el('label', { for: 'rule-text', class: 'sr-only' }, 'ruleset definition in TOML'),
    area,
    errorBox,
    el('div', { class: 'row' }, backtestBtn, saveBtn, deleteBtn, rangeNote),
    result,
  );
  host.replaceChildren(
    el(
      'div',
      { class: 'page rules-page' },
      el('div', { class: 'dhead' }, el('h1', {}, 'Rules'), newBtn, alertsBtn),
      el('div', { class: 'rlayout' }, el('section', { 'aria-labelledby': 'h-rules' }, el('h2', { id: 'h-rules' }, 'Rulesets'), listBox), editor),
    ),
  );
  let cleanup = () => {};
  hooks.keep(() => cleanup());
  let readOnly = false;
  let selected: aapi.RuleInfo | undefined;

  const renderList = (list: aapi.RuleInfo[]) => {
    listBox.replaceChildren(
      ...list.map((r) => {
        const b = el('button', { type: 'button', class: 'link', 'data-testid': 'rule-open', 'data-name': r.name, 'aria-current': String(r.name === ctx.state.rule) }, r.name);
        b.addEventListener('click', () => open(r.name));
        return el(
          'li',
          { 'data-testid': 'rule-item', 'data-name': r.name, 'data-read-only': String(r.read_only) },
          b,
          ' ',
          el('span', { class: `astate ${r.health === 'ok' ? 'st-ok' : r.health === 'error' ? 'st-error' : 'st-unknown'}` }, r.health),
          r.read_only ? el('span', { class: 'chip' }, 'read-only') : '',
          el('span', { class: 'muted small' }, ` ${r.source}${r.streams !== null ? ` · ${r.streams} stream${r.streams === 1 ? '' : 's'}` : ''}`),
        );
      }),
    );
    if (list.length === 0) listBox.replaceChildren(el('li', { class: 'muted' }, 'No ruleset yet.'));
  };

  const setError = (e: Error | null, text = area.value) => {
    area.removeAttribute('aria-invalid');
    if (!e) {
      errorBox.replaceChildren();
      return;
    }
    const body = e instanceof ApiError ? e.body : {};
    const line = typeof body.line === 'number' ? body.line : undefined;
    const column = typeof body.column === 'number' ? body.column : undefined;
    const kids: Array<Node | string> = [el('p', { class: 'error', 'data-testid': 'rule-error-message' }, line !== undefined ? `Line ${line}, column ${column}: ${e.message}` : e.message)];
    if (line !== undefined && column !== undefined) {
      const src = text.split('\n')[line - 1] ?? '';
      kids.push(el('pre', { class: 'caret', 'data-testid': 'rule-error-caret', 'data-line': String(line), 'data-column': String(column) }, `${line} | ${src}\n${' '.repeat(String(line).length)} | ${' '.repeat(Math.max(0, column - 1))}^`));
      const at = offsetOf(text, line, column);
      area.setAttribute('aria-invalid', 'true');
      area.focus();
      area.setSelectionRange(at, Math.max(at, text.indexOf('\n', at) === -1 ? text.length : text.indexOf('\n', at)));
    }
    errorBox.replaceChildren(...kids);
  };

  const show = (info: aapi.RuleInfo | undefined) => {
    selected = info;
    readOnly = info?.read_only ?? false;
    area.value = info?.definition ?? TEMPLATE;
    area.readOnly = readOnly;
    saveBtn.disabled = readOnly;
    deleteBtn.disabled = readOnly || !info;
    source.textContent = info
      ? readOnly
        ? `From ${info.source}: read-only here (edit the file). A backtest still runs.`
        : `Saved through the API (${info.source}); health ${info.health}${info.error ? `: ${info.error}` : ''}.`
      : 'A new ruleset: backtest it, then save it.';
    area.dataset.readOnly = String(readOnly);
    setError(null);
    cleanup();
    cleanup = () => {};
    result.replaceChildren();
  };

  const open = (name: string | undefined) => {
    ctx.state.rule = name;
    hooks.setUrl();
    show(name ? infos.find((r) => r.name === name) : undefined);
    renderList(infos);
  };

  const runBacktest = async () => {
    const text = area.value;
    result.dataset.ready = 'false';
    cleanup();
    cleanup = () => {};
    const startMs = ctx.startS * 1000;
    const endMs = ctx.endS * 1000;
    rangeNote.textContent = `over ${fmtTimeZ(startMs)} → ${fmtTimeZ(endMs)} (the range above)`;
    try {
      const b = await aapi.backtest(text, ctx.startS, ctx.endS);
      setError(null);
      const into = Object.entries(b.into)
        .map(([k, v]) => `${v} into ${k}`)
        .join(', ');
      const kids: Array<Node | string> = [el('h3', {}, 'Backtest'), el('p', { 'data-testid': 'backtest-summary', 'data-count': String(b.transitions.length) }, b.transitions.length ? `${b.transitions.length} transition${b.transitions.length === 1 ? '' : 's'}: ${into}.` : 'No transition over this range: the ruleset would have stayed quiet.')];
      const graphHost = el('div', { class: 'rghost' });
      kids.push(graphHost);
      if (b.transitions.length) {
        const zone = tzSuffix(b.transitions[0].t);
        const tbody = el('tbody');
        for (const t of [...b.transitions].sort((x, y) => x.t - y.t).slice(0, BACKTEST_ROWS_MAX)) {
          tbody.append(
            el(
              'tr',
              { 'data-testid': 'backtest-row', 'data-to': t.state, 'data-from': t.from, 'data-t': String(t.t) },
              el('td', {}, fmtTimeZ(t.t).replace(/ UTC.*$/, '')),
              el('td', {}, t.rule),
              el('td', { class: 'small' }, t.stream || '(ruleset)'),
              el('td', {}, `${t.from} → `, el('strong', {}, t.state)),
              el('td', {}, t.severity ? String(t.severity) : '–'),
              el('td', {}, t.value === null ? '–' : fmtValue(t.value)),
              el('td', { class: 'small' }, t.annotations.summary ?? ''),
            ),
          );
        }
        kids.push(
          el(
            'table',
            { class: 'changes', 'data-testid': 'backtest-table' },
            el('thead', {}, el('tr', {}, ...[`period end (${zone})`, 'ruleset', 'stream', 'transition', 'severity', 'value', 'annotation'].map((h) => el('th', { scope: 'col' }, h)))),
            tbody,
          ),
        );
      }
      result.replaceChildren(...kids);
      const spec = b.rulesets?.[0];
      if (spec?.expr) {
        cleanup = await ruleGraph(graphHost, { expr: spec.expr, levels: spec.severity, shaded: firingIntervals(b.transitions, endMs) }, ctx);
      }
    } catch (e) {
      setError(e as Error, text);
      result.replaceChildren();
    }
    result.dataset.ready = 'true';
  };

  const save = async () => {
    const text = area.value;
    const name = nameOf(text);
    if (!name) {
      setError(new Error('the ruleset needs a name = "…" line'));
      return;
    }
    try {
      const saved = await aapi.saveRule(name, text);
      setError(null);
      const i = infos.findIndex((r) => r.name === name);
      if (i >= 0) infos[i] = saved;
      else infos.push(saved);
      infos.sort((a, b) => a.name.localeCompare(b.name));
      hooks.status(`Saved ruleset “${name}”.`);
      open(name);
    } catch (e) {
      setError(e as Error, text);
    }
  };

  backtestBtn.addEventListener('click', () => void runBacktest());
  saveBtn.addEventListener('click', () => void save());
  deleteBtn.addEventListener('click', async () => {
    if (!selected || readOnly || !confirm(`Delete ruleset “${selected.name}”? Its alerts are forgotten.`)) return;
    try {
      await aapi.deleteRule(selected.name);
      infos.splice(infos.indexOf(selected), 1);
      hooks.status(`Deleted ruleset “${selected.name}”.`);
      open(undefined);
    } catch (e) {
      setError(e as Error);
    }
  });
  newBtn.addEventListener('click', () => open(undefined));
  area.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      void runBacktest();
    }
  });
  open(ctx.state.rule && infos.some((r) => r.name === ctx.state.rule) ? ctx.state.rule : undefined);
}
