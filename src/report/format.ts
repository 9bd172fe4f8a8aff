import type { Distribution, EventReport } from './types.js';
import type { SketchBin } from './sketch.js';
import { textTable } from '../shared/text-table.js';
import { percent } from './verdict.js';

/** A duration for people: `0 ms`, `0.4 ms`, `40 ms`, `1.5 s`, `2.5 min`, `3.2 h`. */
export function duration(ms: number | null): string {
  if (ms === null || !Number.isFinite(ms)) return '-';
  const one = (v: number): string => (Math.round(v * 10) / 10).toFixed(1).replace(/\.0$/, '');
  if (ms === 0) return '0 ms';
  if (ms < 10) return `${one(ms)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${one(ms / 1000)} s`;
  if (ms < 3_600_000) return `${one(ms / 60_000)} min`;
  if (ms < 172_800_000) return `${one(ms / 3_600_000)} h`;
  return `${one(ms / 86_400_000)} d`;
}

/** An edge of a round bin: `500 ms`, `1 s`, `200 s`, then minutes and hours. */
function edge(ms: number): string {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 1_000_000) return `${ms / 1000} s`;
  return duration(ms);
}

/** A bin's range: `0 ms`, `< 1 ms`, `1–2 ms`, `500 ms–1 s`, `2–5 s`, `≥ 35 years`. */
export function binLabel(b: SketchBin): string {
  if (b.hi === null) return `≥ ${duration(b.lo)}`;
  if (b.lo === 0 && b.hi === 0) return '0 ms';
  if (b.lo === 0) return `< ${edge(b.hi)}`;
  const lo = edge(b.lo);
  const hi = edge(b.hi);
  const unit = (s: string): string => s.replace(/^[\d.]+ /, '');
  return unit(lo) === unit(hi) ? `${lo.replace(/ .*$/, '')}–${hi}` : `${lo}–${hi}`;
}

export const count = (n: number): string => (Number.isInteger(n) ? String(n) : n.toFixed(1));
export const fixed2 = (v: number | null): string => (v === null ? '-' : v.toFixed(2));
export const share = (v: number | null): string => (v === null ? '-' : percent(v));
const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

function distribution(title: string, d: Distribution): string {
  if (d.count === 0) return `${title}: none\n`;
  let out = `${title} (${plural(d.count, 'value')}): min ${duration(d.min)}, p50 ${duration(d.p50)}, p90 ${duration(d.p90)}, p99 ${duration(d.p99)}, max ${duration(d.max)}, mean ${duration(d.mean)}\n`;
  out += textTable(
    ['range', 'count', 'share'],
    d.bins.map((b) => [binLabel(b), count(b.count), percent(b.count / d.count)]),
  );
  return out;
}

/** Groups the series' buckets into at most `rows` rows for a text table. */
export function coarseSeries(r: EventReport, rows = 12): { label: string; attempts: number; firstAttempts: number; retries: number; failures: number }[] {
  const b = r.series.buckets;
  if (b.length === 0) return [];
  const per = Math.ceil(b.length / rows);
  const out = [];
  for (let i = 0; i < b.length; i += per) {
    const group = b.slice(i, i + per);
    const start = group[0]!.start;
    const end = group[group.length - 1]!.start + r.series.bucketWidth;
    const since = (t: number): string => (t === b[0]!.start ? '0' : duration(t - b[0]!.start));
    const label = r.series.unit === 'lines' ? (end - 1 === start ? `line ${start}` : `lines ${start}–${end - 1}`) : `${since(start)} – ${since(end)}`;
    out.push({
      label,
      attempts: group.reduce((s, x) => s + x.attempts, 0),
      firstAttempts: group.reduce((s, x) => s + x.firstAttempts, 0),
      retries: group.reduce((s, x) => s + x.retries, 0),
      failures: group.reduce((s, x) => s + x.failures, 0),
    });
  }
  return out;
}

/** When the series' first bucket starts, if its times look like wall-clock ones (after 2001). */
export function seriesStart(r: EventReport): string | null {
  const first = r.series.buckets[0];
  if (r.series.unit !== 'ms' || !first || first.start < 1e12 || first.start > 8.64e15) return null;
  return new Date(first.start).toISOString();
}

