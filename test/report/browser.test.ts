// The HTML reports in a real browser: Debian's Chromium (/usr/bin/chromium), driven by
// playwright-core with executablePath (playwright never downloads a browser here).
// Each page is opened 800 and 1,400 px wide. Checks that every chart renders (an SVG with
// non-zero size and marks in it); that no element sticks out of its card (tables wrap,
// or scroll inside their own box with the verdict column in view); that no series of a
// line chart is hidden (taking it away changes the picture); that the page logs no
// error, runs no script and loads nothing; and saves screenshots under test/artifacts/
// (gitignored). Under CI Chromium must be present (.ci/run installs it); elsewhere the
// test is skipped with a message when it is missing.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { analyzeEventText } from '../../src/report/analyze.js';
import { renderReportHtml } from '../../src/report/html.js';
import { renderSimulationHtml } from '../../src/sim/html.js';
import { runBrooker } from '../../src/sim/brooker.js';
import { runLayers } from '../../src/sim/layers.js';
import { OVERLOAD_DEFAULTS, runOverload } from '../../src/sim/overload.js';
import { demoLog, HOSTILE_ENDPOINT } from './fixtures.js';

const CHROMIUM = '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const ARTIFACTS = join(dirname(fileURLToPath(import.meta.url)), '..', 'artifacts');
const WIDTHS = [800, 1400] as const;
const present = existsSync(CHROMIUM);
const inCi = process.env.CI === 'true';

if (!present && !inCi) {
  console.warn(`test/report/browser.test.ts: skipped — ${CHROMIUM} is missing (install it: apt-get update && apt-get install -y chromium)`);
}

describe('Chromium is there under CI', () => {
  it.runIf(inCi)(`${CHROMIUM} exists (.ci/run installs it)`, () => {
    expect(existsSync(CHROMIUM)).toBe(true);
  });
});

// Run in the page (plain JavaScript: this project's TypeScript has no DOM types).
const OVERFLOWS = `(() => {
  const out = [];
  const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (typeof e.className === 'string' && e.className ? '.' + e.className.split(' ')[0] : '');
  for (const card of document.querySelectorAll('section, .card')) {
    const c = card.getBoundingClientRect();
    for (const e of card.querySelectorAll('*')) {
      const wrap = e.closest('.table-wrap');
      if (wrap && wrap !== e) continue;
      const r = e.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      const by = Math.max(r.right - c.right, c.left - r.left);
      if (by > 0.5) out.push(name(card) + ' › ' + name(e) + ': by ' + Math.round(by) + ' px');
    }
  }
  for (const wrap of document.querySelectorAll('.table-wrap')) {
    const w = wrap.getBoundingClientRect();
    for (const cell of wrap.querySelectorAll('tr > :first-child')) {
      if (cell.getBoundingClientRect().right > w.right + 0.5) out.push('first column of a table cut off at ' + Math.round(w.right) + ' px');
    }
  }
  return out;
})()`;

/** Pixels (of two PNGs, base64) that differ visibly. */
const CHANGED_PIXELS = `async (a, b) => {
  const load = (s) => new Promise((resolve, reject) => {
    const img = new Image();
    img.onload = () => resolve(img);
    img.onerror = reject;
    img.src = 'data:image/png;base64,' + s;
  });
  const pixels = (img) => {
    const c = document.createElement('canvas');
    c.width = img.width;
    c.height = img.height;
    const ctx = c.getContext('2d');
    ctx.drawImage(img, 0, 0);
    return ctx.getImageData(0, 0, img.width, img.height).data;
  };
  const [x, y] = await Promise.all([load(a), load(b)]);
  const p = pixels(x);
  const q = pixels(y);
  let changed = 0;
  for (let i = 0; i < p.length; i += 4) if (Math.abs(p[i] - q[i]) + Math.abs(p[i + 1] - q[i + 1]) + Math.abs(p[i + 2] - q[i + 2]) > 48) changed++;
  return changed;
}`;

interface PageCheck {
  errors: string[];
  requests: string[];
  dialogs: string[];
}

