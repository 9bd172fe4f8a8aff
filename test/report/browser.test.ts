// The HTML reports in a real browser: Debian's Chromium (/usr/bin/chromium), driven by
// playwright-core with executablePath (playwright never downloads a browser here).
// Checks that every chart renders (SVG present with non-zero size, with marks in it),
// that the page logs no error, runs no script and loads nothing, and saves screenshots
// under test/artifacts/ (gitignored). Under CI Chromium must be present (.ci/run
// installs it); elsewhere the test is skipped with a message when it is missing.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { analyzeEventText } from '../../src/report/analyze.js';
import { renderReportHtml } from '../../src/report/html.js';
import { renderSimulationHtml } from '../../src/report/sim-html.js';
import { runBrooker } from '../../src/sim/brooker.js';
import { runOverload } from '../../src/sim/overload.js';
import { demoLog, HOSTILE_ENDPOINT } from './fixtures.js';

const CHROMIUM = '/usr/bin/chromium';
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const ARTIFACTS = join(dirname(fileURLToPath(import.meta.url)), '..', 'artifacts');
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

interface PageCheck {
  errors: string[];
  requests: string[];
  dialogs: string[];
}

describe.skipIf(!present)('HTML reports in headless Chromium', () => {
  let browser: Browser;
  const dir = mkdtempSync(join(tmpdir(), 'relent-html-'));

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function open(html: string, name: string): Promise<{ page: Page; check: PageCheck }> {
    const file = join(dir, `${name}.html`);
    writeFileSync(file, html);
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
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

  /** Every chart's size and how many bars/lines/dots it drew. */
  async function charts(page: Page): Promise<Record<string, { width: number; height: number; marks: number }>> {
    return page.$$eval('svg.chart', (svgs) =>
      Object.fromEntries(svgs.map((s) => {
        const box = s.getBoundingClientRect();
        return [s.getAttribute('data-chart') ?? '?', { width: box.width, height: box.height, marks: s.querySelectorAll('rect.bar, path.line, circle').length }];
      })),
    );
  }

  it('the event-log report: every chart renders, nothing runs, nothing loads, the hostile endpoint is text', async () => {
    const report = analyzeEventText(demoLog(), { source: 'demo.jsonl' });
    const { page, check } = await open(renderReportHtml(report), 'report');
    const found = await charts(page);
    expect(Object.keys(found).sort()).toEqual(['attempts', 'delays', 'durations', 'observations', 'reasons', 'series']);
    for (const [id, c] of Object.entries(found)) {
      expect(c.width, id).toBeGreaterThan(100);
      expect(c.height, id).toBeGreaterThan(100);
      expect(c.marks, id).toBeGreaterThan(0);
    }
    // The series draws three lines; the bar charts one bar per category.
    expect(await page.$$eval('svg[data-chart="series"] path.line', (p) => p.map((x) => (x.getAttribute('d') ?? '').length))).toEqual([expect.any(Number), expect.any(Number), expect.any(Number)]);
    expect(await page.$$eval('svg[data-chart="reasons"] rect.bar', (b) => b.length)).toBe(report.reasons.length);
    expect(await page.$$eval('script', (x) => x.length)).toBe(0);
    expect(await page.$$eval('img', (x) => x.length)).toBe(0);
    const cells = await page.$$eval('td.endpoint', (tds) => tds.map((t) => t.textContent));
    expect(cells).toContain(HOSTILE_ENDPOINT);
    const verdicts = await page.$$eval('.verdict', (v) => v.map((x) => x.className));
    expect(verdicts).toEqual(expect.arrayContaining(['verdict v-help', 'verdict v-almost-never', 'verdict v-help-a-little', 'verdict v-not-enough-data']));
    await page.screenshot({ path: join(ARTIFACTS, 'report.png'), fullPage: true });
    await page.close();
    expect(check.errors).toEqual([]);
    expect(check.dialogs).toEqual([]);
    expect(check.requests.every((u) => u.startsWith('file://'))).toBe(true);
  }, 60_000);

  it('the simulator reports: brooker line charts, overload table and bars', async () => {
    const brooker = runBrooker({ runs: 3, clients: [10, 20, 40, 60, 80, 100] });
    let { page, check } = await open(renderSimulationHtml({ scenario: 'brooker', result: brooker }), 'brooker');
    let found = await charts(page);
    expect(Object.keys(found).sort()).toEqual(['brooker-time', 'brooker-time-log', 'brooker-work']);
    for (const c of Object.values(found)) {
      expect(c.width).toBeGreaterThan(100);
      expect(c.height).toBeGreaterThan(100);
    }
    expect(await page.$$eval('svg[data-chart="brooker-work"] path.line', (p) => p.length)).toBe(5);
    await page.screenshot({ path: join(ARTIFACTS, 'simulate-brooker.png'), fullPage: true });
    await page.close();
    expect(check.errors).toEqual([]);

    const overload = runOverload({ runs: 1, durationMs: 8000, faults: [{ startMs: 2000, endMs: 5000, capacityPerSec: 80 }], policies: [{ name: 'none', policy: { maxAttempts: 1 }, budget: false }, { name: 'relent', policy: {} }] });
    ({ page, check } = await open(renderSimulationHtml({ scenario: 'overload', result: overload }), 'overload'));
    found = await charts(page);
    expect(found['overload-amplification']!.width).toBeGreaterThan(100);
    expect(await page.$$eval('table tbody tr', (r) => r.length)).toBe(2);
    await page.screenshot({ path: join(ARTIFACTS, 'simulate-overload.png'), fullPage: true });
    await page.close();
    expect(check.errors).toEqual([]);
  }, 120_000);
});
