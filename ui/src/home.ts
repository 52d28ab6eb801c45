// The landing page: what is in the store (the user's streams by recent activity, self-monitoring
// apart), the server's health, firing alerts when the server has alerting, saved dashboards and
// worksheets, and getting-started snippets with this server's own addresses.
import * as api from './api';
import { el } from './charts';
import { ago, duration, fmtCount, fmtTimeZ, isSelf, streamLabel } from './format';
import type { State, View } from './state';

export interface HomeHooks {
  open(s: api.SeriesInfo): void;
  openWorksheet(id: string): void;
  go(v: View, extra?: Partial<State>): void;
  cur(): boolean;
  keep(cleanup: () => void): void;
}

/** Streams listed on the landing page, per group. */
const STREAMS_SHOWN = 20;

function streamItem(s: api.SeriesInfo, open: (s: api.SeriesInfo) => void, now: number): HTMLElement {
  const b = el('button', { type: 'button', class: 'link', 'data-testid': 'home-stream', 'data-key': s.key }, streamLabel(s.name, s.tags));
  b.addEventListener('click', () => open(s));
  const last = s.activity_ms ? el('span', { class: 'muted small', title: fmtTimeZ(s.activity_ms[1]) }, `last write ${ago(s.activity_ms[1], now)}`) : el('span', { class: 'muted small' }, 'no data yet');
  return el('li', {}, el('span', { class: `kind kind-${s.kind}` }, s.kind), ' ', b, ' ', last);
}

/** The host part of a listener address for a snippet: the browser's host when it listened on all
 * interfaces, so what is shown works from here. */
function hostPort(addr: string | null): { host: string; port: string } | null {
  if (!addr || addr === 'off') return null;
  const i = addr.lastIndexOf(':');
  if (i < 0) return null;
  let host = addr.slice(0, i).replace(/^\[|\]$/g, '');
  const port = addr.slice(i + 1);
  if (host === '0.0.0.0' || host === '::') host = location.hostname;
  return { host, port };
}

interface Snippet {
  id: string;
  title: string;
  lang: string;
  text: string;
  note?: string;
  /** Runs in bash as it is (the tests run these). */
  runnable: boolean;
}

export function snippets(o: api.Overview): Snippet[] {
  const origin = location.origin;
  const auth = o.auth ? ` \\\n  -H "Authorization: Bearer $STRATA_TOKEN"` : '';
  const out: Snippet[] = [
    {
      id: 'httptrap',
      title: 'httptrap (JSON, Circonus-compatible)',
      lang: 'sh',
      text: `curl -X PUT ${origin}/module/httptrap/web/any-secret${auth} \\\n  -d '{"login_latency|ST[app:web]": {"_type": "h", "_value": ["H[1.2e-01]=40", "H[1.6e+00]=3"]}}'`,
      note: 'A histogram of 43 logins: 40 near 120 ms, 3 near 1.6 s. `_type` n is a number, s text.',
      runnable: true,
    },
  ];
  const statsd = hostPort(o.listeners.statsd);
  out.push(
    statsd
      ? {
          id: 'statsd',
          title: 'statsd (UDP)',
          lang: 'sh',
          text: `echo "deploys:1|c" > /dev/udp/${statsd.host}/${statsd.port}\necho "checkout_time:320|ms" > /dev/udp/${statsd.host}/${statsd.port}`,
          note: 'In bash (or nc -u). Timings (ms, h, d) become histograms; values are stored as sent.',
          runnable: true,
        }
      : { id: 'statsd', title: 'statsd (UDP)', lang: 'sh', text: '# statsd is off on this server (strata serve --statsd 127.0.0.1:8125 turns it on)', runnable: false },
  );
  const graphite = hostPort(o.listeners.graphite);
  out.push(
    graphite
      ? {
          id: 'graphite',
          title: 'Graphite plaintext (TCP)',
          lang: 'sh',
          text: `echo "servers.web1.cpu 42 $(date +%s)" > /dev/tcp/${graphite.host}/${graphite.port}`,
          note: 'In bash (or nc).',
          runnable: true,
        }
      : { id: 'graphite', title: 'Graphite plaintext (TCP)', lang: 'sh', text: '# Graphite is off on this server (strata serve --graphite 127.0.0.1:2003 turns it on)', runnable: false },
  );
  out.push(
    {
      id: 'influx',
      title: 'Influx line protocol',
      lang: 'sh',
      text: `curl -X POST ${origin}/api/v2/write${auth} \\\n  --data-binary 'cpu,host=web1 usage=42'`,
      note: 'Stored as cpu_usage with the tag host:web1.',
      runnable: true,
    },
    {
      id: 'remote_write',
      title: 'Prometheus remote_write (prometheus.yml)',
      lang: 'yaml',
      text: `remote_write:\n  - url: ${origin}/api/v1/write${o.auth ? '\n    authorization:\n      credentials: <auth.token>' : ''}`,
      note: 'Native histograms arrive as log-linear histograms; classic ones are converted.',
      runnable: false,
    },
    {
      id: 'otlp',
      title: 'OpenTelemetry (OTLP/HTTP)',
      lang: 'sh',
      text: `curl -X POST ${origin}/v1/metrics${auth} \\\n  -H 'content-type: application/json' \\\n  -d '{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"queue_depth","gauge":{"dataPoints":[{"asDouble":7}]}}]}]}]}'`,
      note: `An OpenTelemetry Collector sends here with the otlphttp exporter, endpoint ${origin}.`,
      runnable: true,
    },
    {
      id: 'grafana',
      title: 'Grafana (read)',
      lang: 'text',
      text: `Add a Prometheus data source with URL ${origin}`,
      note: 'Histograms come back as native histograms for the heatmap panel.',
      runnable: false,
    },
  );
  return out;
}

