/**
 * The plain-text table of every command: a header, a rule of dashes, columns two spaces
 * apart. The first column is left-aligned, the others right-aligned (`true`: the last is
 * left-aligned text too), or per column as `align` says.
 */
export function textTable(header: readonly string[], rows: readonly (readonly string[])[], align: boolean | readonly ('l' | 'r')[] = false): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const left = (i: number, n: number): boolean => (Array.isArray(align) ? align[i] === 'l' : i === 0 || (align === true && i === n - 1));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (left(i, cells.length) ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n') + '\n';
}
