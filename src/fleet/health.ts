// When a connection to one Redis node counts as usable: the rules, as pure functions of
// what the syncs observed (no clock, no I/O), so that they can be tested as plain calls.
//
// One timeout rule in every mode: a sync (or a probe) is given the round-trip time
// measured so far plus four deviations (TCP's retransmission timeout, RFC 6298 §2),
// never less than `timeoutMs` and never more than `maxMs`, doubled after each failure
// (RFC 6298 §5.5). A slow Redis gets a slow deadline, not a fallback.
//
// Hysteresis: a node joined falls back after `fallAfter` failed syncs in a row (at once
// when its connection is lost); a node fallen back rejoins only after `rejoinAfter`
// good probes in a row. The first join needs one good sync (there is nothing to flap from).

/** The rule's constants (not options: the issue of flapping is settled here, once). */
export const HEALTH_RULES = Object.freeze({
  /** Failed syncs in a row after which a joined node falls back. */
  fallAfter: 3,
  /** Good probes in a row after which a node fallen back rejoins. */
  rejoinAfter: 3,
  /** The longest wait between two probes of a node that is not joined, ms (syncMs when shorter). */
  probeMs: 100,
  /** The deadline doubles after each failure, up to this factor. */
  maxBackoff: 64,
});

export type HealthMode = 'connecting' | 'fleet' | 'local';

/** What the rules know of one node. */
export interface Health {
  /** `connecting`: never joined yet; `fleet`: joined; `local`: fell back. */
  readonly mode: HealthMode;
  /** Failed syncs or probes in a row. */
  readonly failures: number;
  /** Good probes in a row while not joined. */
  readonly good: number;
  /** Smoothed round-trip time and its mean deviation, ms (null before the first sample). */
  readonly srtt: number | null;
  readonly rttvar: number | null;
  /** The deadline's factor after failures (1, 2, 4, … maxBackoff). */
  readonly backoff: number;
}

export interface DeadlineSettings {
  /** The shortest deadline, ms. */
  readonly timeoutMs: number;
  /** The longest deadline, ms (also the deadline before the first round trip was measured). */
  readonly maxMs: number;
}

export function initialHealth(): Health {
  return { mode: 'connecting', failures: 0, good: 0, srtt: null, rttvar: null, backoff: 1 };
}

/** How long the next sync or probe of this node may take before it counts as failed, ms. */
export function syncDeadline(h: Health, s: DeadlineSettings): number {
  const max = Math.max(s.timeoutMs, s.maxMs);
  if (h.srtt === null || h.rttvar === null) return max;
  const rto = Math.min(max, Math.max(s.timeoutMs, h.srtt + 4 * h.rttvar));
  return Math.min(max, rto * h.backoff);
}

/** The result of one observation: the new health, and the mode change it makes (null: none). */
export interface HealthStep {
  readonly health: Health;
  readonly change: 'fleet' | 'local' | null;
}

/**
 * A sync or probe answered in `rttMs`. Joined: stays joined. Fallen back: one more good
 * probe (rejoins at `rejoinAfter`). Never joined: joins.
 */
export function afterSuccess(h: Health, rttMs: number, rules: { readonly rejoinAfter: number } = HEALTH_RULES): HealthStep {
  const r = Number.isFinite(rttMs) && rttMs >= 0 ? rttMs : 0;
  // RFC 6298 §2.2–2.3 (alpha 1/8, beta 1/4).
  const srtt = h.srtt === null ? r : 0.875 * h.srtt + 0.125 * r;
  const rttvar = h.rttvar === null || h.srtt === null ? r / 2 : 0.75 * h.rttvar + 0.25 * Math.abs(h.srtt - r);
  const base = { failures: 0, srtt, rttvar, backoff: 1 };
  if (h.mode === 'fleet') return { health: { ...base, mode: 'fleet', good: 0 }, change: null };
  const good = h.good + 1;
  if (h.mode === 'connecting' || good >= rules.rejoinAfter) return { health: { ...base, mode: 'fleet', good: 0 }, change: 'fleet' };
  return { health: { ...base, mode: h.mode, good }, change: null };
}

/**
 * A sync or probe failed: no answer within the deadline, an error, or (`lost`) no
 * connection at all. Joined: falls back after `fallAfter` in a row, or at once when the
 * connection is lost. Never joined: falls back (says why) at the first. Fallen back: starts
 * counting good probes again.
 */
export function afterFailure(h: Health, lost: boolean, rules: { readonly fallAfter: number; readonly maxBackoff: number } = HEALTH_RULES): HealthStep {
  const failures = h.failures + 1;
  const backoff = Math.min(rules.maxBackoff, h.backoff * 2);
  const next = { ...h, failures, good: 0, backoff };
  if (h.mode === 'connecting' || (h.mode === 'fleet' && (lost || failures >= rules.fallAfter))) {
    return { health: { ...next, mode: 'local' }, change: 'local' };
  }
  return { health: next, change: null };
}

/** How long to wait before probing a node that is not joined, ms. */
export function probeDelay(syncMs: number, rules: { readonly probeMs: number } = HEALTH_RULES): number {
  return Math.min(syncMs, rules.probeMs);
}
