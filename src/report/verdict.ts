/**
 * When a retry success rate says something (the rule: "if retry success is near zero,
 * retries should be switched off"). The rate is the share of operations that needed at
 * least one retry and still ended with `return`.
 */
export const VERDICT_THRESHOLDS = Object.freeze({
  /** Fewer retried operations than this: "not enough data". */
  minRetried: 20,
  /** At or above this share: "retries help". */
  helps: 0.2,
  /** Below this share: "retries almost never help". Between the two: "help a little". */
  almostNever: 0.05,
});

export type VerdictKind = 'no-retries' | 'not-enough-data' | 'help' | 'help-a-little' | 'almost-never';

export interface RetryVerdict {
  readonly kind: VerdictKind;
  /** Retried operations that ended with `return` ÷ retried operations; null without retried operations. */
  readonly successRate: number | null;
  /** The verdict in plain words, e.g. "retries help: 41 % of retried operations succeed". */
  readonly text: string;
}

/** A share as people read it: "41 %", "2 %", "0.4 %", "100 %". */
export function percent(share: number): string {
  const p = share * 100;
  if (!Number.isFinite(p)) return '-';
  if (p === 0) return '0 %';
  if (p < 0.1) return '< 0.1 %';
  if (p >= 10) return p < 100 && Math.round(p) === 100 ? `${(Math.floor(p * 10) / 10).toFixed(1)} %` : `${Math.round(p)} %`;
  return `${(Math.round(p * 10) / 10).toFixed(1).replace(/\.0$/, '')} %`;
}

/** The verdict on retries from the number of retried operations and how many of them succeeded. */
export function retryVerdict(retried: number, succeeded: number, thresholds: typeof VERDICT_THRESHOLDS = VERDICT_THRESHOLDS): RetryVerdict {
  if (retried <= 0) return { kind: 'no-retries', successRate: null, text: 'no operation was retried' };
  const rate = succeeded / retried;
  const share = percent(rate);
  if (retried < thresholds.minRetried) {
    return {
      kind: 'not-enough-data',
      successRate: rate,
      text: `not enough data: ${retried} retried operation${retried === 1 ? '' : 's'} (${share} succeeded); a verdict needs ${thresholds.minRetried}`,
    };
  }
  if (rate >= thresholds.helps) return { kind: 'help', successRate: rate, text: `retries help: ${share} of retried operations succeed` };
  if (rate >= thresholds.almostNever) {
    return {
      kind: 'help-a-little',
      successRate: rate,
      text: `retries help a little: ${share} of retried operations succeed; keep them few and under a retry budget`,
    };
  }
  return { kind: 'almost-never', successRate: rate, text: `retries almost never help (${share} of retried operations succeed): consider switching them off` };
}