function snippetCard(s: Snippet): HTMLElement {
  const code = el('code', { 'data-testid': `snippet-${s.id}`, 'data-runnable': String(s.runnable) }, s.text);
  const copy = el('button', { type: 'button', class: 'copy', 'aria-label': `copy the ${s.title} example` }, 'Copy');
  copy.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(s.text);
      copy.textContent = 'Copied';
    } catch {
      const r = document.createRange();
      r.selectNodeContents(code);
      getSelection()?.removeAllRanges();
      getSelection()?.addRange(r);
      copy.textContent = 'Selected';
    }
    setTimeout(() => (copy.textContent = 'Copy'), 1500);
  });
  return el('div', { class: 'snippet' }, el('div', { class: 'shead' }, el('h3', {}, s.title), copy), el('pre', { tabindex: '0' }, code), s.note ? el('p', { class: 'muted small' }, s.note) : '');
}

function healthCard(o: api.Overview): HTMLElement {
  const reqs = o.requests;
  const problems: string[] = [];
  if (o.store.write_errors > 0) problems.push(`${o.store.write_errors} store write errors`);
  if (o.store.quarantined > 0) problems.push(`${o.store.quarantined} damaged blocks quarantined`);
  if ((reqs['5xx'] ?? 0) > 0) problems.push(`${reqs['5xx']} server errors (5xx)`);
  const ok = problems.length === 0;
  const dl = el('dl', { class: 'stats wide', 'data-testid': 'health' });
  const row = (k: string, v: string, id?: string) => dl.append(el('dt', {}, k), el('dd', id ? { 'data-testid': id } : {}, v));
  row('status', ok ? 'OK' : `attention: ${problems.join(', ')}`, 'health-status');
  row('version', o.version);
  row('up for', duration((o.now_ms - o.started_ms) / 1000));
  row('samples accepted', fmtCount(o.ingest.accepted), 'health-accepted');
  row('samples rejected', fmtCount(o.ingest.rejected), 'health-rejected');
  row('requests', `${fmtCount(reqs['2xx'] ?? 0)} ok · ${fmtCount(reqs['4xx'] ?? 0)} refused (4xx) · ${fmtCount(reqs['5xx'] ?? 0)} failed (5xx)`);
  row('in memory', `${fmtCount(o.store.head_samples)} samples`);
  row('on disk', `${fmtCount(o.store.blocks)} blocks, ${fmtCount(o.store.block_bytes)} bytes`);
  row('listening', [`http ${o.listeners.http ?? 'off'}${o.listeners.tls ? ' (TLS)' : ''}`, `statsd ${o.listeners.statsd ?? 'off'}`, `graphite ${o.listeners.graphite ?? 'off'}`].join(' · '));
  return el(
    'section',
    { class: 'card', 'aria-labelledby': 'h-health' },
    el('h2', { id: 'h-health' }, el('span', { class: ok ? 'dot ok' : 'dot bad', 'aria-hidden': 'true' }), ' Server health'),
    dl,
    el('p', { class: 'muted small' }, 'Counts since the server started. Everything is also at ', el('a', { href: '/metrics' }, '/metrics'), ' and in the self-monitoring streams.'),
  );
}

