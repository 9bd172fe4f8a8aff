// Inline SVG charts, drawn here so that an HTML report is one file that needs nothing
// from the network. Every text that reaches the markup goes through `esc` (labels come
// from event logs and are untrusted).

/** Escapes text for HTML and XML, in text and in (quoted) attribute values. */
export function esc(text: string): string {
  return text.replace(/[&<>"']/g, (c) => (c === '&' ? '&amp;' : c === '<' ? '&lt;' : c === '>' ? '&gt;' : c === '"' ? '&quot;' : '&#39;'));
}

/** Okabe–Ito: distinguishable with the common colour-vision deficiencies. */
export const PALETTE = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000', '#F0E442'] as const;

const FONT = 'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif"';
const n1 = (v: number): string => (Math.round(v * 10) / 10).toString();

/** A short number for axes: 950, 1.2k, 3.4M. */
export function compact(v: number): string {
  const a = Math.abs(v);
  const trim = (x: number): string => (Math.round(x * 10) / 10).toString();
  if (a >= 1e9) return `${trim(v / 1e9)}G`;
  if (a >= 1e6) return `${trim(v / 1e6)}M`;
  if (a >= 1e4) return `${trim(v / 1e3)}k`;
  if (a >= 100 || Number.isInteger(v)) return String(Math.round(v));
  return trim(v) === '0' && v !== 0 ? v.toPrecision(2) : (Math.round(v * 100) / 100).toString();
}

/** Round tick values from 0 (or min) to at least max: steps of 1, 2, 2.5 or 5 × 10^k. */
export function niceTicks(min: number, max: number, target = 5): number[] {
  if (!(max > min)) max = min + 1;
  const raw = (max - min) / target;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const start = Math.floor(min / step) * step;
  const ticks: number[] = [];
  for (let v = start; v < max + step * 0.999; v += step) ticks.push(Math.round(v / step) * step);
  return ticks;
}

interface Frame {
  readonly width: number;
  readonly height: number;
  readonly top: number;
  readonly right: number;
  readonly bottom: number;
  readonly left: number;
}

function open(id: string, title: string, f: Frame, desc: string): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="${esc(id)}" role="img" aria-labelledby="${esc(id)}-t" width="${f.width}" height="${f.height}" viewBox="0 0 ${f.width} ${f.height}" ${FONT} font-size="12">` +
    `<title id="${esc(id)}-t">${esc(title)}</title><desc>${esc(desc)}</desc>` +
    `<rect x="0" y="0" width="${f.width}" height="${f.height}" fill="#ffffff"/>` +
    `<text x="${f.left}" y="20" font-size="14" font-weight="600" fill="#111">${esc(title)}</text>`;
}

function yAxis(f: Frame, ticks: number[], scale: (v: number) => number, label: string, fmt: (v: number) => string = compact): string {
  let s = '';
  for (const t of ticks) {
    const y = n1(scale(t));
    s += `<line x1="${f.left}" x2="${f.width - f.right}" y1="${y}" y2="${y}" stroke="#e5e7eb"/>`;
    s += `<text x="${f.left - 6}" y="${y}" text-anchor="end" dominant-baseline="middle" fill="#374151">${esc(fmt(t))}</text>`;
  }
  const mid = (f.top + f.height - f.bottom) / 2;
  s += `<text transform="translate(14 ${n1(mid)}) rotate(-90)" text-anchor="middle" fill="#374151">${esc(label)}</text>`;
  return s;
}

function xLabel(f: Frame, label: string): string {
  return `<text x="${n1((f.left + f.width - f.right) / 2)}" y="${f.height - 6}" text-anchor="middle" fill="#374151">${esc(label)}</text>`;
}

export interface Bar {
  readonly label: string;
  readonly value: number;
  /** Shown in the bar's tooltip (defaults to the value). */
  readonly detail?: string;
  readonly color?: string;
}

export interface BarChartOptions {
  readonly id: string;
  readonly title: string;
  readonly bars: readonly Bar[];
  readonly xLabel: string;
  readonly yLabel: string;
  readonly width?: number;
  readonly height?: number;
  readonly valueFormat?: (v: number) => string;
}

/** Vertical bars (histograms): one per label, left to right. */
export function barChart(o: BarChartOptions): string {
  const fmt = o.valueFormat ?? compact;
  const n = Math.max(1, o.bars.length);
  const longest = Math.max(1, ...o.bars.map((b) => b.label.length));
  const width = o.width ?? 960;
  const slot0 = (width - 80) / n;
  const rotate = longest * 6.5 > slot0 - 4;
  const f: Frame = { width, height: o.height ?? (rotate ? 300 : 260), top: 36, right: 16, bottom: rotate ? 40 + Math.min(60, longest * 4.6) : 44, left: 64 };
  const max = Math.max(0, ...o.bars.map((b) => b.value));
  const ticks = niceTicks(0, max > 0 ? max : 1);
  const top = ticks[ticks.length - 1]!;
  const plotH = f.height - f.top - f.bottom;
  const y = (v: number): number => f.top + plotH - (v / top) * plotH;
  const slot = (f.width - f.left - f.right) / n;
  const bw = Math.max(1, Math.min(60, slot * 0.78));
  let s = open(o.id, o.title, f, `${o.yLabel} by ${o.xLabel}: ${o.bars.map((b) => `${b.label} ${fmt(b.value)}`).join(', ')}`.slice(0, 2000));
  s += yAxis(f, ticks, y, o.yLabel);
  o.bars.forEach((b, i) => {
    const cx = f.left + slot * (i + 0.5);
    const h = Math.max(b.value > 0 ? 1 : 0, (b.value / top) * plotH);
    s += `<rect class="bar" x="${n1(cx - bw / 2)}" y="${n1(f.top + plotH - h)}" width="${n1(bw)}" height="${n1(h)}" fill="${b.color ?? PALETTE[0]}"><title>${esc(`${b.label}: ${b.detail ?? fmt(b.value)}`)}</title></rect>`;
    if (n <= 24 && b.value > 0) s += `<text x="${n1(cx)}" y="${n1(f.top + plotH - h - 4)}" text-anchor="middle" font-size="10" fill="#111">${esc(fmt(b.value))}</text>`;
    const ly = f.top + plotH + 14;
    if (rotate) s += `<text transform="translate(${n1(cx)} ${n1(ly)}) rotate(-40)" text-anchor="end" font-size="11" fill="#374151">${esc(b.label)}</text>`;
    else s += `<text x="${n1(cx)}" y="${n1(ly)}" text-anchor="middle" font-size="11" fill="#374151">${esc(b.label)}</text>`;
  });
  s += `<line x1="${f.left}" x2="${f.width - f.right}" y1="${n1(f.top + plotH)}" y2="${n1(f.top + plotH)}" stroke="#6b7280"/>`;
  s += xLabel(f, o.xLabel);
  return s + '</svg>';
}

/** Horizontal bars (categories with long names): one row per label, top to bottom. */
export function hBarChart(o: BarChartOptions): string {
  const fmt = o.valueFormat ?? compact;
  const labelChars = Math.min(34, Math.max(4, ...o.bars.map((b) => b.label.length)));
  const left = 16 + labelChars * 6.6;
  const rowH = 24;
  const f: Frame = { width: o.width ?? 960, height: 36 + Math.max(1, o.bars.length) * rowH + 40, top: 36, right: 70, bottom: 40, left };
  const max = Math.max(0, ...o.bars.map((b) => b.value));
  const ticks = niceTicks(0, max > 0 ? max : 1, 4);
  const top = ticks[ticks.length - 1]!;
  const plotW = f.width - f.left - f.right;
  const x = (v: number): number => f.left + (v / top) * plotW;
  let s = open(o.id, o.title, f, `${o.xLabel} per ${o.yLabel}: ${o.bars.map((b) => `${b.label} ${fmt(b.value)}`).join(', ')}`.slice(0, 2000));
  for (const t of ticks) {
    const tx = n1(x(t));
    s += `<line x1="${tx}" x2="${tx}" y1="${f.top}" y2="${f.height - f.bottom}" stroke="#e5e7eb"/>`;
    s += `<text x="${tx}" y="${f.height - f.bottom + 14}" text-anchor="middle" fill="#374151">${esc(compact(t))}</text>`;
  }
  o.bars.forEach((b, i) => {
    const cy = f.top + rowH * (i + 0.5);
    const w = Math.max(b.value > 0 ? 1 : 0, (b.value / top) * plotW);
    const label = b.label.length > labelChars ? `${b.label.slice(0, labelChars - 1)}…` : b.label;
    s += `<text x="${n1(f.left - 8)}" y="${n1(cy)}" text-anchor="end" dominant-baseline="middle" fill="#111"><title>${esc(b.label)}</title>${esc(label)}</text>`;
    s += `<rect class="bar" x="${n1(f.left)}" y="${n1(cy - rowH * 0.35)}" width="${n1(w)}" height="${n1(rowH * 0.7)}" fill="${b.color ?? PALETTE[0]}"><title>${esc(`${b.label}: ${b.detail ?? fmt(b.value)}`)}</title></rect>`;
    s += `<text x="${n1(f.left + w + 6)}" y="${n1(cy)}" dominant-baseline="middle" font-size="11" fill="#111">${esc(b.detail ?? fmt(b.value))}</text>`;
  });
  s += `<line x1="${f.left}" x2="${f.left}" y1="${f.top}" y2="${f.height - f.bottom}" stroke="#6b7280"/>`;
  s += xLabel(f, o.xLabel);
  return s + '</svg>';
}

export interface LineSeries {
  readonly name: string;
  readonly values: readonly (number | null)[];
  readonly color?: string;
  readonly dashed?: boolean;
}

export interface LineChartOptions {
  readonly id: string;
  readonly title: string;
  readonly x: readonly number[];
  readonly series: readonly LineSeries[];
  readonly xLabel: string;
  readonly yLabel: string;
  readonly width?: number;
  readonly height?: number;
  readonly xFormat?: (v: number) => string;
  readonly yFormat?: (v: number) => string;
  /** Draw a dot on every point (few points). Default: when there are at most 40. */
  readonly dots?: boolean;
  /** A logarithmic y axis (values ≤ 0 are not drawn). */
  readonly logY?: boolean;
}

/** Lines over a numeric x axis, with a legend; null values break a line. */
export function lineChart(o: LineChartOptions): string {
  const xf = o.xFormat ?? compact;
  const yf = o.yFormat ?? compact;
  const width = o.width ?? 960;
  const perRow = Math.max(1, Math.floor((width - 84) / 160));
  const legendRows = Math.ceil(o.series.length / perRow);
  const f: Frame = { width, height: o.height ?? 300 + (legendRows - 1) * 16, top: 36 + legendRows * 16, right: 20, bottom: 44, left: 64 };
  const xs = o.x.length > 0 ? o.x : [0];
  let xmin = Math.min(...xs);
  let xmax = Math.max(...xs);
  if (xmax === xmin) {
    xmin -= 0.5;
    xmax += 0.5;
  }
  let ymax = 0;
  let yminPos = Number.POSITIVE_INFINITY;
  for (const s of o.series) {
    for (const v of s.values) {
      if (v === null || !Number.isFinite(v)) continue;
      if (v > ymax) ymax = v;
      if (v > 0 && v < yminPos) yminPos = v;
    }
  }
  const plotW = f.width - f.left - f.right;
  const plotH = f.height - f.top - f.bottom;
  let yt: number[];
  let py: (v: number) => number;
  const log = o.logY === true && ymax > 0;
  if (log) {
    // Decades, with 2 and 5 between them when there are few decades.
    const lo = Math.floor(Math.log10(yminPos));
    const hi = Math.ceil(Math.log10(ymax));
    const decades = Math.max(1, hi - lo);
    yt = [];
    for (let d = lo; d <= hi; d++) for (const m of decades <= 3 ? [1, 2, 5] : [1]) if (m * 10 ** d <= 10 ** hi) yt.push(m * 10 ** d);
    const a = lo;
    py = (v: number): number => f.top + plotH - ((Math.log10(Math.max(v, 10 ** lo)) - a) / decades) * plotH;
  } else {
    yt = niceTicks(0, ymax > 0 ? ymax : 1);
    const ytop = yt[yt.length - 1]!;
    py = (v: number): number => f.top + plotH - (v / ytop) * plotH;
  }
  const px = (v: number): number => f.left + ((v - xmin) / (xmax - xmin)) * plotW;
  let s = open(o.id, o.title, f, `${o.yLabel} by ${o.xLabel} for ${o.series.map((x) => x.name).join(', ')}`.slice(0, 2000));
  s += yAxis(f, yt, py, log ? `${o.yLabel} (log scale)` : o.yLabel, yf);
  for (const t of niceTicks(xmin, xmax, 6)) {
    if (t < xmin - 1e-9 || t > xmax + 1e-9) continue;
    const tx = n1(px(t));
    s += `<line x1="${tx}" x2="${tx}" y1="${n1(f.top + plotH)}" y2="${n1(f.top + plotH + 4)}" stroke="#6b7280"/>`;
    s += `<text x="${tx}" y="${n1(f.top + plotH + 16)}" text-anchor="middle" fill="#374151">${esc(xf(t))}</text>`;
  }
  s += `<line x1="${f.left}" x2="${f.width - f.right}" y1="${n1(f.top + plotH)}" y2="${n1(f.top + plotH)}" stroke="#6b7280"/>`;
  const dots = o.dots ?? xs.length <= 40;
  o.series.forEach((ser, k) => {
    const color = ser.color ?? PALETTE[k % PALETTE.length]!;
    let d = '';
    let pen = false;
    let pts = '';
    ser.values.forEach((v, i) => {
      const xv = o.x[i];
      if (v === null || xv === undefined || !Number.isFinite(v) || (log && v <= 0)) {
        pen = false;
        return;
      }
      d += `${pen ? 'L' : 'M'}${n1(px(xv))} ${n1(py(v))}`;
      pen = true;
      if (dots) pts += `<circle cx="${n1(px(xv))}" cy="${n1(py(v))}" r="2.5" fill="${color}"><title>${esc(`${ser.name}, ${xf(xv)}: ${yf(v)}`)}</title></circle>`;
    });
    s += `<path class="line" d="${d || `M${f.left} ${n1(f.top + plotH)}`}" fill="none" stroke="${color}" stroke-width="2"${ser.dashed ? ' stroke-dasharray="6 4"' : ''}><title>${esc(ser.name)}</title></path>${pts}`;
    const lx = f.left + (k % perRow) * 160;
    const ly = 32 + Math.floor(k / perRow) * 16;
    s += `<g class="legend"><line x1="${n1(lx)}" x2="${n1(lx + 18)}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="3"${ser.dashed ? ' stroke-dasharray="6 4"' : ''}/>` +
      `<text x="${n1(lx + 24)}" y="${ly}" dominant-baseline="middle" fill="#111">${esc(ser.name.length > 22 ? `${ser.name.slice(0, 21)}…` : ser.name)}</text></g>`;
  });
  s += xLabel(f, o.xLabel);
  return s + '</svg>';
}
