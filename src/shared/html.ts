import { esc } from './svg.js';

/**
 * One self-contained HTML page: inline CSS and inline SVG only. The Content Security
 * Policy allows no script, no network and no external resource at all, so even text
 * that escaped escaping could not run or fetch anything.
 */
export function htmlPage(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="relent">
<title>${esc(title)}</title>
<style>
:root { color-scheme: light; }
body { margin: 0; background: #f6f7f9; color: #111827; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 16px 48px; }
h1, p, .meta { overflow-wrap: anywhere; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 0 0 10px; }
p { margin: 6px 0; }
.meta { color: #4b5563; }
section { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 16px 18px; margin: 16px 0; min-width: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { flex: 1 1 180px; background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 12px 14px; min-width: 0; }
.card b { display: block; font-size: 22px; }
.card span { color: #4b5563; font-size: 12px; }
svg.chart { display: block; max-width: 100%; height: auto; margin: 8px 0; }
/* Tables fit their card: cells wrap, and a table that still cannot fit scrolls inside its own box. */
.table-wrap { max-width: 100%; overflow-x: auto; margin: 8px 0; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 6px; border-bottom: 1px solid #e5e7eb; text-align: right; vertical-align: top; }
th { background: #f3f4f6; font-weight: 600; }
td { white-space: nowrap; }
th:first-child, td:first-child, td.text, th.text { text-align: left; }
td.text, td.wrap { white-space: normal; }
td.endpoint { text-align: left; white-space: normal; min-width: 12em; overflow-wrap: anywhere; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
td.verdict-cell { white-space: normal; min-width: 11em; }
.verdict { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; text-align: left; white-space: normal; }
.v-help { background: #dcfce7; color: #14532d; }
.v-help-a-little { background: #fef3c7; color: #78350f; }
.v-almost-never { background: #fee2e2; color: #7f1d1d; }
.v-not-enough-data, .v-no-retries { background: #e5e7eb; color: #374151; }
.note { color: #4b5563; font-size: 13px; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
footer { color: #6b7280; font-size: 12px; margin-top: 24px; }
</style>
</head>
<body>
<main>
${body}
</main>
</body>
</html>
`;
}

/** An HTML table in its scroll box; every cell is text (escaped). `classes` gives a class per column. */
export function htmlTable(header: readonly string[], rows: readonly (readonly string[])[], classes: readonly (string | null)[] = []): string {
  const cls = (i: number): string => (classes[i] ? ` class="${esc(classes[i]!)}"` : '');
  return (
    `<div class="table-wrap"><table><thead><tr>${header.map((h, i) => `<th${cls(i)}>${esc(h)}</th>`).join('')}</tr></thead><tbody>` +
    rows.map((r) => `<tr>${r.map((c, i) => `<td${cls(i)}>${esc(c)}</td>`).join('')}</tr>`).join('') +
    '</tbody></table></div>'
  );
}
