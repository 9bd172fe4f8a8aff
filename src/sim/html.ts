import type { BrookerResult } from './brooker.js';
import type { CapacityResult } from './capacity.js';
import type { TailResult } from './tail.js';
import type { QuotaResult } from './quota.js';
import type { ScenarioResult } from './config.js';
import type { LayersResult } from './layers.js';
import type { OverloadResult } from './overload.js';
import { brookerGaveUp, brookerTables, capacityTable, layersTable, overloadTable, quotaTable, tailTable, times } from './format.js';
import { htmlPage, htmlTable } from '../shared/html.js';
import { esc, hBarChart, lineChart } from '../shared/svg.js';

function brooker(r: BrookerResult): string {
  const strategies = [...new Set(r.rows.map((x) => x.strategy))];
  const clients = [...new Set(r.rows.map((x) => x.clients))].sort((a, b) => a - b);
  const cell = (n: number, s: string) => r.rows.find((x) => x.clients === n && x.strategy === s);
  const series = (pick: 'work' | 'completionTime') => strategies.map((s) => ({ name: s, values: clients.map((n) => cell(n, s)?.[pick] ?? null) }));
  let b = '<section id="brooker-work"><h2>Work</h2><p class="note">Write calls per run (Brooker\'s “client work”), by number of contending clients.</p>';
  b += lineChart({ id: 'brooker-work', title: 'Work: write calls per run', x: clients, xLabel: 'clients', yLabel: 'write calls', series: series('work') });
  const tables = brookerTables(r);
  b += htmlTable(tables.work.header, tables.work.rows);
  b += '</section><section id="brooker-time"><h2>Completion time</h2><p class="note">When the last client has its answer (ms of virtual time).</p>';
  b += lineChart({ id: 'brooker-time', title: 'Completion time (ms)', x: clients, xLabel: 'clients', yLabel: 'ms', series: series('completionTime') });
  b += '<p class="note">The same on a logarithmic scale, where the strategies other than plain exponential can be told apart:</p>';
  b += lineChart({
    id: 'brooker-time-log',
    title: 'Completion time (ms, log scale)',
    x: clients,
    xLabel: 'clients',
    yLabel: 'ms',
    series: series('completionTime'),
    logY: true,
  });
  b += htmlTable(tables.time.header, tables.time.rows);
  b += '</section>';
  const gaveUp = brookerGaveUp(r);
  if (gaveUp !== null) b += `<section><p>${esc(gaveUp)}</p></section>`;
  return b;
}

function overload(r: OverloadResult): string {
  const f = r.faults[0];
  let b =
    '<section id="overload"><h2>Fault window</h2><p class="note">Operations started while capacity was cut; “after”: the following window. The measured figures are those of the real libraries, run against a real server set up the same way.</p>';
  b += hBarChart({
    id: 'overload-amplification',
    title: 'Amplification in the fault window (requests ÷ operations)',
    xLabel: 'amplification',
    yLabel: 'policy',
    bars: r.rows.map((x) => ({
      label: x.policy,
      value: x.fault.amplification,
      detail: times(x.fault.amplification),
      color: x.policy.startsWith('relent') || x.policy === 'http-429' ? '#009E73' : '#0072B2',
    })),
  });
  // One table is too wide for a page: the fault window first, then what came after.
  const table = overloadTable(r);
  const split = table.header.indexOf('after ampl.');
  const cols = (from: number, to: number): { header: string[]; rows: string[][] } => ({
    header: [table.header[0]!, ...table.header.slice(from, to)],
    rows: table.rows.map((row) => [row[0]!, ...row.slice(from, to)]),
  });
  const during = cols(1, split > 0 ? split : table.header.length);
  b += htmlTable(during.header, during.rows);
  b += '</section>';

  // Load over time: what each policy sent to the dependency, second by second, against its capacity.
  const seconds = r.capacityPerSecond.map((_, i) => i + 0.5);
  b += '<section id="overload-load"><h2>Load over time</h2>';
  b += `<p class="note">Requests reaching the dependency per second (mean over runs), with its capacity; ${esc(String(r.arrivalsPerSec))} operations start per second. A policy whose load stays high after the fault feeds a retry storm.</p>`;
  b += lineChart({
    id: 'overload-load',
    title: 'Requests per second at the dependency',
    x: seconds,
    xLabel: 'seconds since the start',
    yLabel: 'requests/s',
    logY: 'auto',
    ...(f ? { band: { from: f.startMs / 1000, to: f.endMs / 1000, label: 'capacity cut' } } : {}),
    series: [
      ...r.rows.map((x) => ({ name: x.policy, values: x.loadPerSecond.slice(0, seconds.length) })),
      { name: 'capacity', values: r.capacityPerSecond, reference: true },
    ],
  });
  if (split > 0) {
    const after = cols(split, table.header.length);
    b += '<h2>After the fault</h2>';
    b += htmlTable(after.header, after.rows);
  }
  return b + '</section>';
}