describe.skipIf(!present)('HTML reports in headless Chromium, 800 and 1,400 px wide', () => {
  let browser: Browser;
  /** A blank page for comparing screenshots (kept apart from the pages under test and their request log). */
  let scratch: Page;
  const dir = mkdtempSync(join(tmpdir(), 'relent-html-'));
  const pages: Record<string, string> = {};

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true });
    scratch = await browser.newPage();
    pages.report = renderReportHtml(analyzeEventText(demoLog(), { source: 'demo.jsonl' }));
    pages['simulate-brooker'] = renderSimulationHtml({ scenario: 'brooker', result: runBrooker({ runs: 3, clients: [10, 20, 40, 60, 80, 100] }) });
    // The calibration set-up (so that the measured columns are there), shortened: a 10 s fault, one run, every contender.
    pages['simulate-overload'] = renderSimulationHtml(
      { scenario: 'overload', result: runOverload({ runs: 1, durationMs: 30_000 }) },
      'relent simulate overload — the calibration set-up, one run',
    );
    pages['simulate-layers'] = renderSimulationHtml({ scenario: 'layers', result: runLayers({ runs: 1, durationMs: 5000 }) });
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function open(name: string, width: number): Promise<{ page: Page; check: PageCheck }> {
    const file = join(dir, `${name}.html`);
    writeFileSync(file, pages[name]!);
    const page = await browser.newPage({ viewport: { width, height: 900 } });
    const check: PageCheck = { errors: [], requests: [], dialogs: [] };
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') check.errors.push(`${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => check.errors.push(`pageerror: ${e.message}`));
    page.on('request', (r) => check.requests.push(r.url()));
    page.on('dialog', (d) => {
      check.dialogs.push(d.message());
      void d.dismiss();
    });
    await page.goto(pathToFileURL(file).href, { waitUntil: 'load' });
    return { page, check };
  }

  /** Every chart's size and how many bars/lines/markers it drew. */
  async function charts(page: Page): Promise<Record<string, { width: number; height: number; marks: number }>> {
    return page.$$eval('svg.chart', (svgs) =>
      Object.fromEntries(
        svgs.map((s) => {
          const box = s.getBoundingClientRect();
          return [
            s.getAttribute('data-chart') ?? '?',
            { width: box.width, height: box.height, marks: s.querySelectorAll('rect.bar, path.line, .marker').length },
          ];
        }),
      ),
    );
  }

  /**
   * Elements that stick out of their card (a section or a .card) by more than half a
   * pixel, as "card › element: by N px". Inside a table's scroll box, cells may run past
   * the box (they scroll); the box itself must fit, and its first column (the verdict)
   * must be in view without scrolling.
   */
  async function overflows(page: Page): Promise<string[]> {
    return page.evaluate(OVERFLOWS) as Promise<string[]>;
  }

  /** Tables that need scrolling at this width (allowed at 800 px only). */
  async function scrolling(page: Page): Promise<string[]> {
    return page.$$eval('.table-wrap', (wraps) => wraps.filter((w) => w.scrollWidth > w.clientWidth + 1).map((w) => w.querySelector('th')?.textContent ?? '?'));
  }

  /**
   * For every series of every line chart: how many pixels of the chart change when that
   * series alone is taken away. Zero means it is hidden under the others.
   */
  async function seriesVisibility(page: Page): Promise<Record<string, number>> {
    const result: Record<string, number> = {};
    for (const svg of await page.$$('svg.chart')) {
      const chart = await svg.getAttribute('data-chart');
      const groups = await svg.$$('g.series');
      if (groups.length === 0) continue;
      await svg.scrollIntoViewIfNeeded();
      const before = (await svg.screenshot()).toString('base64');
      for (const g of groups) {
        const series = await g.getAttribute('data-series');
        await g.evaluate((e) => e.setAttribute('visibility', 'hidden'));
        const after = (await svg.screenshot()).toString('base64');
        await g.evaluate((e) => e.removeAttribute('visibility'));
        result[`${chart}/${series}`] = (await scratch.evaluate(`(${CHANGED_PIXELS})(${JSON.stringify(before)}, ${JSON.stringify(after)})`)) as number;
      }
    }
    return result;
  }

  async function common(name: string, width: number, expectCharts: string[]): Promise<{ page: Page; check: PageCheck }> {
    const opened = await open(name, width);
    const found = await charts(opened.page);
    expect(Object.keys(found).sort()).toEqual([...expectCharts].sort());
    for (const [id, c] of Object.entries(found)) {
      expect(c.width, id).toBeGreaterThan(100);
      expect(c.height, id).toBeGreaterThan(width < 1000 ? 60 : 100);
      expect(c.marks, id).toBeGreaterThan(0);
    }
    expect(await overflows(opened.page), `${name} at ${width} px`).toEqual([]);
    if (width >= 1400) expect(await scrolling(opened.page), `${name} at ${width} px: tables that scroll`).toEqual([]);
    const visible = await seriesVisibility(opened.page);
    for (const [series, pixels] of Object.entries(visible)) expect(pixels, `${name} at ${width} px: ${series} is hidden`).toBeGreaterThanOrEqual(20);
    await opened.page.screenshot({ path: join(ARTIFACTS, `${name}-${width}.png`), fullPage: true });
    expect(await opened.page.$$eval('script', (x) => x.length)).toBe(0);
    expect(await opened.page.$$eval('img', (x) => x.length)).toBe(0);
    return opened;
  }

  function done(check: PageCheck): void {
    expect(check.errors).toEqual([]);
    expect(check.dialogs).toEqual([]);
    expect(check.requests.every((u) => u.startsWith('file://'))).toBe(true);
  }

  it.each(WIDTHS)(
    'the event-log report at %i px: charts, verdict first, the hostile endpoint is text',
    async (width) => {
      const { page, check } = await common('report', width, ['attempts', 'delays', 'durations', 'observations', 'reasons', 'series']);
      expect(await page.$$eval('svg[data-chart="series"] g.series', (g) => g.map((x) => x.getAttribute('data-series')))).toEqual([
        'all attempts (load)',
        'retries',
        'first attempts',
      ]);
      expect(await page.$$eval('#endpoints th', (th) => th[0]!.textContent)).toBe('verdict');
      const cells = await page.$$eval('td.endpoint', (tds) => tds.map((t) => t.textContent));
      expect(cells).toContain(HOSTILE_ENDPOINT);
      const verdicts = await page.$$eval('.verdict', (v) => v.map((x) => x.className));
      expect(verdicts).toEqual(expect.arrayContaining(['verdict v-help', 'verdict v-almost-never', 'verdict v-help-a-little', 'verdict v-not-enough-data']));
      await page.close();
      done(check);
    },
    120_000,
  );

  it.each(WIDTHS)(
    'simulate brooker at %i px: five strategies, each line visible (markers and dashes)',
    async (width) => {
      const { page, check } = await common('simulate-brooker', width, ['brooker-time', 'brooker-time-log', 'brooker-work']);
      const series = await page.$$eval('svg[data-chart="brooker-work"] g.series', (g) =>
        g.map((x) => ({
          dash: x.querySelector('path.line')!.getAttribute('stroke-dasharray'),
          marker: x.querySelector('.marker')!.tagName + (x.querySelector('.marker')!.getAttribute('d')?.length ?? 0),
        })),
      );
      expect(series).toHaveLength(5);
      expect(new Set(series.map((s) => s.dash)).size).toBe(5);
      await page.close();
      done(check);
    },
    120_000,
  );

  it.each(WIDTHS)(
    'simulate overload at %i px: amplification on a log scale, tables that fit, load over time per policy',
    async (width) => {
      const { page, check } = await common('simulate-overload', width, ['overload-amplification', 'overload-load']);
      // Amplification spans decades: a log axis, on which the smallest bar still has length.
      expect(await page.$eval('svg[data-chart="overload-amplification"]', (s) => s.textContent)).toContain('(log scale)');
      const bars = await page.$$eval('svg[data-chart="overload-amplification"] rect.bar', (r) => r.map((x) => Number(x.getAttribute('width'))));
      expect(bars).toHaveLength(OVERLOAD_DEFAULTS.policies.length);
      expect(Math.min(...bars) / Math.max(...bars)).toBeGreaterThan(0.1);
      // Load over time: one line per policy, and the capacity.
      const lines = await page.$$eval('svg[data-chart="overload-load"] g.series', (g) => g.map((x) => x.getAttribute('data-series')));
      expect(lines).toEqual([...OVERLOAD_DEFAULTS.policies.map((p) => p.name), 'capacity']);
      expect(await page.$$eval('svg[data-chart="overload-load"] rect.band', (r) => r.length)).toBe(1);
      expect(await page.$$eval('#overload table, #overload-load table', (t) => t.length)).toBe(2);
      await page.close();
      done(check);
    },
    180_000,
  );

  it.each(WIDTHS)(
    'simulate layers at %i px',
    async (width) => {
      const { page, check } = await common('simulate-layers', width, ['layers-db']);
      await page.close();
      done(check);
    },
    60_000,
  );
});
