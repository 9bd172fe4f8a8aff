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
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="${esc(id)}" role="img" aria-labelledby="${esc(id)}-t" width="${f.width}" height="${f.height}" viewBox="0 0 ${f.width} ${f.height}" ${FONT} font-size="12">` +
    `<title id="${esc(id)}-t">${esc(title)}</title><desc>${esc(desc)}</desc>` +
    `<rect x="0" y="0" width="${f.width}" height="${f.height}" fill="#ffffff"/>` +
    `<text x="${f.left}" y="20" font-size="14" font-weight="600" fill="#111">${esc(title)}</text>`
  );
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

/** A value axis: linear from 0, or logarithmic over whole decades. */
interface Scale {
  readonly ticks: number[];
  /** 0 at the axis' start, 1 at its end. */
  readonly at: (v: number) => number;
  readonly log: boolean;
}

/**
 * Whether values span decades: the largest positive value is at least `ratio` times the
 * smallest, so that on a linear axis the small ones would flatten to nothing.
 */
export function spansDecades(values: readonly number[], ratio = 30): boolean {
  let min = Infinity;
  let max = 0;
  for (const v of values) {
    if (!(v > 0) || !Number.isFinite(v)) continue;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return max > 0 && max / min >= ratio;
}

/** Log axis from the decade below the smallest positive value (so that it still has length) to the decade above the largest. */
function logScale(values: readonly number[]): Scale {
  const pos = values.filter((v) => v > 0 && Number.isFinite(v));
  const min = Math.min(...pos);
  const max = Math.max(...pos);
  let lo = Math.floor(Math.log10(min));
  if (min === 10 ** lo) lo -= 1; // a bar at exactly the axis' start would have no length
  const hi = Math.max(lo + 1, Math.ceil(Math.log10(max)));
  const decades = hi - lo;
  const ticks: number[] = [];
  for (let d = lo; d <= hi; d++) for (const m of decades <= 2 ? [1, 2, 5] : [1]) if (m * 10 ** d <= 10 ** hi) ticks.push(Number((m * 10 ** d).toPrecision(6)));
  return { ticks, log: true, at: (v) => (v > 0 ? Math.max(0, Math.min(1, (Math.log10(v) - lo) / decades)) : 0) };
}

function valueScale(values: readonly number[], log: boolean | 'auto', target: number): Scale {
  if (log === true || (log === 'auto' && spansDecades(values))) {
    if (values.some((v) => v > 0)) return logScale(values);
  }
  const max = Math.max(0, ...values);
  const ticks = niceTicks(0, max > 0 ? max : 1, target);
  const top = ticks[ticks.length - 1]!;
  return { ticks, log: false, at: (v) => v / top };
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
  /**
   * A logarithmic value axis: always (true), never (false), or when the values span
   * decades (the default: the largest at least 30 times the smallest positive one), so
   * that one large bar does not flatten all the others. The axis label says so.
   */
  readonly log?: boolean | 'auto';
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
  const scale = valueScale(
    o.bars.map((b) => b.value),
    o.log ?? 'auto',
    5,
  );
  const plotH = f.height - f.top - f.bottom;
  const y = (v: number): number => f.top + plotH - scale.at(v) * plotH;
  const slot = (f.width - f.left - f.right) / n;
  const bw = Math.max(1, Math.min(60, slot * 0.78));
  let s = open(
    o.id,
    o.title,
    f,
    `${o.yLabel} by ${o.xLabel}${scale.log ? ' (log scale)' : ''}: ${o.bars.map((b) => `${b.label} ${fmt(b.value)}`).join(', ')}`.slice(0, 2000),
  );
  s += yAxis(f, scale.ticks, y, scale.log ? `${o.yLabel} (log scale)` : o.yLabel);
  o.bars.forEach((b, i) => {
    const cx = f.left + slot * (i + 0.5);
    const h = Math.max(b.value > 0 ? 2 : 0, scale.at(b.value) * plotH);
    s += `<rect class="bar" x="${n1(cx - bw / 2)}" y="${n1(f.top + plotH - h)}" width="${n1(bw)}" height="${n1(h)}" fill="${b.color ?? PALETTE[0]}"><title>${esc(`${b.label}: ${b.detail ?? fmt(b.value)}`)}</title></rect>`;
    if (n <= 24 && b.value > 0)
      s += `<text x="${n1(cx)}" y="${n1(f.top + plotH - h - 4)}" text-anchor="middle" font-size="10" fill="#111">${esc(fmt(b.value))}</text>`;
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
  const scale = valueScale(
    o.bars.map((b) => b.value),
    o.log ?? 'auto',
    4,
  );
  const plotW = f.width - f.left - f.right;
  const x = (v: number): number => f.left + scale.at(v) * plotW;
  let s = open(
    o.id,
    o.title,
    f,
    `${o.xLabel} per ${o.yLabel}${scale.log ? ' (log scale)' : ''}: ${o.bars.map((b) => `${b.label} ${fmt(b.value)}`).join(', ')}`.slice(0, 2000),
  );
  for (const t of scale.ticks) {
    const tx = n1(x(t));
    s += `<line x1="${tx}" x2="${tx}" y1="${f.top}" y2="${f.height - f.bottom}" stroke="#e5e7eb"/>`;
    s += `<text x="${tx}" y="${f.height - f.bottom + 14}" text-anchor="middle" fill="#374151">${esc(compact(t))}</text>`;
  }
  o.bars.forEach((b, i) => {
    const cy = f.top + rowH * (i + 0.5);
    const w = Math.max(b.value > 0 ? 2 : 0, scale.at(b.value) * plotW);
    const label = b.label.length > labelChars ? `${b.label.slice(0, labelChars - 1)}…` : b.label;
    s += `<text x="${n1(f.left - 8)}" y="${n1(cy)}" text-anchor="end" dominant-baseline="middle" fill="#111"><title>${esc(b.label)}</title>${esc(label)}</text>`;
    s += `<rect class="bar" x="${n1(f.left)}" y="${n1(cy - rowH * 0.35)}" width="${n1(w)}" height="${n1(rowH * 0.7)}" fill="${b.color ?? PALETTE[0]}"><title>${esc(`${b.label}: ${b.detail ?? fmt(b.value)}`)}</title></rect>`;
    s += `<text x="${n1(f.left + w + 6)}" y="${n1(cy)}" dominant-baseline="middle" font-size="11" fill="#111">${esc(b.detail ?? fmt(b.value))}</text>`;
  });
  s += `<line x1="${f.left}" x2="${f.left}" y1="${f.top}" y2="${f.height - f.bottom}" stroke="#6b7280"/>`;
  s += xLabel(f, scale.log ? `${o.xLabel} (log scale)` : o.xLabel);
  return s + '</svg>';
}

export interface LineSeries {
  readonly name: string;
  readonly values: readonly (number | null)[];
  readonly color?: string;
  /** A dashed line (the default is a dash pattern of its own per series, the first solid). */
  readonly dashed?: boolean;
  /** A reference line (a limit, a capacity): thin, grey unless coloured, no markers. */
  readonly reference?: boolean;
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
  /** A marker on every point (true), on some (false: every few points, so shapes still tell series apart), or by count (default: every point up to 40). */
  readonly dots?: boolean;
  /** A logarithmic y axis (values ≤ 0 are not drawn): always, never, or when values span decades ('auto'). Default: never. */
  readonly logY?: boolean | 'auto';
  /** A shaded stretch of the x axis with a label (e.g. a fault window). */
  readonly band?: { readonly from: number; readonly to: number; readonly label: string };
}

/** Dash patterns, one per series (the first solid), so that lines that coincide still show each other. */
export const DASHES = ['', '9 4', '2 3', '12 3 3 3', '5 5', '1 5', '14 4', '6 2 2 2'] as const;
/** Marker shapes, one per series: circle, square, triangle, diamond, triangle down, cross, plus, star. */
export const MARKERS = ['circle', 'square', 'triangle', 'diamond', 'triangle-down', 'cross', 'plus', 'star'] as const;

function marker(shape: (typeof MARKERS)[number], x: number, y: number, color: string, title: string): string {
  const r = 4;
  const t = `<title>${esc(title)}</title>`;
  const p = (d: string, filled = true): string =>
    `<path class="marker" d="${d}" fill="${filled ? color : 'none'}" stroke="${filled ? '#ffffff' : color}" stroke-width="${filled ? 1 : 2}">${t}</path>`;
  const X = n1(x);
  const Y = n1(y);
  switch (shape) {
    case 'circle':
      return `<circle class="marker" cx="${X}" cy="${Y}" r="${r}" fill="${color}" stroke="#ffffff" stroke-width="1">${t}</circle>`;
    case 'square':
      return p(`M${n1(x - r)} ${n1(y - r)}h${2 * r}v${2 * r}h${-2 * r}Z`);
    case 'triangle':
      return p(`M${X} ${n1(y - r - 1)}L${n1(x + r + 1)} ${n1(y + r)}L${n1(x - r - 1)} ${n1(y + r)}Z`);
    case 'triangle-down':
      return p(`M${X} ${n1(y + r + 1)}L${n1(x + r + 1)} ${n1(y - r)}L${n1(x - r - 1)} ${n1(y - r)}Z`);
    case 'diamond':
      return p(`M${X} ${n1(y - r - 1)}L${n1(x + r + 1)} ${Y}L${X} ${n1(y + r + 1)}L${n1(x - r - 1)} ${Y}Z`);
    case 'cross':
      return p(`M${n1(x - r)} ${n1(y - r)}L${n1(x + r)} ${n1(y + r)}M${n1(x - r)} ${n1(y + r)}L${n1(x + r)} ${n1(y - r)}`, false);
    case 'plus':
      return p(`M${n1(x - r - 1)} ${Y}H${n1(x + r + 1)}M${X} ${n1(y - r - 1)}V${n1(y + r + 1)}`, false);
    case 'star': {
      let d = '';
      for (let i = 0; i < 10; i++) {
        const a = (Math.PI / 5) * i - Math.PI / 2;
        const rr = i % 2 === 0 ? r + 1.5 : r / 2;
        d += `${i === 0 ? 'M' : 'L'}${n1(x + rr * Math.cos(a))} ${n1(y + rr * Math.sin(a))}`;
      }
      return p(`${d}Z`);
    }
  }
}

/**
 * Lines over a numeric x axis, with a legend; null values break a line. Each series has
 * its own colour, dash pattern and marker shape (in the legend too), so that series
 * that run together or on top of each other can still be told apart, in colour or not.
 */
export function lineChart(o: LineChartOptions): string {
  const xf = o.xFormat ?? compact;
  const yf = o.yFormat ?? compact;
  const width = o.width ?? 960;
  const perRow = Math.max(1, Math.floor((width - 84) / 170));
  const legendRows = Math.ceil(o.series.length / perRow);
  const f: Frame = { width, height: o.height ?? 300 + (legendRows - 1) * 18, top: 36 + legendRows * 18, right: 20, bottom: 44, left: 64 };
  const xs = o.x.length > 0 ? o.x : [0];
  let xmin = Math.min(...xs);
  let xmax = Math.max(...xs);
  if (xmax === xmin) {
    xmin -= 0.5;
    xmax += 0.5;
  }
  const all: number[] = [];
  for (const ser of o.series) for (const v of ser.values) if (v !== null && Number.isFinite(v)) all.push(v);
  const ymax = Math.max(0, ...all);
  const plotW = f.width - f.left - f.right;
  const plotH = f.height - f.top - f.bottom;
  const log = ymax > 0 && (o.logY === true || (o.logY === 'auto' && spansDecades(all)));
  const scale = log ? logScale(all) : valueScale(all, false, 5);
  const py = (v: number): number => f.top + plotH - scale.at(v) * plotH;
  const px = (v: number): number => f.left + ((v - xmin) / (xmax - xmin)) * plotW;
  let s = open(o.id, o.title, f, `${o.yLabel}${log ? ' (log scale)' : ''} by ${o.xLabel} for ${o.series.map((x) => x.name).join(', ')}`.slice(0, 2000));
  if (o.band) {
    const a = px(Math.max(xmin, o.band.from));
    const b = px(Math.min(xmax, o.band.to));
    if (b > a) {
      s += `<rect class="band" x="${n1(a)}" y="${f.top}" width="${n1(b - a)}" height="${n1(plotH)}" fill="#f3f4f6"/>`;
      s += `<text x="${n1((a + b) / 2)}" y="${f.top + 12}" text-anchor="middle" font-size="11" fill="#4b5563">${esc(o.band.label)}</text>`;
    }
  }
  s += yAxis(f, scale.ticks, py, log ? `${o.yLabel} (log scale)` : o.yLabel, yf);
  for (const t of niceTicks(xmin, xmax, 6)) {
    if (t < xmin - 1e-9 || t > xmax + 1e-9) continue;
    const tx = n1(px(t));
    s += `<line x1="${tx}" x2="${tx}" y1="${n1(f.top + plotH)}" y2="${n1(f.top + plotH + 4)}" stroke="#6b7280"/>`;
    s += `<text x="${tx}" y="${n1(f.top + plotH + 16)}" text-anchor="middle" fill="#374151">${esc(xf(t))}</text>`;
  }
  s += `<line x1="${f.left}" x2="${f.width - f.right}" y1="${n1(f.top + plotH)}" y2="${n1(f.top + plotH)}" stroke="#6b7280"/>`;
  const n = xs.length;
  const every = (o.dots ?? n <= 40) ? 1 : Math.max(1, Math.ceil(n / 12));
  const drawn = o.series.filter((x) => !x.reference).length;
  let k = 0;
  o.series.forEach((ser, i) => {
    const ref = ser.reference === true;
    const idx = ref ? -1 : k++;
    const color = ser.color ?? (ref ? '#6b7280' : PALETTE[idx % PALETTE.length]!);
    // Beyond eight series the colours repeat; the dash and the marker then shift, so no two series look alike.
    const round = Math.floor(Math.max(0, idx) / PALETTE.length);
    const dash = ser.dashed ? '6 4' : ref ? '3 3' : DASHES[(idx + 3 * round) % DASHES.length]!;
    const shape = MARKERS[(Math.max(0, idx) + round) % MARKERS.length]!;
    // Markers of different series fall on different points when there are many points.
    const offset = every > 1 && drawn > 0 ? Math.floor((idx * every) / drawn) : 0;
    let d = '';
    let pen = false;
    let pts = '';
    ser.values.forEach((v, j) => {
      const xv = o.x[j];
      if (v === null || xv === undefined || !Number.isFinite(v) || (log && v <= 0)) {
        pen = false;
        return;
      }
      d += `${pen ? 'L' : 'M'}${n1(px(xv))} ${n1(py(v))}`;
      pen = true;
      if (!ref && (j - offset) % every === 0) pts += marker(shape, px(xv), py(v), color, `${ser.name}, ${xf(xv)}: ${yf(v)}`);
    });
    const dashAttr = dash ? ` stroke-dasharray="${dash}"` : '';
    s += `<g class="series" data-series="${esc(ser.name)}"><path class="line" d="${d || `M${f.left} ${n1(f.top + plotH)}`}" fill="none" stroke="${color}" stroke-width="${ref ? 1.5 : 2}"${dashAttr}><title>${esc(ser.name)}</title></path>${pts}</g>`;
    const lx = f.left + (i % perRow) * 170;
    const ly = 32 + Math.floor(i / perRow) * 18;
    s +=
      `<g class="legend"><line x1="${n1(lx)}" x2="${n1(lx + 26)}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="${ref ? 1.5 : 2.5}"${dashAttr}/>` +
      (ref ? '' : marker(shape, lx + 13, ly, color, ser.name)) +
      `<text x="${n1(lx + 32)}" y="${ly}" dominant-baseline="middle" fill="#111">${esc(ser.name.length > 22 ? `${ser.name.slice(0, 21)}…` : ser.name)}</text></g>`;
  });
  s += xLabel(f, o.xLabel);
  return s + '</svg>';
}
