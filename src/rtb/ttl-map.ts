import type { Clock } from '../core/types.js';

/**
 * A bounded map with expiry: at most `maxKeys` entries (the oldest written go first),
 * each kept for `ttlMs` after it was last written. Expired entries are dropped lazily,
 * from the oldest, on writes and on reads of the entry. O(1) per operation (amortised).
 *
 * relent/delivery's `createIdempotencyCache` (used by the bidder's notice endpoints)
 * remembers *that* a key was processed; the exchange also needs a *value* per key (the
 * billing URL of a won impression until its billing event comes), hence this small map.
 */
export class TtlMap<V> {
  private readonly map = new Map<string, { value: V; expiresAt: number }>();

  constructor(
    private readonly maxKeys: number,
    private readonly ttlMs: number,
    private readonly clock: Clock,
  ) {}

  get size(): number {
    return this.map.size;
  }

  set(key: string, value: V): void {
    const now = this.clock.now();
    this.map.delete(key);
    this.map.set(key, { value, expiresAt: now + this.ttlMs });
    for (const [k, e] of this.map) {
      if (this.map.size <= this.maxKeys && e.expiresAt > now) break;
      this.map.delete(k);
    }
  }

  get(key: string): V | undefined {
    const e = this.map.get(key);
    if (e === undefined) return undefined;
    if (e.expiresAt <= this.clock.now()) {
      this.map.delete(key);
      return undefined;
    }
    return e.value;
  }

  /** Replaces the value of a live key without extending its life. */
  update(key: string, value: V): void {
    const e = this.map.get(key);
    if (e !== undefined) e.value = value;
  }

  delete(key: string): void {
    this.map.delete(key);
  }

  clear(): void {
    this.map.clear();
  }
}
