import { describe, it, expect } from 'vitest';
import fc from 'fast-check';
import { MAX_SANE_RETRY_AFTER_MS, parseRetryAfter, type RetryAfterParse } from '../../src/core/retry-after.js';
import { formatImfFixdate } from '../../src/core/http-date.js';

const NOW = Date.UTC(2024, 5, 1, 12, 0, 0); // fixed local wall clock
const ctx = { wallNowMs: NOW };
const HOUR = 3_600_000;

function delayOf(r: RetryAfterParse): number | undefined {
  return r.present && r.valid ? r.delayMs : undefined;
}

function problemOf(r: RetryAfterParse): string | undefined {
  return r.present && !r.valid ? r.problem : undefined;
}

describe('parseRetryAfter: presence', () => {
  it('absent header', () => {
    expect(parseRetryAfter(undefined, ctx)).toEqual({ present: false });
    expect(parseRetryAfter(null, ctx)).toEqual({ present: false });
  });

  it('empty or whitespace-only is present but malformed', () => {
    for (const v of ['', ' ', '\t', '  \t  ']) {
      expect(parseRetryAfter(v, ctx)).toEqual({ present: true, valid: false, problem: 'malformed' });
    }
  });
});

describe('parseRetryAfter: delay-seconds', () => {
  it('the RFC example `Retry-After: 120`', () => {
    expect(parseRetryAfter('120', ctx)).toEqual({
      present: true,
      valid: true,
      delayMs: 120_000,
      form: 'delay-seconds',
      skewCorrected: false,
    });
  });

  it('zero, leading zeros and surrounding OWS', () => {
    expect(delayOf(parseRetryAfter('0', ctx))).toBe(0);
    expect(delayOf(parseRetryAfter('000', ctx))).toBe(0);
    expect(delayOf(parseRetryAfter('007', ctx))).toBe(7000);
    expect(delayOf(parseRetryAfter(' \t30\t ', ctx))).toBe(30_000);
    expect(delayOf(parseRetryAfter('0'.repeat(10_000) + '5', ctx))).toBe(5000);
  });

  it('does not depend on the clock', () => {
    expect(delayOf(parseRetryAfter('5', { wallNowMs: Number.NaN }))).toBe(5000);
    expect(delayOf(parseRetryAfter('5', { wallNowMs: 0, dateHeader: 'Sun, 06 Nov 1994 08:49:37 GMT' }))).toBe(5000);
  });

  it('negative values', () => {
    for (const v of ['-5', '-0', '-1.5', ' -5 ', '-.5']) expect(problemOf(parseRetryAfter(v, ctx)), v).toBe('negative');
  });

  it('fractional values', () => {
    for (const v of ['1.5', '2.0', '0.5', '.5', '5.', ' 1.5 ']) {
      expect(problemOf(parseRetryAfter(v, ctx)), v).toBe('fractional');
    }
  });

  it('malformed values', () => {
    for (const v of [
      'soon',
      '+5',
      '1e3',
      '0x10',
      '5s',
      '1 2',
      '1\t2',
      '1,000',
      '1_000',
      '--5',
      '-',
      '.',
      '1.2.3',
      'Infinity',
      'NaN',
      '\n5',
      '5\r\n',
      '\u00a05',
      '１２０', // fullwidth digits
      '١٢٠', // Arabic-Indic digits
      'Sun, 06 Nov 1994 08:49:37 UTC',
      'sun, 06 Nov 1994 08:49:37 GMT',
    ]) {
      expect(problemOf(parseRetryAfter(v, ctx)), JSON.stringify(v)).toBe('malformed');
    }
  });

  it('any delay-seconds value is valid however far away (the policy cap decides, not the parser)', () => {
    expect(delayOf(parseRetryAfter('31622400', ctx))).toBe(366 * 86_400_000);
    expect(delayOf(parseRetryAfter('31622401', ctx))).toBe(31_622_401_000); // over 366 days: still a real request to wait
    expect(delayOf(parseRetryAfter('31536000', ctx))).toBe(365 * 86_400_000); // a year, as got's suite asks
    expect(delayOf(parseRetryAfter('999999999', ctx))).toBe(999_999_999_000);
    expect(delayOf(parseRetryAfter('999999999999', ctx))).toBe(999_999_999_999_000); // 12 significant digits: exact
  });

  it('huge digit strings are "forever" (Number.MAX_SAFE_INTEGER ms), never Infinity or a rounded number', () => {
    for (const v of [
      '1000000000000', // 13 significant digits
      '9007199254740993', // 2^53 + 1
      '1' + '0'.repeat(308),
      '9'.repeat(400), // Number() would be Infinity
      '1'.repeat(200_000),
    ]) {
      expect(delayOf(parseRetryAfter(v, ctx)), v.slice(0, 20)).toBe(Number.MAX_SAFE_INTEGER);
    }
    expect(delayOf(parseRetryAfter('0'.repeat(100_000) + '31622401', ctx))).toBe(31_622_401_000);
  });
});

