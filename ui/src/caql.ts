// The CAQL box: a textarea with completion of function names (the functions of
// crates/query/README.md) and stream names (inside find("…")), a working example built from a
// stream in the store, and parse errors shown at their position.
import * as api from './api';
import { el } from './charts';

export interface Fn {
  name: string;
  /** Arguments as the README writes them, '' for none. */
  args: string;
  doc: string;
}

const OPS = ['eq', 'ne', 'gt', 'geq', 'lt', 'leq'];

function fam(pkg: string, names: string[], args: string, doc: string): Fn[] {
  return names.map((n) => {
    const m = /^(\w+)(\(.*\))?$/.exec(n);
    return { name: `${pkg}:${m?.[1] ?? n}`, args: m?.[2] ?? args, doc };
  });
}

/** Every function of the language, as documented in crates/query/README.md (a test compares). */
export const FUNCTIONS: Fn[] = [
  { name: 'find', args: '(name_glob[, tag_query], limit=n)', doc: 'numeric streams, mean per period' },
  ...fam('find', ['count', 'sum', 'min', 'max', 'first', 'last', 'stddev', 'counter', 'derivative'], '(name_glob[, tag_query])', 'numeric streams, this aggregate per period'),
  { name: 'find:histogram', args: '(name_glob[, tag_query])', doc: 'histogram streams, one merged histogram per period' },
  { name: 'find:histogram_cum', args: '(name_glob[, tag_query])', doc: 'cumulative histogram streams, per period' },
  ...fam('metric', ['average', 'count', 'sum', 'min', 'max', 'first', 'last', 'stddev', 'counter', 'derivative', 'histogram'], '(check, name)', 'a stream of the check (tag __check)'),
  { name: 'VIEW_RANGE', args: '', doc: 'the range in seconds' },
  { name: 'VIEW_PERIOD', args: '', doc: 'the period in seconds' },
  { name: 'histogram', args: '(){…}', doc: 'histograms from numeric sources' },
  ...fam('histogram', ['count', 'rate', 'mean', 'median', 'min', 'max', 'stddev', 'sum', 'IQR', 'merge', 'subtract', 'create'], '', 'per period of a histogram stream'),
  ...fam(
    'histogram',
    ['percentile(p…)', 'inverse_percentile(t…)', 'count_above(t)', 'count_below(t)', 'count_between(a, b)', 'count_bin(t)', 'ratio_above(t)', 'ratio_below(t)', 'ratio_between(a, b)', 'rate_above(t)', 'rate_below(t)'],
    '',
    'per period of a histogram stream',
  ),
  ...fam('window', ['sum', 'mean', 'min', 'max', 'count', 'first', 'last', 'stddev', 'merge'], '(d)', 'tumbling windows aligned to multiples of d'),
  ...fam('window', ['percentile(d, p)', 'inverse_percentile(d, t)'], '', 'tumbling windows aligned to multiples of d'),
  ...fam('rolling', ['sum', 'mean', 'min', 'max', 'count', 'first', 'last', 'stddev', 'merge'], '(d)', 'the last d, at every period'),
  ...fam('rolling', ['percentile(d, p)', 'inverse_percentile(d, t)'], '', 'the last d, at every period'),
  ...fam('stats', ['sum', 'mean', 'min', 'max', 'prod', 'count', 'stddev', 'sub', 'div'], '', 'across streams, per period'),
  { name: 'stats:percentile', args: '(p)', doc: 'across streams, per period' },
  ...fam('op', ['sum', 'add', 'sub', 'prod', 'mul', 'div', 'mod', 'exp', 'pow', 'eq', 'ne', 'gt', 'geq', 'lt', 'leq', 'and', 'or', 'not'], '', 'strict: null anywhere gives null'),
  { name: 'coalesce', args: '', doc: 'the first present value' },
  { name: 'if', args: '{cond, a, b}', doc: 'a where cond, else b' },
  ...fam('each', ['add', 'sub', 'mul', 'div', 'mod', 'pow', 'eq', 'ne', 'gt', 'geq', 'lt', 'leq', 'min', 'max'], '(x)', 'each value with x'),
  ...fam('math', ['abs', 'exp', 'ln', 'log', 'log2', 'log10', 'floor', 'ceil', 'round', 'sqrt', 'sin', 'cos', 'tan', 'neg'], '', 'per value'),
  ...fam('math', ['pow(x)', 'min(x)', 'max(x)'], '', 'per value'),
  { name: 'integrate', args: '', doc: 'running Σ value × period seconds' },
  { name: 'derivative', args: '', doc: 'per second' },
  { name: 'counter', args: '', doc: 'per second, drops as resets' },
  { name: 'diff', args: '', doc: 'change from the previous period' },
  { name: 'delay', args: '(d)', doc: 'the value d ago' },
  { name: 'fill', args: '(v)', doc: 'nulls become v' },
  { name: 'fill:forward', args: '', doc: 'nulls become the last value' },
  { name: 'top', args: '(k)', doc: 'the k streams with the highest mean' },
  { name: 'bottom', args: '(k)', doc: 'the k streams with the lowest mean' },
  ...fam('group_by', ['sum', 'mean', 'min', 'max', 'count', 'merge'], '(tag…)', 'streams grouped by tag values'),
  { name: 'label', args: '(fmt)', doc: 'names the streams: %n name, %cn with tags, %tv{cat}' },
  { name: 'tag:add', args: '(cat, val)', doc: 'adds a tag' },
  { name: 'tag:remove', args: '(cat)', doc: 'removes a tag' },
  ...OPS.map((op) => ({ name: `filter:values:${op}`, args: '(x)', doc: 'nulls the values that fail' })),
  ...['any', 'all', 'mean', 'min', 'max', 'sum', 'count', 'last'].flatMap((agg) =>
    OPS.map((op) => ({ name: `filter:${agg}:${op}`, args: '(x)', doc: `keeps the streams whose ${agg} passes` })),
  ),
  { name: 'forecasting:regression', args: '(d)', doc: 'least squares over the trailing d' },
  { name: 'forecasting:slope', args: '(d)', doc: 'slope per second over the trailing d' },
  { name: 'forecasting:ewma', args: '(alpha)', doc: 'exponentially weighted moving average' },
  { name: 'forecasting:holt_winters', args: '(alpha, beta, gamma, period=d)', doc: 'one-step-ahead forecast' },
];

