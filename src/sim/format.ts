import type { BrookerResult } from './brooker.js';
import type { CapacityResult } from './capacity.js';
import type { TailResult } from './tail.js';
import type { QuotaResult } from './quota.js';
import type { ScenarioResult } from './config.js';
import type { LayersResult } from './layers.js';
import type { OverloadResult } from './overload.js';
import { textTable } from '../shared/text-table.js';

export { textTable } from '../shared/text-table.js';

const fixed = (v: number, digits: number): string => (Number.isFinite(v) ? v.toFixed(digits) : '-');
const ms = (v: number): string => fixed(v, Math.abs(v) < 10 ? 1 : 0);
const pct = (v: number): string => (Number.isFinite(v) ? `${(v * 100).toFixed(1)} %` : '-');
export const times = (v: number, digits = 2): string => (Number.isFinite(v) ? `${v.toFixed(digits)}x` : '-');

/** A table as data: the same cells for the text tables here and the HTML report. */
export interface Table {
  readonly header: readonly string[];
  readonly rows: readonly (readonly string[])[];
}

/** Brooker's two tables (work, completion time): a row per client count, a column per strategy. */
export function brookerTables(r: BrookerResult): { readonly work: Table; readonly time: Table } {
  const strategies = [...new Set(r.rows.map((x) => x.strategy))];
  const clients = [...new Set(r.rows.map((x) => x.clients))].sort((a, b) => a - b);
  const cell = (n: number, s: string) => r.rows.find((x) => x.clients === n && x.strategy === s);
  const header = ['clients', ...strategies];
  return {
    work: { header, rows: clients.map((n) => [String(n), ...strategies.map((s) => fixed(cell(n, s)?.work ?? NaN, 1))]) },
    time: { header, rows: clients.map((n) => [String(n), ...strategies.map((s) => fixed(cell(n, s)?.completionTime ?? NaN, 0))]) },
  };
}

/** "Clients that gave up (per run): …", or null when none did. */
export function brookerGaveUp(r: BrookerResult): string | null {
  const gaveUp = r.rows.filter((x) => x.gaveUp > 0);
  return gaveUp.length === 0 ? null : 'Clients that gave up (per run): ' + gaveUp.map((x) => `${x.strategy} at ${x.clients}: ${fixed(x.gaveUp, 1)}`).join('; ');
}

/** Brooker: one table of work, one of completion time. */
export function formatBrooker(r: BrookerResult): string {
  const t = brookerTables(r);
  let out = 'Work: write calls per run (the blog\'s "client work")\n';
  out += textTable(t.work.header, t.work.rows);
  out += '\nCompletion time: when the last client is done (ms)\n';
  out += textTable(t.time.header, t.time.rows);
  const gaveUp = brookerGaveUp(r);
  if (gaveUp !== null) out += `\n${gaveUp}\n`;
  return out;
}

/** Overload's table: one row per policy, fault-window figures first. */
export function overloadTable(r: OverloadResult): Table {
  const rows = r.rows.map((x) => {
    const m = x.measured;
    const measured = m ? (m.amplificationMax !== undefined ? `${m.amplification.toFixed(1)}–${m.amplificationMax.toFixed(1)}x` : times(m.amplification)) : '';
    return [
      x.policy,
      times(x.fault.amplification),
      measured,
      x.calibration !== null ? fixed(x.calibration, 2) : '',
      pct(x.fault.successShare),
      m
        ? m.successShareMax !== undefined
          ? `${(m.successShare * 100).toFixed(0)}–${(m.successShareMax * 100).toFixed(0)} %`
          : pct(m.successShare).replace('.0 %', ' %')
        : '',
      fixed(x.fault.goodput, 1),
      ms(x.fault.p50Ms),
      ms(x.fault.p99Ms),
      times(x.after.amplification),
      times(x.peakLoadAfter),
      fixed(x.recoveryMs, 0),
      x.settledLoad !== null ? times(x.settledLoad) : '',
      pct(x.overall.successShare),
    ];
  });
  return {
    header: [
      'policy',
      'amplification',
      'meas. ampl.',
      'sim/meas',
      'success',
      'meas. success',
      'goodput/s',
      'p50 ms',
      'p99 ms',
      'after ampl.',
      'peak after',
      'recovery ms',
      'settled',
      'success (all)',
    ],
    rows,
  };
}

/** Overload: one row per policy, fault-window figures first. */
export function formatOverload(r: OverloadResult): string {
  const t = overloadTable(r);
  return (
    'Fault window: operations started while capacity was cut; "after": the following window;\n' +
    '"settled": the busiest second from two deadlines after the fault on (above ~1.1x: a retry storm)\n' +
    textTable(t.header, t.rows)
  );
}

