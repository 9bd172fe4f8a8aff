import type { BrookerResult } from './brooker.js';
import type { ScenarioResult } from './config.js';
import type { LayersResult } from './layers.js';
import type { OverloadResult } from './overload.js';

/** A plain-text table: the first column left-aligned, the others right-aligned. */
export function textTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ').trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n') + '\n';
}

const fixed = (v: number, digits: number): string => (Number.isFinite(v) ? v.toFixed(digits) : '-');
const ms = (v: number): string => fixed(v, Math.abs(v) < 10 ? 1 : 0);
const pct = (v: number): string => (Number.isFinite(v) ? `${(v * 100).toFixed(1)} %` : '-');
const times = (v: number, digits = 2): string => (Number.isFinite(v) ? `${v.toFixed(digits)}x` : '-');

/** Brooker: one table of work, one of completion time; a row per client count, a column per strategy. */
export function formatBrooker(r: BrookerResult): string {
  const strategies = [...new Set(r.rows.map((x) => x.strategy))];
  const clients = [...new Set(r.rows.map((x) => x.clients))];
  const cell = (n: number, s: string) => r.rows.find((x) => x.clients === n && x.strategy === s);
  const work = clients.map((n) => [String(n), ...strategies.map((s) => fixed(cell(n, s)?.work ?? NaN, 1))]);
  const time = clients.map((n) => [String(n), ...strategies.map((s) => fixed(cell(n, s)?.completionTime ?? NaN, 0))]);
  let out = 'Work: write calls per run (the blog\'s "client work")\n';
  out += textTable(['clients', ...strategies], work);
  out += '\nCompletion time: when the last client is done (ms)\n';
  out += textTable(['clients', ...strategies], time);
  const gaveUp = r.rows.filter((x) => x.gaveUp > 0);
  if (gaveUp.length > 0) {
    out += '\nClients that gave up (per run): ' + gaveUp.map((x) => `${x.strategy} at ${x.clients}: ${fixed(x.gaveUp, 1)}`).join('; ') + '\n';
  }
  return out;
}

/** Overload: one row per policy, fault-window figures first. */
export function formatOverload(r: OverloadResult): string {
  const rows = r.rows.map((x) => {
    const m = x.measured;
    const measured = m ? (m.amplificationMax !== undefined ? `${m.amplification.toFixed(1)}–${m.amplificationMax.toFixed(1)}x` : times(m.amplification)) : '';
    return [
      x.policy,
      times(x.fault.amplification),
      measured,
      x.calibration !== null ? fixed(x.calibration, 2) : '',
      pct(x.fault.successShare),
      m ? (m.successShareMax !== undefined ? `${(m.successShare * 100).toFixed(0)}–${(m.successShareMax * 100).toFixed(0)} %` : pct(m.successShare).replace('.0 %', ' %')) : '',
      fixed(x.fault.goodput, 1),
      ms(x.fault.p50Ms),
      ms(x.fault.p99Ms),
      times(x.after.amplification),
      times(x.peakLoadAfter),
      fixed(x.recoveryMs, 0),
      pct(x.overall.successShare),
    ];
  });
  let out = 'Fault window: operations started while capacity was cut; "after": the following window\n';
  out += textTable(
    ['policy', 'amplification', 'meas. ampl.', 'sim/meas', 'success', 'meas. success', 'goodput/s', 'p50 ms', 'p99 ms', 'after ampl.', 'peak after', 'recovery ms', 'success (all)'],
    rows,
  );
  return out;
}

/** Layers: calls per user action at each layer. */
export function formatLayers(r: LayersResult): string {
  const depth = Math.max(0, ...r.rows.map((x) => x.callsPerAction.length));
  const header = ['variant', ...Array.from({ length: depth }, (_, k) => (k === depth - 1 ? `layer ${k + 1} → db` : `layer ${k + 1}`)), 'db calls / action', 'success'];
  const rows = r.rows.map((x) => [x.variant, ...x.callsPerAction.map((v) => fixed(v, 2)), times(x.amplification), pct(x.successShare)]);
  return 'Calls made by each layer per user action (layer 1 is the top)\n' + textTable(header, rows);
}

export function formatResult(r: ScenarioResult): string {
  switch (r.scenario) {
    case 'brooker':
      return formatBrooker(r.result);
    case 'overload':
      return formatOverload(r.result);
    case 'layers':
      return formatLayers(r.result);
  }
}
