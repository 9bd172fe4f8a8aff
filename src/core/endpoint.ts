// Endpoints fit for events, logs and spans (never a secret). Pure: only the URL global.

const DEFAULT_PORTS: Readonly<Record<string, string>> = { 'http:': '80', 'https:': '443' };

/**
 * The endpoint of an attempt event: scheme, host, port and path — never the
 * query, the userinfo or the fragment. The port is always written, so one dependency
 * has one spelling. `routeTemplate` (e.g. `/users/:id`) replaces the path, so ids in
 * paths do not reach logs, traces or metric labels.
 */
export function normalizeUrlEndpoint(url: URL, routeTemplate?: string | null): string {
  const port = url.port || DEFAULT_PORTS[url.protocol] || '';
  const path = routeTemplate ?? url.pathname;
  return `${url.protocol}//${url.hostname}${port ? `:${port}` : ''}${path}`;
}

/**
 * Endpoints fit for events, logs and spans: scheme, host, port and path,
 * never userinfo, query or fragment. A route template (`/users/:id`, `/users/{id}`)
 * replaces the path so that identifiers in it do not leak either. The spelling is the
 * HTTP client's (normalizeUrlEndpoint, port always written); this wrapper also takes
 * strings and things that are not absolute URLs.
 *
 * normalizeEndpoint('https://user:pw@API.example.com/v1/items?token=x#frag')
 *   → 'https://api.example.com:443/v1/items'
 * normalizeEndpoint('https://api.example.com/users/42', '/users/:id')
 *   → 'https://api.example.com:443/users/:id'
 */
export function normalizeEndpoint(url: string | URL, routeTemplate?: string | null): string {
  let u: URL | null = null;
  if (typeof url === 'string') {
    try {
      u = new URL(url);
    } catch {
      u = null;
    }
  } else {
    u = url;
  }
  let template = typeof routeTemplate === 'string' && routeTemplate.length > 0 ? beforeQuery(routeTemplate) : null;
  if (template !== null && !template.startsWith('/')) template = `/${template}`;
  if (u === null) {
    // Not an absolute URL: a path (or something else) — keep what comes before ? and #.
    const s = String(url);
    if (s.startsWith('//')) {
      // Protocol-relative: keep it so, without userinfo, query or fragment.
      try {
        const r = new URL(`http:${s}`);
        return `//${r.host}${template ?? r.pathname}`;
      } catch {
        return '//';
      }
    }
    return template ?? beforeQuery(s);
  }
  if (u.host === '') {
    // mailto:, urn:, data: … have no hierarchy to keep; their "path" may be personal.
    return template !== null ? `${u.protocol}${template}` : u.protocol;
  }
  // A template already in the URL (`/users/{id}`) keeps its braces.
  return template !== null ? normalizeUrlEndpoint(u, template) : unbrace(normalizeUrlEndpoint(u));
}

/** What comes before the first `?` or `#` (a path without its query and fragment). */
export function beforeQuery(s: string): string {
  let end = s.length;
  const q = s.indexOf('?');
  if (q >= 0) end = q;
  const h = s.indexOf('#');
  if (h >= 0 && h < end) end = h;
  return end === s.length ? s : s.slice(0, end);
}

/**
 * The endpoint unchanged when it can hold nothing secret (no `?`, `#` or `@`), else
 * normalised. Sinks run every endpoint through it as a last line of defence (cheap:
 * three character searches).
 */
export function safeEndpoint(endpoint: string): string {
  if (endpoint.indexOf('?') < 0 && endpoint.indexOf('#') < 0 && endpoint.indexOf('@') < 0) return endpoint;
  return normalizeEndpoint(endpoint);
}

/** Restores `{` and `}` that URL parsing escaped in a route template. */
export function unbrace(s: string): string {
  return s.includes('%7') ? s.replace(/%7B/gi, '{').replace(/%7D/gi, '}') : s;
}