/** Layers' table: calls made by each layer per user action. */
export function layersTable(r: LayersResult): Table {
  const depth = Math.max(0, ...r.rows.map((x) => x.callsPerAction.length));
  const header = [
    'variant',
    ...Array.from({ length: depth }, (_, k) => (k === depth - 1 ? `layer ${k + 1} → db` : `layer ${k + 1}`)),
    'db calls / action',
    'success',
    'processes / layer',
  ];
  return {
    header,
    rows: r.rows.map((x) => [x.variant, ...x.callsPerAction.map((v) => fixed(v, 2)), times(x.amplification), pct(x.successShare), String(x.processes)]),
  };
}

/** Layers: calls per user action at each layer. */
export function formatLayers(r: LayersResult): string {
  const t = layersTable(r);
  return 'Calls made by each layer per user action (layer 1 is the top)\n' + textTable(t.header, t.rows);
}

/** Capacity's table: a row per contender. */
export function capacityTable(r: CapacityResult): Table {
  const header = ['contender', 'converged', 'in flight p50', 'p99', 'dep. latency healthy p50', 'in the drop p50', 'ratio', 'failed', 'in the drop'];
  return {
    header,
    rows: r.rows.map((x) => [
      x.name,
      x.convergedMs === null ? 'never' : `${(x.convergedMs / 1000).toFixed(2)} s`,
      fixed(x.inFlightP50, 0),
      fixed(x.inFlightP99, 0),
      ms(x.healthyLatencyP50),
      ms(x.dropLatencyP50),
      times(x.latencyRatio),
      String(x.failed),
      String(x.failedInDrop),
    ]),
  };
}

/** Capacity: the limits through a capacity drop. */
export function formatCapacity(r: CapacityResult): string {
  const t = capacityTable(r);
  return (
    '"converged": from the drop until calls in flight stay within 1.5x the new capacity; in flight and the dependency\'s latency (queue and work) from 2 s after the drop; failures over the whole run and of operations that arrived in the drop\n' +
    textTable(t.header, t.rows)
  );
}

/** Tail's table: a row per contender. */
export function tailTable(r: TailResult): Table {
  const base = r.rows[0]?.p99 ?? Number.NaN;
  const header = ['contender', 'p50', 'p99', 'p99.9', 'extra requests', 'failed', 'hedges (won)', 'p99 cut', 'failing: hedges', 'requests / op'];
  return {
    header,
    rows: r.rows.map((x) => [
      x.name,
      ms(x.p50),
      ms(x.p99),
      ms(x.p999),
      pct(x.extra),
      String(x.failed),
      `${x.hedges} (${x.hedgesWon})`,
      times(base / x.p99, 1),
      String(x.failingHedges),
      fixed(x.failingAmplification, 2),
    ]),
  };
}

/** Tail: hedging against a slow tail, and in a failing window. */
export function formatTail(r: TailResult): string {
  const t = tailTable(r);
  const c = r.config;
  return (
    `Operation latency (ms) of the operations started before the failing window; "p99 cut": the first contender's p99 ÷ this one's; "failing": ${c.failForMs / 1000} s from ${c.failAtMs / 1000} s with ${Math.round(c.failShare * 100)} % of requests answered 503 — hedges sent and requests per operation there\n` +
    textTable(t.header, t.rows)
  );
}

/** Quota's table: a row per contender. */
export function quotaTable(r: QuotaResult): Table {
  const header = ['contender', 'sent/s', '429s', 'succeeded', 'refused (rate_limited)', 'failed', 'requests / op', 'p50', 'p99'];
  return {
    header,
    rows: r.rows.map((x) => [
      x.name,
      fixed(x.sentPerSec, 1),
      String(x.throttled),
      String(x.succeeded),
      String(x.refused),
      String(x.failed),
      fixed(x.amplification, 2),
      ms(x.p50),
      ms(x.p99),
    ]),
  };
}

/** Quota: a published quota, with and without a client rate limit. */
export function formatQuota(r: QuotaResult): string {
  const t = quotaTable(r);
  return (
    `Requests the dependency received per second and answered 429; operations that succeeded, were refused by the client's own rate limit (no request sent) or failed otherwise; latency (ms) of those that succeeded\n` +
    textTable(t.header, t.rows)
  );
}

export function formatResult(r: ScenarioResult): string {
  switch (r.scenario) {
    case 'brooker':
      return formatBrooker(r.result);
    case 'overload':
      return formatOverload(r.result);
    case 'layers':
      return formatLayers(r.result);
    case 'capacity':
      return formatCapacity(r.result);
    case 'tail':
      return formatTail(r.result);
    case 'quota':
      return formatQuota(r.result);
  }
}