/** The report as text tables (what `relent report` prints). */
export function formatReport(r: EventReport, options: { maxEndpoints?: number } = {}): string {
  const maxEndpoints = options.maxEndpoints ?? 20;
  const other = Object.values(r.events.other).reduce((s, n) => s + n, 0);
  let out = `relent report${r.source ? ` — ${r.source}` : ''}\n`;
  out +=
    `${plural(r.lines, 'line')}: ${plural(r.events.attempt, 'attempt')}, ${plural(r.events.result, 'result')}` +
    (other > 0
      ? `, ${other} other event${other === 1 ? '' : 's'} (${Object.entries(r.events.other)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')})`
      : '') +
    (r.blankLines > 0 ? `, ${r.blankLines} blank` : '') +
    `; ${r.malformed.count} malformed\n`;
  if (r.malformed.count > 0) {
    const listed = r.malformed.lines.map((m) => `line ${m.line} (${m.reason})`).join(', ');
    const more = r.malformed.count - r.malformed.lines.length;
    out += `Malformed lines (skipped): ${listed}${more > 0 ? `, and ${more} more` : ''}\n`;
  }
  const o = r.operations;
  out +=
    `Operations: ${o.ended} ended (${o.withResult} by a result line, ${o.inferred} by their last attempt's decision), ${o.unfinished} unfinished` +
    (o.evicted > 0 ? `; ${o.evicted} evicted from memory (more than ${o.maxOpen} open at once)` : '') +
    '\n';
  if (r.events.attempt === 0 && r.events.result === 0) {
    out += '\nNo attempt or result events in this log.\n';
    return out;
  }
  out += `Load sent: ${fixed2(r.load.attemptsPerOperation)} attempts per operation (${r.load.attempts} attempts, ${r.load.operations} operations); retries are ${share(r.load.retryShare)} of attempts\n`;
  if (r.chaos.injected > 0) {
    const c = r.chaos;
    out += `Injected by chaos: ${count(c.injected)} attempts (${share(c.share)} of attempts): ${count(c.fault)} faults and ${count(c.outcome)} outcomes (nothing sent), ${count(c.latency)} delayed\n`;
  }
  if (r.hedging.hedges > 0) {
    out += `Hedged requests: ${count(r.hedging.hedges)} hedges (extra load ${share(r.hedging.extraLoad)} of operations), ${count(r.hedging.won)} won (the operation's answer came from the hedge)\n`;
  }
  out += `Timeouts: ${share(r.timeouts.share)} of attempts (${r.timeouts.attempts})\n`;

  out += '\nAttempts per operation\n';
  const hist = r.attemptsPerOperation.histogram.map((h) => [String(h.attempts), count(h.operations), percent(h.share)]);
  if (r.attemptsPerOperation.more)
    hist.push([
      `${r.attemptsPerOperation.more.from}+`,
      count(r.attemptsPerOperation.more.operations),
      percent(r.attemptsPerOperation.more.operations / Math.max(1, r.operations.ended)),
    ]);
  out += textTable(['attempts', 'operations', 'share'], hist);
  out += `mean ${fixed2(r.attemptsPerOperation.mean)}, max ${r.attemptsPerOperation.max ?? '-'}\n`;

  out += '\nTerminal reasons\n';
  out += textTable(
    ['reason', 'operations', 'share'],
    r.reasons.map((x) => [x.reason, count(x.operations), percent(x.share)]),
  );
  out += `Outcomes: ${
    Object.entries(r.outcomes)
      .map(([k, v]) => `${k} ${count(v)}`)
      .join(', ') || '-'
  }\n`;

  out += '\nAttempts by status and error class\n';
  const att = Math.max(1, r.events.attempt);
  out += textTable(
    ['observation', 'attempts', 'share'],
    [
      ...r.perAttempt.statuses.map((s) => [String(s.status), count(s.attempts), percent(s.attempts / att)]),
      ...r.perAttempt.errorClasses.map((e) => [e.errorClass, count(e.attempts), percent(e.attempts / att)]),
    ],
  );
  out +=
    `Status classes: ${
      Object.entries(r.perAttempt.statusClasses)
        .map(([k, v]) => `${k} ${count(v)}`)
        .join(', ') || '-'
    }; ` + `decisions: ${r.perAttempt.decisions.map((d) => `${d.decision} ${count(d.attempts)}`).join(', ')}\n`;

  out += '\n' + distribution('Delays chosen before retries', r.delays);
  if (r.retryAfter.seen > 0) out += `Retry-After seen on ${r.retryAfter.seen} attempts: ${r.retryAfter.valid} valid, ${r.retryAfter.invalid} invalid\n`;
  out += '\n' + distribution('Attempt durations', r.elapsed);

  const t = r.retrySuccess.thresholds;
  out += `\nRetry success per endpoint (retried operations that ended with return; a verdict needs ${t.minRetried} retried operations, helps from ${percent(t.helps)}, almost never below ${percent(t.almostNever)})\n`;
  const rows = [r.retrySuccess.overall, ...r.retrySuccess.endpoints.slice(0, maxEndpoints)].map((e) => [
    e.endpoint,
    count(e.operations),
    fixed2(e.attemptsPerOperation),
    count(e.retried),
    share(e.retrySuccessRate),
    share(e.timeoutShare),
    e.verdict.text,
  ]);
  out += textTable(['endpoint', 'operations', 'attempts/op', 'retried', 'retry success', 'timeouts', 'verdict'], rows, true);
  if (r.retrySuccess.endpoints.length > maxEndpoints)
    out += `… and ${r.retrySuccess.endpoints.length - maxEndpoints} more endpoints (--json or --html for all)\n`;

  out += `\nLoad vs retries, ${r.series.note}\n`;
  const start = seriesStart(r);
  if (start) out += `starting ${start}\n`;
  out += textTable(
    [r.series.unit === 'lines' ? 'lines' : 'since start', 'attempts', 'first attempts', 'retries', 'retry share', 'not return'],
    coarseSeries(r).map((x) => [
      x.label,
      count(x.attempts),
      count(x.firstAttempts),
      count(x.retries),
      x.attempts > 0 ? percent(x.retries / x.attempts) : '-',
      count(x.failures),
    ]),
  );
  return out;
}
