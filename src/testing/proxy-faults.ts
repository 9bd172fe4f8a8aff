// The faults of relent/testing/proxy: the settings a test changes at runtime, their
// defaults and checks, and the TCP timing they model (what a loss costs, when held
// bytes move after a heal). The proxy that applies them is proxy.ts.

/** Which way a fault applies: `upstream` is client → server, `downstream` server → client. */
export type FaultDirection = 'both' | 'upstream' | 'downstream';

/** The faults in force. Every field is optional in `set()`; what is left out keeps its value. */
export interface FaultSettings {
  /** Added to every chunk, one way (each affected direction): a round trip gains twice this. */
  readonly latencyMs?: number;
  /** Each chunk's latency is latencyMs ± a uniform draw up to this (never below 0; bytes stay in order). */
  readonly jitterMs?: number;
  /**
   * The share of segments lost on the wire, in [0, 1). TCP retransmits a lost segment, so
   * above TCP a loss is a segment (and every byte behind it) that arrives lossDelayMs late,
   * then 2×, 4×… that for a segment lost again: late bytes, never missing or reordered ones.
   */
  readonly lossRate?: number;
  /** The retransmission timeout a loss costs (ms; Linux's minimum RTO is 200 ms). */
  readonly lossDelayMs?: number;
  /** The segment size losses are drawn for (bytes; a WAN's MSS). */
  readonly segmentBytes?: number;
  /**
   * A partition: connections are accepted but nothing is forwarded, on new or existing
   * connections (the server does not see a new one until the heal). Held bytes go on after
   * the heal, in order, at TCP's next retransmission (`healWith`).
   */
  readonly blackhole?: boolean;
  /**
   * When held bytes move after a heal: `retransmit` (default) at the next retransmission
   * TCP would make, its timeout doubling from lossDelayMs since the partition began (from
   * 1 s for a connection not yet made) up to 120 s, as a real sender's; `immediate` at once.
   */
  readonly healWith?: 'retransmit' | 'immediate';
  /** Every open connection is reset (RST to both ends) and new ones are reset when accepted, until set back to false. */
  readonly reset?: boolean;
  /**
   * Each connection is cut after this many more bytes have been forwarded (per affected
   * direction, counted from when it is set): the bytes up to it arrive, then the
   * connection ends as `cutWith` says. null: no cut.
   */
  readonly cutAfterBytes?: number | null;
  /** How a cut ends a connection: `reset` (RST to both ends, default) or `close` (FIN to both ends). */
  readonly cutWith?: 'reset' | 'close';
  /** Which way latency, loss, blackhole and cut apply (resets always hit both ends). */
  readonly direction?: FaultDirection;
}

/** The faults of a fresh proxy (and after `clear()`): none. */
export const FAULT_PROXY_DEFAULTS = Object.freeze({
  latencyMs: 0,
  jitterMs: 0,
  lossRate: 0,
  lossDelayMs: 200,
  segmentBytes: 1448,
  blackhole: false,
  healWith: 'retransmit' as 'retransmit' | 'immediate',
  reset: false,
  cutAfterBytes: null as number | null,
  cutWith: 'reset' as 'reset' | 'close',
  direction: 'both' as FaultDirection,
});

export type ResolvedFaultSettings = { readonly [K in keyof FaultSettings]-?: Exclude<FaultSettings[K], undefined> };

/** TCP's largest retransmission timeout (Linux TCP_RTO_MAX). */
export const RTO_MAX_MS = 120_000;
/** The first SYN retransmission timeout (Linux TCP_TIMEOUT_INIT). */
export const SYN_RTO_MS = 1_000;

/** A TypeError naming the option or field, what it expects and what it got. */
export function invalid(field: string, expected: string, got: unknown): TypeError {
  return new TypeError(`Expected \`${field}\` to be ${expected}, got ${JSON.stringify(got) ?? String(got)}`);
}

/** Checks the fields given to `set()` (or `faults`); throws a TypeError naming the first wrong one. */
export function validateFaults(f: FaultSettings): void {
  const num = (k: keyof FaultSettings, min: number, ok: (v: number) => boolean, expected: string): void => {
    const v = f[k];
    if (v !== undefined && !(typeof v === 'number' && Number.isFinite(v) && v >= min && ok(v))) throw invalid(k, expected, v);
  };
  num('latencyMs', 0, () => true, 'a finite number >= 0');
  num('jitterMs', 0, () => true, 'a finite number >= 0');
  num('lossRate', 0, (v) => v < 1, 'a number in [0, 1)');
  num('lossDelayMs', 1, () => true, 'a finite number >= 1');
  num('segmentBytes', 1, Number.isInteger, 'an integer >= 1');
  if (f.cutAfterBytes !== undefined && f.cutAfterBytes !== null) num('cutAfterBytes', 0, Number.isInteger, 'an integer >= 0 or null');
  for (const k of ['blackhole', 'reset'] as const) if (f[k] !== undefined && typeof f[k] !== 'boolean') throw invalid(k, 'true or false', f[k]);
  if (f.healWith !== undefined && f.healWith !== 'retransmit' && f.healWith !== 'immediate')
    throw invalid('healWith', '"retransmit" or "immediate"', f.healWith);
  if (f.cutWith !== undefined && f.cutWith !== 'reset' && f.cutWith !== 'close') throw invalid('cutWith', '"reset" or "close"', f.cutWith);
  if (f.direction !== undefined && f.direction !== 'both' && f.direction !== 'upstream' && f.direction !== 'downstream') {
    throw invalid('direction', '"both", "upstream" or "downstream"', f.direction);
  }
}

/** The extra delay of a segment lost `k` times in a row: one retransmission timeout, doubling each time. */
export function lossPenaltyMs(k: number, rtoMs: number): number {
  let total = 0;
  let step = rtoMs;
  for (let i = 0; i < k; i++) {
    total += step;
    step = Math.min(step * 2, RTO_MAX_MS);
  }
  return total;
}

/**
 * When a sender that has retransmitted since `since` (timeout `rtoMs`, doubling up to
 * 120 s) tries again at or after `now`: where held bytes move after a heal.
 */
export function nextRetransmitAt(since: number, now: number, rtoMs: number): number {
  let step = rtoMs;
  let t = since + step;
  while (t < now) {
    step = Math.min(step * 2, RTO_MAX_MS);
    t += step;
  }
  return t;
}
