// Browser safety in headless Chromium, against two running `strata serve` (started by
// crates/server/tests/ui_browser.rs): one with a token (the UI's sign-in page) and one without
// (loopback, open: only the Origin, Sec-Fetch-Site and Host checks stand between it and a web
// page). Pages of other origins are served here by a small HTTP server of this script.
//
// Env: STRATA_TOKEN_URL, STRATA_TOKEN (the tokened server and its token), STRATA_OPEN_URL (the
// server without a token), FRIEND_PORT (http://localhost:FRIEND_PORT is in both servers'
// http.cors_origins), EVIL_PORT (http://127.0.0.1:EVIL_PORT is in neither), CHROMIUM.
// Prints one line per test and a closing `N passed, N failed`; exits 1 if anything failed.
import { chromium } from 'playwright-core';
import http from 'node:http';

const TOKEN_URL = process.env.STRATA_TOKEN_URL;
const TOKEN = process.env.STRATA_TOKEN;
const OPEN_URL = process.env.STRATA_OPEN_URL;
const FRIEND_PORT = Number(process.env.FRIEND_PORT);
const EVIL_PORT = Number(process.env.EVIL_PORT);
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const STEP_TIMEOUT_MS = 30_000;
/** The name a DNS-rebinding page gives the open server (mapped to 127.0.0.1 in Chromium). */
const REBOUND_HOST = 'rebound.example';
if (!TOKEN_URL || !TOKEN || !OPEN_URL || !FRIEND_PORT || !EVIL_PORT) {
  console.error('STRATA_TOKEN_URL, STRATA_TOKEN, STRATA_OPEN_URL, FRIEND_PORT and EVIL_PORT must be set');
  process.exit(2);
}

let passed = 0;
let failed = 0;
async function test(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e?.stack ?? e}`);
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}

/** What the store holds, asked from here (no Origin: a client, not a page). */
async function found(base, query, headers = {}) {
  const r = await fetch(`${base}/api/strata/v1/find?query=${encodeURIComponent(query)}`, { headers });
  assert(r.ok, `find ${query}: ${r.status}`);
  return r.json();
}
async function worksheets(base, headers = {}) {
  const r = await fetch(`${base}/api/strata/v1/worksheets`, { headers });
  assert(r.ok, `worksheets: ${r.status}`);
  return r.json();
}

// Pages of the other origins: a blank page on each port.
function pageServer(port) {
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>another site</title><p>another site</p>');
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}
const friendServer = await pageServer(FRIEND_PORT);
const evilServer = await pageServer(EVIL_PORT);

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-gpu', `--host-resolver-rules=MAP ${REBOUND_HOST} 127.0.0.1`],
});
const context = await browser.newContext();
const page = await context.newPage();
page.setDefaultTimeout(STEP_TIMEOUT_MS);

await test('sign in: the tokened server asks for its token, says a wrong one plainly, keeps a good one for the tab', async () => {
  const sent = [];
  page.on('request', (r) => {
    if (new URL(r.url()).pathname.startsWith('/api/')) sent.push(r.headers()['authorization'] ?? null);
  });
  await page.goto(`${TOKEN_URL}/`);
  await page.waitForSelector('#login');
  assert(await page.locator('#app').isHidden(), 'the UI stays hidden until signed in');
  await page.fill('#login-token', 'not-the-token');
  await page.click('#login-submit');
  await page.waitForFunction(() => document.getElementById('login-error')?.textContent?.length > 0);
  const said = await page.textContent('#login-error');
  assert(said.includes('not the one this server was given'), `wrong token message: ${said}`);
  await page.fill('#login-token', TOKEN);
  await page.click('#login-submit');
  await page.waitForSelector('#login', { state: 'detached' });
  await page.waitForSelector('#sign-out', { state: 'visible' });
  assert(await page.locator('#app').isVisible(), 'the UI is shown once signed in');
  // The landing page's own API calls carry the token.
  await page.waitForFunction(() => document.querySelector('#view')?.children.length > 0);
  await page.waitForTimeout(500);
  const after = sent.slice(sent.indexOf(`Bearer ${TOKEN}`));
  assert(after.length > 1, `no API call after signing in: ${JSON.stringify(sent)}`);
  assert(after.every((h) => h === `Bearer ${TOKEN}`), `API calls without the token: ${JSON.stringify(after)}`);
  assert((await page.evaluate(() => sessionStorage.getItem('strata.token'))) === TOKEN, 'token kept in sessionStorage');
  // A reload in the same tab stays signed in.
  await page.reload();
  await page.waitForSelector('#sign-out', { state: 'visible' });
  assert((await page.locator('#login').count()) === 0, 'asked again after a reload');
  // Signing out forgets the token and asks again.
  await page.click('#sign-out');
  await page.waitForSelector('#login');
  assert((await page.evaluate(() => sessionStorage.getItem('strata.token'))) === null, 'token forgotten');
});

await test('another origin: its page cannot write (Influx, httptrap, worksheets) or read', async () => {
  const ts = Date.now();
  await page.goto(`http://127.0.0.1:${EVIL_PORT}/`);
  const outcome = await page.evaluate(
    async ({ base, ts }) => {
      const posts = [
        ['/write?precision=ms', `evil_influx v=1 ${ts}`],
        ['/api/v2/write?precision=ms', `evil_influx2 v=1 ${ts}`],
        ['/module/httptrap/evil/s', '{"evil_trap": 1}'],
        ['/write/evil', '{"evil_agent": 1}'],
        ['/api/strata/v1/worksheets', '{"name": "evil worksheet", "graphs": []}'],
      ];
      for (const [path, body] of posts) {
        // A "simple" request: sent without a preflight, its answer unreadable to the page.
        await fetch(base + path, { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body }).catch(() => {});
      }
      const reads = {};
      for (const path of ['/api/strata/v1/find?query=and(__name:*)', '/api/strata/v1/worksheets', '/metrics']) {
        try {
          const r = await fetch(base + path);
          reads[path] = `read ${r.status}: ${(await r.text()).slice(0, 80)}`;
        } catch (e) {
          reads[path] = 'refused';
        }
      }
      return reads;
    },
    { base: OPEN_URL, ts },
  );
  for (const [path, what] of Object.entries(outcome)) assert(what === 'refused', `${path}: ${what}`);
  for (const name of ['evil_influx_v', 'evil_influx2_v', 'evil_trap', 'evil_agent']) {
    const hits = await found(OPEN_URL, `and(__name:${name})`);
    assert(hits.length === 0, `${name} was written: ${JSON.stringify(hits)}`);
  }
  const saved = await worksheets(OPEN_URL);
  assert(!JSON.stringify(saved).includes('evil worksheet'), `a worksheet was saved: ${JSON.stringify(saved)}`);
});

