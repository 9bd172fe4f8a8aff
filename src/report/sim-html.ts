import type { BrookerResult } from '../sim/brooker.js';
import type { ScenarioResult } from '../sim/config.js';
import type { LayersResult } from '../sim/layers.js';
import type { OverloadResult } from '../sim/overload.js';
import { htmlPage, htmlTable } from './page.js';
import { esc, hBarChart, lineChart } from './svg.js';

const fixed = (v: number, digits: number): string => (Number.isFinite(v) ? v.toFixed(digits) : '-');
const ms = (v: number): string => fixed(v, Math.abs(v) < 10 ? 1 : 0);
const pct = (v: number): string => (Number.isFinite(v) ? `${(v * 100).toFixed(1)} %` : '-');
const times = (v: number, digits = 2): string => (Number.isFinite(v) ? `${v.toFixed(digits)}x` : '-');

function brooker(r: BrookerResult): string {
  const strategies = [...new Set(r.rows.map((x) => x.strategy))];
  const clients = [...new Set(r.rows.map((x) => x.clients))].sort((a, b) => a - b);
  const cell = (n: number, s: string) => r.rows.find((x) => x.clients === n && x.strategy === s);
  const series = (pick: 'work' | 'completionTime') => strategies.map((s) => ({ name: s, values: clients.map((n) => cell(n, s)?.[pick] ?? null) }));
  let b = '<section id="brooker-work"><h2>Work</h2><p class="note">Write calls per run (Brooker\'s “client work”), by number of contending clients.</p>';
  b += lineChart({ id: 'brooker-work', title: 'Work: write calls per run', x: clients, xLabel: 'clients', yLabel: 'write calls', series: series('work') });
  b += htmlTable(['clients', ...strategies], clients.map((n) => [String(n), ...strategies.map((s) => fixed(cell(n, s)?.work ?? NaN, 1))]));
  b += '</section><section id="brooker-time"><h2>Completion time</h2><p class="note">When the last client has its answer (ms of virtual time).</p>';
  b += lineChart({ id: 'brooker-time', title: 'Completion time (ms)', x: clients, xLabel: 'clients', yLabel: 'ms', series: series('completionTime') });
  b += '<p class="note">The same on a logarithmic scale, where the strategies other than plain exponential can be told apart:</p>';
  b += lineChart({ id: 'brooker-time-log', title: 'Completion time (ms, log scale)', x: clients, xLabel: 'clients', yLabel: 'ms', series: series('completionTime'), logY: true });
  b += htmlTable(['clients', ...strategies], clients.map((n) => [String(n), ...strategies.map((s) => fixed(cell(n, s)?.completionTime ?? NaN, 0))]));
  b += '</section>';
  const gaveUp = r.rows.filter((x) => x.gaveUp > 0);
  if (gaveUp.length > 0) b += `<section><p>${esc('Clients that gave up (per run): ' + gaveUp.map((x) => `${x.strategy} at ${x.clients}: ${fixed(x.gaveUp, 1)}`).join('; '))}</p></section>`;
  return b;
}

function overload(r: OverloadResult): string {
  let b = '<section id="overload"><h2>Fault window</h2><p class="note">Operations started while capacity was cut; “after”: the following window. Measured figures are those of the real libraries (issue 6).</p>';
  b += hBarChart({
    id: 'overload-amplification', title: 'Amplification in the fault window (requests ÷ operations)', xLabel: 'amplification', yLabel: 'policy',
    bars: r.rows.map((x) => ({ label: x.policy, value: x.fault.amplification, detail: times(x.fault.amplification), color: x.policy.startsWith('relent') || x.policy === 'http-429' ? '#009E73' : '#0072B2' })),
  });
  const rows = r.rows.map((x) => {
    const m = x.measured;
    return [
      x.policy,
      times(x.fault.amplification),
      m ? (m.amplificationMax !== undefined ? `${m.amplification.toFixed(1)}–${m.amplificationMax.toFixed(1)}x` : times(m.amplification)) : '',
      x.calibration !== null ? fixed(x.calibration, 2) : '',
      pct(x.fault.successShare),
      m ? (m.successShareMax !== undefined ? `${(m.successShare * 100).toFixed(0)}–${(m.successShareMax * 100).toFixed(0)} %` : `${(m.successShare * 100).toFixed(0)} %`) : '',
      fixed(x.fault.goodput, 1),
      ms(x.fault.p50Ms),
      ms(x.fault.p99Ms),
      times(x.after.amplification),
      times(x.peakLoadAfter),
      fixed(x.recoveryMs, 0),
      pct(x.overall.successShare),
    ];
  });
  b += htmlTable(['policy', 'amplification', 'meas. ampl.', 'sim/meas', 'success', 'meas. success', 'goodput/s', 'p50 ms', 'p99 ms', 'after ampl.', 'peak after', 'recovery ms', 'success (all)'], rows);
  return b + '</section>';
}

function layers(r: LayersResult): string {
  const depth = Math.max(0, ...r.rows.map((x) => x.callsPerAction.length));
  const header = ['variant', ...Array.from({ length: depth }, (_, k) => (k === depth - 1 ? `layer ${k + 1} → db` : `layer ${k + 1}`)), 'db calls / action', 'success'];
  let b = '<section id="layers"><h2>Calls per user action</h2><p class="note">Calls made by each layer per user action (layer 1 is the top).</p>';
  b += hBarChart({ id: 'layers-db', title: 'Database calls per user action', xLabel: 'calls', yLabel: 'variant', bars: r.rows.map((x) => ({ label: x.variant, value: x.amplification, detail: times(x.amplification) })) });
  b += htmlTable(header, r.rows.map((x) => [x.variant, ...x.callsPerAction.map((v) => fixed(v, 2)), times(x.amplification), pct(x.successShare)]));
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
  b += lines.filter((l) => l !== title).map((l) => `<p class="meta">${esc(l)}</p>`).join('');
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
  }
  b += '<footer>Generated by relent simulate. One self-contained file: no scripts, nothing loaded from the network.</footer>';
  return htmlPage(title, b);
}