async function alertsCard(): Promise<HTMLElement> {
  const card = el('section', { class: 'card', 'aria-labelledby': 'h-alerts', 'data-testid': 'home-alerts' }, el('h2', { id: 'h-alerts' }, 'Alerts'));
  try {
    const firing = await api.firingAlerts();
    if (firing === null) {
      card.append(el('p', { class: 'muted' }, 'Alerting is not available on this server yet.'));
    } else if (firing.length === 0) {
      card.append(el('p', {}, el('span', { class: 'dot ok', 'aria-hidden': 'true' }), ' No alert is firing.'));
    } else {
      card.append(alertList(firing));
    }
  } catch (e) {
    card.append(el('p', { class: 'error' }, `Alerts: ${(e as Error).message}`));
  }
  return card;
}

/** Firing alerts as a list: rule, severity, since when, value and summary. */
export function alertList(firing: api.AlertInstance[]): HTMLElement {
  const pairs = (p: api.AlertInstance['annotations']): Record<string, string> => (Array.isArray(p) ? Object.fromEntries(p) : p ?? {});
  return el(
    'ul',
    { class: 'alerts', 'data-testid': 'alert-list' },
    ...firing.map((a) => {
      const ann = pairs(a.annotations);
      return el(
        'li',
        { class: `sev sev-${a.severity}` },
        el('strong', {}, a.rule),
        ` · severity ${a.severity} · since ${fmtTimeZ(a.since)}`,
        a.value !== null && a.value !== undefined ? ` · value ${fmtCount(a.value)}` : '',
        ann.summary ? el('div', { class: 'small' }, ann.summary) : '',
      );
    }),
  );
}

/** Hosts whose agent reports, each with its worksheet — made on a click when it is not saved yet
 * (the one `strata install agent` would have made). */
function hostsCard(o: api.Overview, hooks: HomeHooks): HTMLElement | null {
  if (!o.hosts?.length) return null;
  const card = el('section', { class: 'card', 'aria-labelledby': 'h-hosts', 'data-testid': 'home-hosts' }, el('h2', { id: 'h-hosts' }, 'Hosts'));
  const list = el('ul', { class: 'plain' });
  for (const h of o.hosts) {
    const seen = h.last_ms === null ? '' : ` · seen ${ago(h.last_ms)}`;
    const button = el('button', { type: 'button', class: 'link', 'data-host': h.host }, h.worksheet ? 'Open its worksheet' : 'Make its worksheet');
    const status = el('span', { class: 'muted small', role: 'status' });
    button.addEventListener('click', async () => {
      if (h.worksheet) return hooks.openWorksheet(h.worksheet);
      if (!h.offer) return;
      button.setAttribute('disabled', '');
      try {
        const saved = await api.worksheets.save({ ...h.offer.body, id: h.offer.id });
        hooks.openWorksheet(saved.id ?? h.offer.id);
      } catch (e) {
        status.textContent = ` ${e instanceof Error ? e.message : String(e)}`;
        button.removeAttribute('disabled');
      }
    });
    list.append(el('li', {}, el('span', { class: 'kind' }, 'host'), ` ${h.host}${seen} · `, button, status));
  }
  card.append(list);
  return card;
}

