import { RelentError } from '../core/errors.js';

const DEFAULT_PORTS: Readonly<Record<string, string>> = { 'http:': '80', 'https:': '443' };

/**
 * The endpoint of an attempt event (R13, R14): scheme, host, port and path — never the
 * query, the userinfo or the fragment. The port is always written, so one dependency
 * has one spelling. `routeTemplate` (e.g. `/users/:id`) replaces the path, so ids in
 * paths do not reach logs, traces or metric labels.
 */
export function normalizeEndpoint(url: URL, routeTemplate?: string | null): string {
  const port = url.port || DEFAULT_PORTS[url.protocol] || '';
  const path = routeTemplate ?? url.pathname;
  return `${url.protocol}//${url.hostname}${port ? `:${port}` : ''}${path}`;
}

/** Checks a route template: a path starting with `/`, no query, no fragment. */
export function checkRouteTemplate(t: unknown, field = 'routeTemplate'): string {
  if (typeof t !== 'string' || !t.startsWith('/') || t.includes('?') || t.includes('#') || hasSpaceOrControl(t)) {
    throw new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be a path like "/users/:id" (no query or fragment)`, { field });
  }
  return t;
}

function hasSpaceOrControl(t: string): boolean {
  for (let i = 0; i < t.length; i++) {
    const c = t.charCodeAt(i);
    if (c <= 0x20 || c === 0x7f) return true;
  }
  return false;
}

/** The default dependency key: the origin (scheme, host and port). */
export function originKey(url: URL): string {
  return url.origin;
}