await test('DNS rebinding: a page reaching the server by a name of its own is refused', async () => {
  const port = new URL(OPEN_URL).port;
  const answer = await page.goto(`http://${REBOUND_HOST}:${port}/`);
  assert(answer.status() === 403, `the UI by a rebound name: ${answer.status()}`);
  const statuses = await page.evaluate(async () => {
    const write = await fetch('/write?precision=ms', { method: 'POST', body: `rebound v=1 ${Date.now()}` });
    const read = await fetch('/api/strata/v1/find?query=and(__name:*)');
    return [write.status, read.status];
  });
  assert(statuses[0] === 403 && statuses[1] === 403, `rebound requests answered ${statuses}`);
  assert((await found(OPEN_URL, 'and(__name:rebound_v)')).length === 0, 'the rebound write was stored');
});

await test('a configured origin (http.cors_origins) writes and reads, with the token where one is set', async () => {
  const ts = Date.now();
  await page.goto(`http://localhost:${FRIEND_PORT}/`);
  const answers = await page.evaluate(
    async ({ open, tokened, token, ts }) => {
      const write = await fetch(`${open}/write?precision=ms`, { method: 'POST', body: `friend v=1 ${ts}` });
      const read = await fetch(`${open}/api/strata/v1/find?query=and(__name:friend_v)`);
      const headers = { authorization: `Bearer ${token}`, 'content-type': 'text/plain' };
      const tokenWrite = await fetch(`${tokened}/write?precision=ms`, { method: 'POST', headers, body: `friend_tokened v=1 ${ts}` });
      const noToken = await fetch(`${tokened}/api/strata/v1/find?query=and(__name:*)`);
      return { write: write.status, read: await read.json(), tokenWrite: tokenWrite.status, noToken: noToken.status };
    },
    { open: OPEN_URL, tokened: TOKEN_URL, token: TOKEN, ts },
  );
  assert(answers.write === 204, `write from the configured origin: ${answers.write}`);
  assert(answers.read.length === 1 && answers.read[0].key.startsWith('friend_v'), `read: ${JSON.stringify(answers.read)}`);
  assert(answers.tokenWrite === 204, `tokened write: ${answers.tokenWrite}`);
  assert(answers.noToken === 401, `tokened server without the token: ${answers.noToken}`);
  const stored = await found(TOKEN_URL, 'and(__name:friend_tokened_v)', { authorization: `Bearer ${TOKEN}` });
  assert(stored.length === 1, `tokened write stored: ${JSON.stringify(stored)}`);
});

await browser.close();
friendServer.close();
evilServer.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