describe('parseRetryAfter: HTTP-date', () => {
  it('accepts all three forms and reports which', () => {
    const at = Date.UTC(1994, 10, 6, 8, 49, 37);
    const c = { wallNowMs: at - 60_000 };
    expect(parseRetryAfter('Sun, 06 Nov 1994 08:49:37 GMT', c)).toEqual({
      present: true,
      valid: true,
      delayMs: 60_000,
      form: 'imf-fixdate',
      skewCorrected: false,
    });
    const r850 = parseRetryAfter('Sunday, 06-Nov-94 08:49:37 GMT', c);
    expect(r850.present && r850.valid && r850.form).toBe('rfc850');
    expect(delayOf(r850)).toBe(60_000);
    const asc = parseRetryAfter('Sun Nov  6 08:49:37 1994', c);
    expect(asc.present && asc.valid && asc.form).toBe('asctime');
    expect(delayOf(asc)).toBe(60_000);
    expect(delayOf(parseRetryAfter('  Sun, 06 Nov 1994 08:49:37 GMT\t', c))).toBe(60_000);
  });

  it('a date 2 s ahead of the server Date header gives 2000 ms, whatever the local clock says', () => {
    const serverNow = Date.UTC(2024, 5, 1, 12, 0, 0);
    const retryAt = formatImfFixdate(serverNow + 2000);
    const dateHeader = formatImfFixdate(serverNow);
    for (const localSkew of [HOUR, -HOUR, 0, 37_123]) {
      const r = parseRetryAfter(retryAt, { wallNowMs: serverNow + localSkew, dateHeader });
      expect(r).toEqual({ present: true, valid: true, delayMs: 2000, form: 'imf-fixdate', skewCorrected: true });
    }
  });

  it('skew correction works with an RFC 850 or asctime Date header', () => {
    const r = parseRetryAfter('Sat, 01 Jun 2024 12:00:05 GMT', {
      wallNowMs: NOW + HOUR,
      dateHeader: 'Saturday, 01-Jun-24 12:00:00 GMT',
    });
    expect(delayOf(r)).toBe(5000);
    const r2 = parseRetryAfter('Sat Jun  1 12:00:05 2024', { wallNowMs: NOW - HOUR, dateHeader: 'Sat Jun  1 12:00:00 2024' });
    expect(delayOf(r2)).toBe(5000);
  });

  it('a date in the past gives 0', () => {
    expect(parseRetryAfter('Sun, 06 Nov 1994 08:49:37 GMT', ctx)).toEqual({
      present: true,
      valid: true,
      delayMs: 0,
      form: 'imf-fixdate',
      skewCorrected: false,
    });
    expect(delayOf(parseRetryAfter(formatImfFixdate(NOW), ctx))).toBe(0);
    expect(delayOf(parseRetryAfter(formatImfFixdate(NOW - 1000), ctx))).toBe(0);
    const r = parseRetryAfter(formatImfFixdate(NOW - 5000), { wallNowMs: NOW + HOUR, dateHeader: formatImfFixdate(NOW) });
    expect(r).toEqual({ present: true, valid: true, delayMs: 0, form: 'imf-fixdate', skewCorrected: true });
  });

  it('an invalid or missing Date header falls back to the local clock', () => {
    const retryAt = formatImfFixdate(NOW + 10_000);
    for (const dateHeader of [undefined, null, '', 'yesterday', 'sat, 01 Jun 2024 12:00:00 GMT', 'Sat, 31 Jun 2024 12:00:00 GMT', '1717243200']) {
      const r = parseRetryAfter(retryAt, { wallNowMs: NOW, dateHeader });
      expect(r, String(dateHeader)).toEqual({
        present: true,
        valid: true,
        delayMs: 10_000,
        form: 'imf-fixdate',
        skewCorrected: false,
      });
    }
  });

  it('rounds a fractional wall clock up to a whole millisecond', () => {
    expect(delayOf(parseRetryAfter(formatImfFixdate(NOW + 1000), { wallNowMs: NOW + 0.25 }))).toBe(1000);
    expect(delayOf(parseRetryAfter(formatImfFixdate(NOW + 1000), { wallNowMs: NOW - 0.25 }))).toBe(1001);
  });

  it('a date more than 366 days ahead is valid: the wait the server asked for', () => {
    expect(delayOf(parseRetryAfter(formatImfFixdate(NOW + MAX_SANE_RETRY_AFTER_MS + 1000), ctx))).toBe(MAX_SANE_RETRY_AFTER_MS + 1000);
    expect(delayOf(parseRetryAfter('Fri, 31 Dec 9999 23:59:59 GMT', ctx))).toBe(Date.UTC(9999, 11, 31, 23, 59, 59) - NOW);
    // measured against the server clock when skew-corrected
    const r = parseRetryAfter('Sat, 01 Jun 2024 12:00:00 GMT', { wallNowMs: NOW, dateHeader: 'Sun, 06 Nov 1994 08:49:37 GMT' });
    expect(delayOf(r)).toBe(Date.UTC(2024, 5, 1, 12) - Date.UTC(1994, 10, 6, 8, 49, 37));
  });

  it('without a usable clock an HTTP-date cannot become a delay', () => {
    for (const wallNowMs of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      expect(problemOf(parseRetryAfter('Sat, 01 Jun 2024 12:00:00 GMT', { wallNowMs }))).toBe('absurd');
    }
    // the Date header rescues it
    const r = parseRetryAfter('Sat, 01 Jun 2024 12:00:03 GMT', { wallNowMs: Number.NaN, dateHeader: 'Sat, 01 Jun 2024 12:00:00 GMT' });
    expect(delayOf(r)).toBe(3000);
  });

  it('never throws on untyped misuse', () => {
    for (const v of [42, {}, [], true, Symbol('x')]) {
      expect(problemOf(parseRetryAfter(v as unknown as string, ctx))).toBe('malformed');
    }
    expect(() => parseRetryAfter('Sat, 01 Jun 2024 12:00:00 GMT', undefined as unknown as { wallNowMs: number })).not.toThrow();
    expect(() => parseRetryAfter('5', null as unknown as { wallNowMs: number })).not.toThrow();
    expect(() => parseRetryAfter('Sat, 01 Jun 2024 12:00:00 GMT', { wallNowMs: NOW, dateHeader: 7 as unknown as string })).not.toThrow();
  });

  it('stays fast on long adversarial input', () => {
    const started = Date.now();
    for (const v of [
      ' '.repeat(300_000) + '5' + ' '.repeat(300_000) + 'x',
      '1'.repeat(1_000_000) + '.',
      '-' + '1'.repeat(1_000_000) + 'x',
      '.'.repeat(1_000_000),
      'Sun, 06 Nov 1994 08:49:37 GMT'.repeat(30_000),
    ]) {
      expect(problemOf(parseRetryAfter(v, ctx))).toBeDefined();
    }
    expect(Date.now() - started).toBeLessThan(1000);
  });
});