export const PLACEHOLDER = 'e.g. find:histogram("api_latency") | histogram:percentile(99)\nCtrl+Enter runs';

/** Most completions listed at once. */
const SUGGEST_MAX = 12;

interface Completion {
  /** What replaces [from, to) of the text. */
  insert: string;
  from: number;
  to: number;
  label: string;
  detail: string;
}

/** A byte offset of UTF-8 `text` → a UTF-16 index (the server counts bytes). */
export function byteToIndex(text: string, byte: number): number {
  const enc = new TextEncoder();
  let b = 0;
  let i = 0;
  for (const ch of text) {
    if (b >= byte) break;
    b += enc.encode(ch).length;
    i += ch.length;
  }
  return i;
}

export interface CaqlEditor {
  root: HTMLElement;
  textarea: HTMLTextAreaElement;
  value(): string;
  setValue(v: string): void;
  /** Shows an error (a parse error at its line and column), or clears it. */
  setError(e: Error | null): void;
}

export function caqlEditor(onRun: (query: string) => void): CaqlEditor {
  const textarea = el('textarea', {
    id: 'caql',
    rows: '4',
    spellcheck: 'false',
    placeholder: PLACEHOLDER,
    'aria-autocomplete': 'list',
    'aria-controls': 'caql-suggest',
    'aria-describedby': 'caql-help',
  });
  const label = el('label', { for: 'caql', class: 'sr-only' }, 'CAQL query');
  const list = el('ul', { id: 'caql-suggest', role: 'listbox', class: 'suggest caql-suggest', 'aria-label': 'completions' });
  const run = el('button', { type: 'button', id: 'caql-run' }, 'Run');
  const example = el('button', { type: 'button', id: 'caql-example' }, 'Example');
  const help = el('p', { id: 'caql-help', class: 'muted small' }, 'Type a function or a stream name inside find("…") for completions; Tab or Enter takes one, Ctrl+Enter runs.');
  const errBox = el('div', { id: 'caql-error-box', role: 'alert', class: 'caql-error' });
  const root = el('div', { class: 'caql' }, label, el('div', { class: 'caql-input' }, textarea, list), el('div', { class: 'row' }, run, example), help, errBox);

  let items: Completion[] = [];
  let active = -1;
  let seq = 0;

  function close(): void {
    items = [];
    active = -1;
    render();
  }

  function render(): void {
    list.replaceChildren(
      ...items.map((c, i) => {
        const li = el('li', { role: 'option', id: `caql-opt-${i}`, 'aria-selected': String(i === active), class: i === active ? 'active' : '', 'data-insert': c.insert }, el('code', {}, c.label), ' ', el('span', { class: 'muted' }, c.detail));
        li.addEventListener('mousedown', (e) => {
          e.preventDefault();
          accept(i);
        });
        return li;
      }),
    );
    if (active >= 0) textarea.setAttribute('aria-activedescendant', `caql-opt-${active}`);
    else textarea.removeAttribute('aria-activedescendant');
  }

  function accept(i: number): void {
    const c = items[i];
    if (!c) return;
    const v = textarea.value;
    textarea.value = v.slice(0, c.from) + c.insert + v.slice(c.to);
    const caret = c.from + c.insert.length - (c.insert.endsWith('()') ? 1 : 0);
    textarea.setSelectionRange(caret, caret);
    close();
    textarea.focus();
  }

  async function complete(): Promise<void> {
    const my = ++seq;
    const pos = textarea.selectionStart ?? 0;
    const before = textarea.value.slice(0, pos);
    // Inside the first string argument of find…( or metric:…(: stream names.
    const str = /\b(find(?::\w+)?)\(\s*(["'])([^"'\\]*)$/.exec(before);
    if (str) {
      const [, fn, quote, partial] = str;
      const kind = fn === 'find:histogram' || fn === 'find:histogram_cum' ? 'histogram' : fn === 'find' || fn.startsWith('find:') ? 'numeric' : '';
      const q = `and(__name:${partial.replace(/[^\w.*-]/g, '')}*${kind ? `,__type:${kind}` : ''})`;
      try {
        const found = await api.find(q, 30, 'recent');
        if (my !== seq) return;
        const names = [...new Set(found.map((s) => s.name))].slice(0, SUGGEST_MAX);
        const after = textarea.value.slice(pos);
        const close_ = after.startsWith(quote) ? '' : `${quote})`;
        items = names.map((n) => ({ insert: n + close_, from: pos - partial.length, to: pos, label: n, detail: kind ? `${kind} stream` : 'stream' }));
      } catch {
        items = [];
      }
      active = items.length ? 0 : -1;
      render();
      return;
    }
    const word = /[A-Za-z_][\w:]*$/.exec(before);
    if (!word || word[0].length < 1) {
      close();
      return;
    }
    const w = word[0];
    const lw = w.toLowerCase();
    const matches = FUNCTIONS.filter((f) => f.name.toLowerCase().startsWith(lw) && f.name !== w).slice(0, SUGGEST_MAX);
    items = matches.map((f) => ({
      insert: f.args === '' || f.args.startsWith('{') ? f.name : `${f.name}()`,
      from: pos - w.length,
      to: pos,
      label: `${f.name}${f.args}`,
      detail: f.doc,
    }));
    active = items.length ? 0 : -1;
    render();
  }

  textarea.addEventListener('input', () => {
    errBox.replaceChildren();
    textarea.removeAttribute('aria-invalid');
    void complete();
  });
  textarea.addEventListener('blur', () => setTimeout(close, 150));
  textarea.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      close();
      onRun(textarea.value.trim());
      return;
    }
    if (items.length === 0) return;
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      active = (active + (e.key === 'ArrowDown' ? 1 : items.length - 1)) % items.length;
      render();
      e.preventDefault();
    } else if ((e.key === 'Enter' || e.key === 'Tab') && active >= 0) {
      e.preventDefault();
      accept(active);
    } else if (e.key === 'Escape') {
      e.preventDefault();
      close();
    }
  });
  run.addEventListener('click', () => onRun(textarea.value.trim()));
  example.addEventListener('click', async () => {
    textarea.value = await exampleQuery();
    errBox.replaceChildren();
    onRun(textarea.value);
  });

  function setError(e: Error | null): void {
    if (!e) {
      errBox.replaceChildren();
      textarea.removeAttribute('aria-invalid');
      return;
    }
    textarea.setAttribute('aria-invalid', 'true');
    const body = e instanceof api.ApiError ? e.body : {};
    const text = textarea.value;
    if (typeof body.position === 'number' && typeof body.line === 'number') {
      const idx = byteToIndex(text, body.position);
      const lineStart = text.lastIndexOf('\n', idx - 1) + 1;
      const lineEnd = text.indexOf('\n', idx);
      const line = text.slice(lineStart, lineEnd < 0 ? undefined : lineEnd);
      const col = idx - lineStart;
      const caret = `${' '.repeat(col)}^`;
      errBox.replaceChildren(
        el('p', { class: 'error', 'data-testid': 'caql-error' }, `Line ${body.line}, column ${col + 1}: expected ${String(body.expected ?? '?')}, found ${String(body.found ?? '?')}`),
        el('pre', { class: 'caret', 'data-testid': 'caql-caret', 'data-column': String(col + 1) }, `${line}\n${caret}`),
      );
      textarea.setSelectionRange(idx, Math.min(text.length, idx + 1));
    } else {
      errBox.replaceChildren(el('p', { class: 'error', 'data-testid': 'caql-error' }, e.message));
    }
  }

  return {
    root,
    textarea,
    value: () => textarea.value,
    setValue: (v) => {
      textarea.value = v;
    },
    setError,
  };
}

/** A query that works on this server: the percentiles of its most recently written histogram. */
export async function exampleQuery(): Promise<string> {
  try {
    const hs = await api.find('__type:histogram', 20, 'recent');
    const mine = hs.find((s) => !s.tags.includes('strata:self')) ?? hs[0];
    if (mine) return `find:histogram("${mine.name.replace(/["\\]/g, '\\$&')}") | histogram:percentile(50, 90, 99)`;
    const ns = await api.find('__type:numeric', 1, 'recent');
    if (ns[0]) return `find("${ns[0].name.replace(/["\\]/g, '\\$&')}")`;
  } catch {
    // Fall through to the documentation's example.
  }
  return 'find:histogram("api_latency") | histogram:percentile(99)';
}
