import { RelentError } from '../core/errors.js';

export { normalizeUrlEndpoint } from '../core/endpoint.js';

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
