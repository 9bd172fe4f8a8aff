// relent/report: reads relent's JSONL event logs in constant memory and reports whether
// retries help, as text, JSON or one self-contained HTML page with inline SVG
// charts. Every export is named here (no `export *`).

export { EventLogAnalyzer, analyzeEventText, analyzeEventStream, analyzeEventFile, printable, REPORT_DEFAULTS, REPORT_DECISIONS, REPORT_REASONS } from './analyze.js';
export type { ReportOptions, EventReport, EndpointReport, MalformedLine, Distribution } from './analyze.js';
export { retryVerdict, percent, VERDICT_THRESHOLDS } from './verdict.js';
export type { RetryVerdict, VerdictKind } from './verdict.js';
export { LogSketch, SKETCH_SUB_BUCKETS } from './sketch.js';
export type { SketchSummary, SketchBin } from './sketch.js';
export { AdaptiveSeries, nextWidth } from './series.js';
export type { SeriesBucket } from './series.js';
export { LineSplitter } from './lines.js';
export { formatReport, duration, binLabel } from './format.js';
export { renderReportHtml } from './html.js';
export { barChart, hBarChart, lineChart, niceTicks, esc } from '../shared/svg.js';
export type { Bar, BarChartOptions, LineSeries, LineChartOptions } from '../shared/svg.js';
