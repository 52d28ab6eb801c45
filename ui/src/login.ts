/**
 * Signing in to a server with a token (`auth.token`): the UI asks for the token once per browser
 * session, keeps it in sessionStorage (gone when the tab closes), and sends it as
 * `Authorization: Bearer <token>` on every request to its own server. A wrong token is said in
 * plain words; "Sign out" forgets it. A server without a token never shows the page.
 */
import { el } from './charts';

const TOKEN_KEY = 'strata.token';
/** A cheap request that needs the token when the server has one. */
const PROBE = '/api/strata/v1/find?query=and(__name:strata.login.probe)&limit=1';

export function token(): string | null {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

function keep(t: string | null): void {
  try {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage off (a private window's policy): the token lives as long as the page.
  }
}

function ownUrl(input: RequestInfo | URL): boolean {
  const href = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
  try {
    return new URL(href, location.href).origin === location.origin;
  } catch {
    return false;
  }
}

let signInShown = false;
/** The browser's own fetch, for the sign-in probe (never the wrapper below). */
const plainFetch = window.fetch.bind(window);

/** Every request of the page to its own server carries the token; a 401 asks for it again. */
export function installAuth(): void {
  const plain = plainFetch;
  window.fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const t = token();
    if (!t || !ownUrl(input)) return plain(input, init);
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    if (!headers.has('authorization')) headers.set('authorization', `Bearer ${t}`);
    const response = await plain(input, { ...init, headers });
    // The token was changed on the server since: ask again, then start over.
    if (response.status === 401 && !signInShown) {
      keep(null);
      void signIn().then(() => location.reload());
    }
    return response;
  };
}

/** What the server says to `t` (or to no token): 'ok', 'refused', or why it cannot be asked. */
async function probe(t: string | null): Promise<'ok' | 'refused' | string> {
  try {
    const headers: Record<string, string> = t ? { authorization: `Bearer ${t}` } : {};
    const r = await plainFetch(PROBE, { headers });
    if (r.status === 401) return 'refused';
    return r.ok ? 'ok' : `the server answered ${r.status}`;
  } catch (e) {
    return `the server cannot be reached (${(e as Error).message})`;
  }
}

/** Resolves once the server takes the page's requests: at once without a token or with a kept
 * good one; otherwise after the user entered one the server accepts. */
export async function signIn(): Promise<void> {
  if ((await probe(token())) === 'ok') {
    document.getElementById('sign-out')?.toggleAttribute('hidden', !token());
    return;
  }
  keep(null);
  signInShown = true;
  const input = el('input', {
    id: 'login-token',
    type: 'password',
    autocomplete: 'current-password',
    required: '',
    'aria-describedby': 'login-help login-error',
  });
  const message = el('p', { id: 'login-error', class: 'error', role: 'alert' });
  const form = el(
    'form',
    { id: 'login', class: 'login', 'aria-labelledby': 'login-title' },
    el('h1', { id: 'login-title' }, 'Sign in to Strata'),
    el('p', { id: 'login-help', class: 'muted' }, 'This server needs its access token (auth.token in its configuration). It is kept in this tab only, until you sign out or close it.'),
    el('label', { for: 'login-token' }, 'Token'),
    input,
    el('button', { type: 'submit', id: 'login-submit' }, 'Sign in'),
    message,
  );
  const app = document.getElementById('app');
  if (app) app.style.display = 'none';
  document.body.append(form);
  input.focus();
  await new Promise<void>((done) => {
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const given = input.value.trim();
      message.textContent = '';
      const answer = await probe(given);
      if (answer === 'ok') {
        keep(given);
        done();
      } else if (answer === 'refused') {
        message.textContent = 'That token is not the one this server was given. Check auth.token in the server’s configuration, or ask whoever runs it.';
        input.select();
      } else {
        message.textContent = `Could not sign in: ${answer}.`;
      }
    });
  });
  form.remove();
  signInShown = false;
  if (app) app.style.display = '';
  document.getElementById('sign-out')?.removeAttribute('hidden');
}

/** A "Sign out" button, shown while a token is in use. */
export function signOutButton(): HTMLButtonElement {
  const button = el('button', { type: 'button', id: 'sign-out' }, 'Sign out');
  button.hidden = !token();
  button.addEventListener('click', () => {
    keep(null);
    location.reload();
  });
  return button;
}
