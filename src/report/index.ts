// relent/report: reads relent's JSONL event logs in constant memory and reports whether
// retries help, as text, JSON or one self-contained HTML page with inline SVG
// charts. Every export is named here (no `export *`).

export { EventLogAnalyzer, analyzeEventText, analyzeEventStream, analyzeEventFile, REPORT_DEFAULTS, REPORT_DECISIONS, REPORT_REASONS } from './analyze.js';
export type { ReportOptions, EventReport, EndpointReport, MalformedLine, Distribution } from './types.js';
export { retryVerdict, VERDICT_THRESHOLDS } from './verdict.js';
export type { RetryVerdict, VerdictKind } from './verdict.js';
export type { SketchSummary, SketchBin } from './sketch.js';
export type { SeriesBucket } from './series.js';
export { formatReport } from './format.js';
export { renderReportHtml } from './html.js';