async function savedCard(hooks: HomeHooks): Promise<HTMLElement> {
  const card = el('section', { class: 'card', 'aria-labelledby': 'h-saved' }, el('h2', { id: 'h-saved' }, 'Dashboards and worksheets'));
  const [dash, ws] = await Promise.all([api.dashboards.list().catch(() => []), api.worksheets.list().catch(() => [])]);
  const list = el('ul', { class: 'plain' });
  for (const d of dash.slice(0, 8)) {
    const a = el('a', { href: `?d=${encodeURIComponent(d.id)}` }, d.name);
    a.addEventListener('click', (e) => {
      e.preventDefault();
      hooks.go('dashboard', { dash: d.id });
    });
    list.append(el('li', {}, el('span', { class: 'kind' }, 'dashboard'), ' ', a, el('span', { class: 'muted small' }, ` · changed ${ago(d.updated_ms)}`)));
  }
  for (const w of ws.slice(0, 8)) {
    const b = el('button', { type: 'button', class: 'link' }, w.name);
    b.addEventListener('click', () => hooks.openWorksheet(w.id));
    list.append(el('li', {}, el('span', { class: 'kind' }, 'worksheet'), ' ', b, el('span', { class: 'muted small' }, ` · changed ${ago(w.updated_ms)}`)));
  }
  if (!dash.length && !ws.length) list.append(el('li', { class: 'muted' }, 'Nothing saved yet.'));
  const newDash = el('button', { type: 'button' }, 'All dashboards');
  newDash.addEventListener('click', () => hooks.go('dashboards'));
  card.append(list, newDash);
  return card;
}

export async function renderHome(host: HTMLElement, hooks: HomeHooks): Promise<void> {
  const o = await api.overview(STREAMS_SHOWN);
  if (!hooks.cur()) return;
  const now = o.now_ms;
  const mine = o.streams.filter((s) => !isSelf(s.tags));
  const userCount = o.series.total - o.series.self;
  const storeCard = el(
    'section',
    { class: 'card wide', 'aria-labelledby': 'h-store', 'data-testid': 'home-store' },
    el('h2', { id: 'h-store' }, 'In this store'),
    el(
      'p',
      { 'data-testid': 'home-counts' },
      `${fmtCount(userCount)} stream${userCount === 1 ? '' : 's'} of yours (${fmtCount(o.series.mine.histogram)} histogram, ${fmtCount(o.series.mine.numeric)} numeric, ${fmtCount(o.series.mine.text)} text) and ${fmtCount(o.series.self)} self-monitoring stream${o.series.self === 1 ? '' : 's'}.`,
    ),
  );
  if (mine.length === 0) {
    storeCard.append(el('p', { class: 'empty', 'data-testid': 'home-empty' }, 'Nothing written yet. Send your first samples with one of the examples below; they show up here within seconds.'));
  } else {
    storeCard.append(el('h3', {}, 'Your streams, most recent first'), el('ul', { class: 'streams', 'data-testid': 'home-mine' }, ...mine.map((s) => streamItem(s, hooks.open, now))));
    if (userCount > mine.length) storeCard.append(el('p', { class: 'muted small' }, `${fmtCount(userCount - mine.length)} more: use the search box above.`));
  }
  const selfList = el('details', { 'data-testid': 'home-self' }, el('summary', {}, `Self-monitoring: ${o.series.self} streams (tag strata:self) — the server's own request latency, batch sizes and store writes`), el('ul', { class: 'streams' }, ...o.self_streams.map((s) => streamItem(s, hooks.open, now))));
  storeCard.append(selfList);
  if (o.scan_truncated) storeCard.append(el('p', { class: 'muted small' }, `Activity ordering looked at the first ${fmtCount(o.scanned)} streams.`));

  const start = el(
    'section',
    { class: 'card wide', 'aria-labelledby': 'h-start', 'data-testid': 'home-start' },
    el('h2', { id: 'h-start' }, 'Send data'),
    el('p', { class: 'muted' }, 'Each example sends to this server as it is; paste one into a shell, then search for its name above.'),
    el('div', { class: 'snippets' }, ...snippets(o).map(snippetCard)),
  );
  const [alerts, saved] = await Promise.all([alertsCard(), savedCard(hooks)]);
  if (!hooks.cur()) return;
  const hosts = hostsCard(o, hooks);
  const more = hosts ? [hosts] : [];
  const cards = mine.length === 0 ? [start, storeCard, ...more, healthCard(o), alerts, saved] : [storeCard, ...more, healthCard(o), alerts, saved, start];
  host.replaceChildren(el('div', { class: 'home' }, el('h1', { class: 'sr-only' }, 'Strata overview'), ...cards));
}
