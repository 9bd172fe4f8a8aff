import type { Distribution, EndpointReport, EventReport } from './types.js';
import { binLabel, count, duration, fixed2, seriesStart, share } from './format.js';
import { htmlPage, htmlTable } from '../shared/html.js';
import { barChart, compact, esc, hBarChart, lineChart, PALETTE } from '../shared/svg.js';
import { percent } from './verdict.js';

const REASON_COLORS: Record<string, string> = {
  return: '#009E73',
  check_state: '#56B4E9',
  defer: '#0072B2',
  not_retryable: '#CC79A7',
  deadline_exceeded: '#D55E00',
  max_attempts: '#E69F00',
  budget_exhausted: '#F0E442',
  circuit_open: '#000000',
  cancelled: '#999999',
  // The three limits' refusals, each its own word (and colour).
  bulkhead_full: '#882255',
  concurrency_limited: '#44AA99',
  rate_limited: '#AA4499',
};

function card(value: string, label: string): string {
  return `<div class="card"><b>${esc(value)}</b><span>${esc(label)}</span></div>`;
}

function distributionSection(id: string, title: string, what: string, d: Distribution): string {
  let s = `<section id="${id}"><h2>${esc(title)}</h2>`;
  if (d.count === 0) return s + `<p class="note">No ${esc(what)} in this log.</p></section>`;
  s += `<p>${esc(`${count(d.count)} values: min ${duration(d.min)}, p50 ${duration(d.p50)}, p90 ${duration(d.p90)}, p99 ${duration(d.p99)}, max ${duration(d.max)}, mean ${duration(d.mean)}`)}</p>`;
  s += barChart({
    id,
    title: `${title} (count per range)`,
    xLabel: 'range',
    yLabel: 'count',
    bars: d.bins.map((b) => ({ label: binLabel(b), value: b.count, detail: `${count(b.count)} (${percent(b.count / d.count)})` })),
  });
  return (
    s + '<p class="note">Whole milliseconds below 4096 are counted exactly; other values in a fixed-size log-bucketed sketch (within ±2.2 %).</p></section>'
  );
}

/** One endpoint's row: the verdict first (what to do), then the endpoint and the figures behind it. */
function endpointRow(e: EndpointReport, all = false): string {
  const td = (v: string, cls?: string): string => `<td${cls ? ` class="${cls}"` : ''}>${esc(v)}</td>`;
  return (
    `<tr><td class="verdict-cell"><span class="verdict v-${esc(e.verdict.kind)}">${esc(e.verdict.text)}</span></td>` +
    `${td(e.endpoint, all ? 'text' : 'endpoint')}${td(count(e.operations))}${td(fixed2(e.attemptsPerOperation))}${td(count(e.retried))}${td(count(e.retriedReturned))}` +
    `${td(share(e.retrySuccessRate))}${td(share(e.timeoutShare))}${td(count(e.unfinished))}</tr>`
  );
}

/**
 * The event-log report as one self-contained HTML page with inline SVG charts:
 * attempts per operation, terminal reasons, delays, attempt durations, retry success
 * per endpoint with verdicts, and load vs retries over time. No script, no network.
 */
