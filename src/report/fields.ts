// What the report analyzer reads out of one event line: a bounded key for an operation
// id, names made safe to print and clipped, bounded name → count tables, HTTP status
// classes, optional numbers, and an event's time. No state of the analysis lives here.

export type Json = Record<string, unknown>;

export const NO_ENDPOINT = '(no endpoint)';
export const OTHER_ENDPOINTS = '(other endpoints)';
/** The name that counts names beyond a table's bound. */
const OTHER = '(other)';
const MAX_NAME = 60;
export const MAX_ENDPOINT = 300;
const MAX_ID = 200;

/** A short stable key for an over-long operation id (its head, its length and a 53-bit hash). */
export function idKey(id: string): string {
  if (id.length <= MAX_ID) return id;
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return `${id.slice(0, 64)}…${id.length}:${(4294967296 * (2097151 & h2) + (h1 >>> 0)).toString(36)}`;
}

/**
 * Names from the log are untrusted: control characters (terminal escapes) and bidi
 * overrides become U+FFFD so that no output — text, JSON or HTML — can carry them.
 */
// eslint-disable-next-line no-control-regex
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
export function printable(s: string): string {
  return s.replace(UNPRINTABLE, '\ufffd');
}

export function clip(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}

/** A bounded name → count table: after `max` names, new ones count as "(other)". */
export class NameCounts {
  private readonly m = new Map<string, number>();
  constructor(private readonly max: number) {}
  add(name: string, n = 1): void {
    let key = clip(name, MAX_NAME);
    if (!this.m.has(key) && this.m.size >= this.max) key = OTHER;
    this.m.set(key, (this.m.get(key) ?? 0) + n);
  }
  entries(): [string, number][] {
    return [...this.m.entries()].map(([k, v]): [string, number] => [printable(k), v]).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  }
  record(): Record<string, number> {
    return Object.fromEntries(this.entries());
  }
}

export function statusClass(status: number): string {
  return `${Math.floor(status / 100)}xx`;
}

/** A finite number ≥ 0, or undefined for absent/null; NaN marks a wrong value. */
export function optNonNeg(v: unknown): number | undefined {
  if (v === undefined || v === null) return undefined;
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : Number.NaN;
}

/** The event's time in ms from `ts` or `time` (a number of ms, or a date text), or null. */
export function timeOf(o: Json): { at: number; field: 'ts' | 'time' } | null {
  for (const field of ['ts', 'time'] as const) {
    const v = o[field];
    if (v === undefined || v === null) continue;
    if (typeof v === 'number' && Number.isFinite(v)) return { at: v, field };
    if (typeof v === 'string' && v.length <= 64) {
      const t = Date.parse(v);
      if (Number.isFinite(t)) return { at: t, field };
    }
  }
  return null;
}