function layers(r: LayersResult): string {
  let b = '<section id="layers"><h2>Calls per user action</h2><p class="note">Calls made by each layer per user action (layer 1 is the top).</p>';
  b += hBarChart({
    id: 'layers-db',
    title: 'Database calls per user action',
    xLabel: 'calls',
    yLabel: 'variant',
    bars: r.rows.map((x) => ({ label: x.variant, value: x.amplification, detail: times(x.amplification) })),
  });
  const table = layersTable(r);
  b += htmlTable(table.header, table.rows);
  return b + '</section>';
}

function tail(r: TailResult): string {
  let b = '<section id="tail"><h2>The slow tail</h2><p class="note">Operation latency p99 (ms) of the operations started before the failing window.</p>';
  b += hBarChart({
    id: 'tail-p99',
    title: 'p99 (ms)',
    xLabel: 'ms',
    yLabel: 'contender',
    bars: r.rows.map((x) => ({ label: x.name, value: x.p99, detail: `${x.p99} ms, ${(x.extra * 100).toFixed(1)} % extra` })),
  });
  const table = tailTable(r);
  b += htmlTable(table.header, table.rows);
  return b + '</section>';
}

function quota(r: QuotaResult): string {
  let b = `<section id="quota"><h2>A published quota</h2><p class="note">Requests per second the dependency received (its quota: ${esc(String(r.config.quotaPerSec))}/s) and the 429s it answered.</p>`;
  b += hBarChart({
    id: 'quota-429',
    title: '429s answered',
    xLabel: '429s',
    yLabel: 'contender',
    bars: r.rows.map((x) => ({ label: x.name, value: x.throttled, detail: `${x.throttled} (${x.sentPerSec}/s sent)` })),
  });
  const table = quotaTable(r);
  b += htmlTable(table.header, table.rows);
  return b + '</section>';
}

function capacity(r: CapacityResult): string {
  const c = r.config;
  let b = '<section id="capacity"><h2>Calls in flight through the capacity drop</h2>';
  b += `<p class="note">Calls in flight to the dependency every 250 ms (virtual time), with its capacity: ${esc(String(c.capacity))} workers, ${esc(String(c.degraded))} from ${esc(String(c.dropAtMs / 1000))} s for ${esc(String(c.dropForMs / 1000))} s.</p>`;
  const n = Math.max(0, ...r.rows.map((x) => x.inFlightTrace.length));
  const x = Array.from({ length: n }, (_, i) => i / 4);
  b += lineChart({
    id: 'capacity-in-flight',
    title: 'Calls in flight',
    x,
    xLabel: 'seconds',
    yLabel: 'calls',
    logY: 'auto',
    band: { from: c.dropAtMs / 1000, to: (c.dropAtMs + c.dropForMs) / 1000, label: 'capacity cut' },
    series: [
      ...r.rows.map((row) => ({ name: row.name, values: row.inFlightTrace.slice(0, n) })),
      { name: 'capacity', values: x.map((t) => (t * 1000 >= c.dropAtMs && t * 1000 < c.dropAtMs + c.dropForMs ? c.degraded : c.capacity)), reference: true },
    ],
  });
  const table = capacityTable(r);
  b += htmlTable(table.header, table.rows);
  return b + '</section>';
}

/**
 * A simulation's tables and charts as one self-contained HTML page (`relent simulate
 * … --html FILE`): brooker's work and completion time per strategy as line charts,
 * overload's and layers' tables with a bar chart of their amplification.
 */
export function renderSimulationHtml(result: ScenarioResult, heading = `relent simulate ${result.scenario}`): string {
  const lines = heading.trim().split('\n');
  const title = lines[0]!.replace(/ — .*$/, '');
  let b = `<h1>${esc(title)}</h1>`;
  b += lines
    .filter((l) => l !== title)
    .map((l) => `<p class="meta">${esc(l)}</p>`)
    .join('');
  switch (result.scenario) {
    case 'brooker':
      b += brooker(result.result);
      break;
    case 'overload':
      b += overload(result.result);
      break;
    case 'layers':
      b += layers(result.result);
      break;
    case 'capacity':
      b += capacity(result.result);
      break;
    case 'tail':
      b += tail(result.result);
      break;
    case 'quota':
      b += quota(result.result);
      break;
  }
  b += '<footer>Generated by relent simulate. One self-contained file: no scripts, nothing loaded from the network.</footer>';
  return htmlPage(title, b);
}