export function renderReportHtml(r: EventReport, options: { maxEndpoints?: number } = {}): string {
  const maxEndpoints = options.maxEndpoints ?? 200;
  const title = `relent report${r.source ? ` — ${r.source}` : ''}`;
  const other = Object.values(r.events.other).reduce((s, n) => s + n, 0);
  let b = `<h1>${esc(title)}</h1>`;
  b += `<p class="meta">${esc(
    `${count(r.lines)} lines: ${count(r.events.attempt)} attempts, ${count(r.events.result)} results${other > 0 ? `, ${count(other)} other events` : ''}; ${count(r.malformed.count)} malformed. ` +
      `Operations: ${count(r.operations.ended)} ended (${count(r.operations.withResult)} by a result line, ${count(r.operations.inferred)} by their last attempt's decision), ${count(r.operations.unfinished)} unfinished` +
      (r.operations.evicted > 0 ? `; ${count(r.operations.evicted)} evicted from memory (more than ${r.operations.maxOpen} open at once)` : '') +
      '.',
  )}</p>`;

  const overall = r.retrySuccess.overall;
  b +=
    '<div class="cards">' +
    card(fixed2(r.load.attemptsPerOperation), 'load sent: attempts per operation') +
    card(share(overall.retrySuccessRate), `retry success (${count(overall.retried)} retried operations)`) +
    card(share(r.reasons.find((x) => x.reason === 'return')?.share ?? (r.operations.ended > 0 ? 0 : null)), 'operations that returned') +
    card(share(r.timeouts.share), 'attempts that timed out') +
    card(count(r.malformed.count), 'malformed lines') +
    '</div>';
  b += `<p><span class="verdict v-${esc(overall.verdict.kind)}">${esc(`All endpoints: ${overall.verdict.text}`)}</span></p>`;

  // Attempts per operation.
  const hist = r.attemptsPerOperation.histogram;
  const bars = hist.map((h) => ({ label: String(h.attempts), value: h.operations, detail: `${count(h.operations)} operations (${percent(h.share)})` }));
  if (r.attemptsPerOperation.more)
    bars.push({
      label: `${r.attemptsPerOperation.more.from}+`,
      value: r.attemptsPerOperation.more.operations,
      detail: `${count(r.attemptsPerOperation.more.operations)} operations`,
    });
  b += `<section id="attempts"><h2>Attempts per operation</h2>`;
  b +=
    bars.length > 0
      ? barChart({ id: 'attempts', title: 'Operations by number of attempts', xLabel: 'attempts', yLabel: 'operations', bars }) +
        `<p>${esc(`mean ${fixed2(r.attemptsPerOperation.mean)}, max ${r.attemptsPerOperation.max ?? '-'}; retries are ${share(r.load.retryShare)} of all attempts.`)}</p>`
      : '<p class="note">No operation ended in this log.</p>';
  b += '</section>';

  // Terminal reasons.
  b += `<section id="reasons"><h2>Terminal reasons</h2>`;
  b +=
    r.reasons.length > 0
      ? hBarChart({
          id: 'reasons',
          title: 'Share of operations per terminal reason',
          xLabel: 'operations',
          yLabel: 'reason',
          bars: r.reasons.map((x) => ({
            label: x.reason,
            value: x.operations,
            color: REASON_COLORS[x.reason],
            detail: `${count(x.operations)} (${percent(x.share)})`,
          })),
        })
      : '<p class="note">No operation ended in this log.</p>';
  const outcomes = Object.entries(r.outcomes);
  if (outcomes.length > 0) b += `<p>${esc(`How operations ended: ${outcomes.map(([k, v]) => `${k} ${count(v)}`).join(', ')}.`)}</p>`;
  b += '</section>';

  // Observations per attempt.
  const att = Math.max(1, r.events.attempt);
  const obs = [
    ...r.perAttempt.statuses.map((s) => ({
      label: String(s.status),
      value: s.attempts,
      color: s.status < 300 ? '#009E73' : s.status < 500 ? '#E69F00' : '#D55E00',
    })),
    ...r.perAttempt.errorClasses.map((e) => ({ label: e.errorClass, value: e.attempts, color: '#CC79A7' })),
  ].map((x) => ({ ...x, detail: `${count(x.value)} (${percent(x.value / att)})` }));
  b += `<section id="observations"><h2>Statuses and error classes (per attempt)</h2>`;
  b +=
    obs.length > 0
      ? hBarChart({ id: 'observations', title: 'Attempts by status or error class', xLabel: 'attempts', yLabel: 'observation', bars: obs })
      : '<p class="note">No attempts in this log.</p>';
  b += htmlTable(
    ['status class', 'attempts'],
    Object.entries(r.perAttempt.statusClasses).map(([k, v]) => [k, count(v)]),
  );
  b +=
    `<p>${esc(`Decisions: ${r.perAttempt.decisions.map((d) => `${d.decision} ${count(d.attempts)}`).join(', ') || '-'}. Timeouts: ${count(r.timeouts.attempts)} attempts (${share(r.timeouts.share)}).`)}` +
    (r.retryAfter.seen > 0
      ? esc(` Retry-After seen on ${count(r.retryAfter.seen)} attempts: ${count(r.retryAfter.valid)} valid, ${count(r.retryAfter.invalid)} invalid.`)
      : '') +
    '</p>';
  b += '</section>';

  b += distributionSection('delays', 'Delays chosen before retries', 'delays', r.delays);
  b += distributionSection('durations', 'Attempt durations', 'attempt durations', r.elapsed);

  // Retry success per endpoint.
  const t = r.retrySuccess.thresholds;
  b += `<section id="endpoints"><h2>Retry success per endpoint</h2>`;
  b += `<p class="note">${esc(`Retry success: the share of operations that needed at least one retry and still ended with return. A verdict needs ${t.minRetried} retried operations; retries help from ${percent(t.helps)}, almost never below ${percent(t.almostNever)}. Endpoints are shown without query strings.`)}</p>`;
  b +=
    '<div class="table-wrap"><table><thead><tr><th>verdict</th><th class="text">endpoint</th><th>operations</th><th>attempts/op</th><th>retried</th><th>retried → return</th><th>retry success</th><th>timeouts</th><th>unfinished</th></tr></thead><tbody>';
  b += endpointRow(overall, true);
  for (const e of r.retrySuccess.endpoints.slice(0, maxEndpoints)) b += endpointRow(e);
  b += '</tbody></table></div>';
  if (r.retrySuccess.endpoints.length > maxEndpoints)
    b += `<p class="note">${esc(`… and ${r.retrySuccess.endpoints.length - maxEndpoints} more endpoints (relent report --json lists all).`)}</p>`;
  if (r.retrySuccess.endpointsFolded)
    b += '<p class="note">There were more endpoints than the report keeps; the later ones are counted together as “(other endpoints)”.</p>';
  b += '</section>';

  // Load vs retries.
  const s = r.series;
  b += `<section id="series"><h2>Load vs retries</h2><p class="note">${esc(s.note[0]!.toUpperCase() + s.note.slice(1) + '.')}</p>`;
  if (s.buckets.length > 0) {
    const x0 = s.buckets[0]!.start;
    const span = s.buckets[s.buckets.length - 1]!.start + s.bucketWidth - x0;
    const [per, unitName] =
      span > 7_200_000 ? [3_600_000, 'hours'] : span > 600_000 ? [60_000, 'minutes'] : span > 10_000 ? [1000, 'seconds'] : [1, 'milliseconds'];
    const xs = s.buckets.map((x) => (s.unit === 'ms' ? (x.start - x0) / per : x.start));
    const start = seriesStart(r);
    b += lineChart({
      id: 'series',
      title: s.unit === 'ms' ? `Attempts per ${duration(s.bucketWidth)}` : `Attempts per ${compact(s.bucketWidth)} lines`,
      x: xs,
      xLabel: s.unit === 'ms' ? `${unitName} since ${start ?? 'the first attempt'}` : 'line of the log',
      yLabel: 'attempts',
      series: [
        { name: 'all attempts (load)', values: s.buckets.map((x) => x.attempts), color: PALETTE[0] },
        { name: 'retries', values: s.buckets.map((x) => x.retries), color: PALETTE[1] },
        { name: 'first attempts', values: s.buckets.map((x) => x.firstAttempts), color: PALETTE[2], dashed: true },
      ],
    });
  } else b += '<p class="note">No attempts in this log.</p>';
  b += '</section>';

  if (r.malformed.count > 0) {
    b += `<section id="malformed"><h2>Malformed lines</h2><p>${esc(`${count(r.malformed.count)} lines are not valid events and were skipped (their content is not shown: it may hold secrets).`)}</p>`;
    b += htmlTable(
      ['line', 'what is wrong'],
      r.malformed.lines.map((m) => [String(m.line), m.reason]),
      [null, 'text'],
    );
    const more = r.malformed.count - r.malformed.lines.length;
    if (more > 0) b += `<p class="note">${esc(`… and ${count(more)} more.`)}</p>`;
    b += '</section>';
  }
  b += '<footer>Generated by relent report. One self-contained file: no scripts, nothing loaded from the network.</footer>';
  return htmlPage(title, b);
}