describe('parseRetryAfter: properties', () => {
  const anyString = fc.oneof(
    fc.string(),
    fc.string({ unit: 'binary' }),
    fc.string({ unit: 'grapheme' }),
    fc.stringMatching(/^[ \t]*-?[0-9]{0,20}(?:\.[0-9]{0,3})?[ \t]*$/),
    fc.string({ unit: fc.constantFrom(...'0123456789 \t-.+eE,:GMTSunNov') }),
    fc.integer({ min: -62167219200000, max: 253402300799999 }).map(formatImfFixdate),
  );
  const anyClock = fc.oneof(fc.double(), fc.integer({ min: -1e15, max: 1e15 }));
  const anyDateHeader = fc.oneof(
    fc.constant(undefined),
    fc.constant(null),
    fc.string(),
    fc.integer({ min: -62167219200000, max: 253402300799999 }).map(formatImfFixdate),
  );

  it('never throws, and every valid result is a finite integer delay in [0, MAX_SAFE_INTEGER]', () => {
    fc.assert(
      fc.property(fc.oneof(anyString, fc.constant(null), fc.constant(undefined)), anyClock, anyDateHeader, (v, wallNowMs, dateHeader) => {
        const r = parseRetryAfter(v, { wallNowMs, dateHeader });
        expect(r.present).toBe(v !== null && v !== undefined);
        if (r.present && r.valid) {
          expect(Number.isInteger(r.delayMs)).toBe(true);
          expect(Object.is(r.delayMs, -0)).toBe(false);
          expect(r.delayMs).toBeGreaterThanOrEqual(0);
          expect(r.delayMs).toBeLessThanOrEqual(Number.MAX_SAFE_INTEGER);
          if (r.form === 'delay-seconds') expect(r.skewCorrected).toBe(false);
        }
      }),
      { numRuns: 5000 },
    );
  });

  it('any integer 0..10^7 written in decimal (optionally zero-padded, OWS-wrapped) is n * 1000 ms', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 10_000_000 }),
        fc.nat({ max: 5 }),
        fc.stringMatching(/^[ \t]{0,3}$/),
        fc.stringMatching(/^[ \t]{0,3}$/),
        (n, zeros, lead, trail) => {
          const r = parseRetryAfter(lead + '0'.repeat(zeros) + String(n) + trail, ctx);
          expect(r).toEqual({ present: true, valid: true, delayMs: n * 1000, form: 'delay-seconds', skewCorrected: false });
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('a value with any character outside [0-9] after trimming is never delay-seconds', () => {
    fc.assert(
      fc.property(anyString, anyClock, (v, wallNowMs) => {
        const trimmed = v.replace(/^[ \t]+/, '').replace(/[ \t]+$/, '');
        fc.pre(!/^[0-9]+$/.test(trimmed));
        const r = parseRetryAfter(v, { wallNowMs });
        if (r.present && r.valid) expect(r.form).not.toBe('delay-seconds');
      }),
      { numRuns: 3000 },
    );
  });

  it('a digit-only value is always valid delay-seconds: exact up to 12 significant digits, else MAX_SAFE_INTEGER', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[0-9]{1,40}$/), (digits) => {
        const r = parseRetryAfter(digits, ctx);
        const exact = BigInt(digits) < 10n ** 12n;
        expect(r).toEqual({
          present: true,
          valid: true,
          delayMs: exact ? Number(BigInt(digits) * 1000n) : Number.MAX_SAFE_INTEGER,
          form: 'delay-seconds',
          skewCorrected: false,
        });
      }),
      { numRuns: 2000 },
    );
  });

  it('an IMF-fixdate d ms ahead (whole seconds) is a delay of d, with or without skew correction', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: Date.UTC(1971, 0, 1), max: Date.UTC(9000, 0, 1) }),
        fc.integer({ min: 0, max: MAX_SANE_RETRY_AFTER_MS / 1000 }),
        fc.integer({ min: -10 * 365 * 86_400_000, max: 10 * 365 * 86_400_000 }),
        (serverSecondMs, seconds, localSkew) => {
          const serverNow = Math.floor(serverSecondMs / 1000) * 1000;
          const retryAt = formatImfFixdate(serverNow + seconds * 1000);
          const corrected = parseRetryAfter(retryAt, { wallNowMs: serverNow + localSkew, dateHeader: formatImfFixdate(serverNow) });
          expect(corrected).toEqual({ present: true, valid: true, delayMs: seconds * 1000, form: 'imf-fixdate', skewCorrected: true });
          const local = parseRetryAfter(retryAt, { wallNowMs: serverNow });
          expect(local).toEqual({ present: true, valid: true, delayMs: seconds * 1000, form: 'imf-fixdate', skewCorrected: false });
        },
      ),
      { numRuns: 2000 },
    );
  });
});
