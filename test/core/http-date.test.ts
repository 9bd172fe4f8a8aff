import { describe, it, expect } from 'vitest';
import fc from 'fast-check';
import { formatImfFixdate, parseHttpDate } from '../../src/core/http-date.js';

const RFC_INSTANT = 784111777000; // Sun, 06 Nov 1994 08:49:37 GMT
const NOW_2024 = Date.UTC(2024, 5, 1, 12, 0, 0); // 2024-06-01T12:00:00Z, a fixed wall clock

// Independent renderers built on the platform Date (not on the code under test).
const FULL_DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const SHORT_DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const p2 = (n: number): string => String(n).padStart(2, '0');
const hms = (d: Date): string => `${p2(d.getUTCHours())}:${p2(d.getUTCMinutes())}:${p2(d.getUTCSeconds())}`;

function renderRfc850(ms: number): string {
  const d = new Date(ms);
  return `${FULL_DAYS[d.getUTCDay()]}, ${p2(d.getUTCDate())}-${MONTHS[d.getUTCMonth()]}-${p2(d.getUTCFullYear() % 100)} ${hms(d)} GMT`;
}

function renderAsctime(ms: number): string {
  const d = new Date(ms);
  const day = String(d.getUTCDate()).padStart(2, ' ');
  return `${SHORT_DAYS[d.getUTCDay()]} ${MONTHS[d.getUTCMonth()]} ${day} ${hms(d)} ${String(d.getUTCFullYear()).padStart(4, '0')}`;
}

const YEAR_0000 = -62167219200000; // 0000-01-01T00:00:00Z (proleptic Gregorian)
const YEAR_9999_END = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

describe('parseHttpDate: the three RFC 9110 forms', () => {
  it('parses the RFC examples to the same instant', () => {
    expect(parseHttpDate('Sun, 06 Nov 1994 08:49:37 GMT', NOW_2024)).toBe(RFC_INSTANT);
    expect(parseHttpDate('Sunday, 06-Nov-94 08:49:37 GMT', NOW_2024)).toBe(RFC_INSTANT);
    expect(parseHttpDate('Sun Nov  6 08:49:37 1994', NOW_2024)).toBe(RFC_INSTANT);
  });

  it('formats the RFC example', () => {
    expect(formatImfFixdate(RFC_INSTANT)).toBe('Sun, 06 Nov 1994 08:49:37 GMT');
    expect(formatImfFixdate(RFC_INSTANT + 999)).toBe('Sun, 06 Nov 1994 08:49:37 GMT');
    expect(formatImfFixdate(0)).toBe('Thu, 01 Jan 1970 00:00:00 GMT');
    expect(formatImfFixdate(-1)).toBe('Wed, 31 Dec 1969 23:59:59 GMT');
    expect(formatImfFixdate(YEAR_0000)).toBe('Sat, 01 Jan 0000 00:00:00 GMT');
    expect(formatImfFixdate(YEAR_9999_END)).toBe('Fri, 31 Dec 9999 23:59:59 GMT');
  });

  it('formatImfFixdate rejects unrepresentable instants', () => {
    expect(() => formatImfFixdate(Number.NaN)).toThrow(RangeError);
    expect(() => formatImfFixdate(Number.POSITIVE_INFINITY)).toThrow(RangeError);
    expect(() => formatImfFixdate(YEAR_9999_END + 1)).toThrow(RangeError);
    expect(() => formatImfFixdate(YEAR_0000 - 1)).toThrow(RangeError);
  });

  it('accepts asctime days padded with a space or written with two digits', () => {
    expect(parseHttpDate('Wed Nov 16 08:49:37 1994', NOW_2024)).toBe(Date.UTC(1994, 10, 16, 8, 49, 37));
    expect(parseHttpDate('Sun Nov 06 08:49:37 1994', NOW_2024)).toBe(RFC_INSTANT); // 2DIGIT allows it
    expect(parseHttpDate('Sun Nov 6 08:49:37 1994', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Sun Nov   6 08:49:37 1994', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Sun Nov  0 08:49:37 1994', NOW_2024)).toBeUndefined();
  });

  it('trims surrounding OWS (SP / HTAB) only', () => {
    expect(parseHttpDate('  \tSun, 06 Nov 1994 08:49:37 GMT\t ', NOW_2024)).toBe(RFC_INSTANT);
    expect(parseHttpDate('\nSun, 06 Nov 1994 08:49:37 GMT', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Sun, 06 Nov 1994 08:49:37 GMT\r\n', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('\u00a0Sun, 06 Nov 1994 08:49:37 GMT', NOW_2024)).toBeUndefined();
  });

  it('does not check the day name against the date (the grammar does not)', () => {
    expect(parseHttpDate('Mon, 06 Nov 1994 08:49:37 GMT', NOW_2024)).toBe(RFC_INSTANT);
    expect(parseHttpDate('Friday, 06-Nov-94 08:49:37 GMT', NOW_2024)).toBe(RFC_INSTANT);
    expect(parseHttpDate('Tue Nov  6 08:49:37 1994', NOW_2024)).toBe(RFC_INSTANT);
  });
});

describe('parseHttpDate: calendar validity', () => {
  it('accepts 29 Feb only in leap years', () => {
    expect(parseHttpDate('Thu, 29 Feb 2024 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(2024, 1, 29));
    expect(parseHttpDate('Tue, 29 Feb 2000 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(2000, 1, 29));
    expect(parseHttpDate('Wed, 29 Feb 2023 00:00:00 GMT', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Mon, 29 Feb 1900 00:00:00 GMT', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Mon, 29 Feb 2100 00:00:00 GMT', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Thu Feb 29 00:00:00 2024', NOW_2024)).toBe(Date.UTC(2024, 1, 29));
    expect(parseHttpDate('Thu Feb 29 00:00:00 2023', NOW_2024)).toBeUndefined();
  });

  it('checks RFC 850 leap days against the resolved four-digit year', () => {
    // "00" at a 2024 clock is 2000 (a leap year); at a 2080 clock it is 2100 (not one).
    expect(parseHttpDate('Tuesday, 29-Feb-00 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(2000, 1, 29));
    expect(parseHttpDate('Monday, 29-Feb-00 00:00:00 GMT', Date.UTC(2080, 0, 1))).toBeUndefined();
    expect(parseHttpDate('Monday, 28-Feb-00 00:00:00 GMT', Date.UTC(2080, 0, 1))).toBe(Date.UTC(2100, 1, 28));
  });

  it('rejects days that do not exist', () => {
    for (const bad of [
      'Thu, 31 Apr 2024 00:00:00 GMT',
      'Thu, 31 Jun 2024 00:00:00 GMT',
      'Thu, 31 Sep 2024 00:00:00 GMT',
      'Thu, 31 Nov 2024 00:00:00 GMT',
      'Thu, 30 Feb 2024 00:00:00 GMT',
      'Thu, 00 Jan 2024 00:00:00 GMT',
      'Thu, 32 Jan 2024 00:00:00 GMT',
      'Thursday, 31-Apr-24 00:00:00 GMT',
      'Thursday, 00-Apr-24 00:00:00 GMT',
      'Thu Apr 31 00:00:00 2024',
    ]) {
      expect(parseHttpDate(bad, NOW_2024), bad).toBeUndefined();
    }
    expect(parseHttpDate('Wed, 31 Jan 2024 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(2024, 0, 31));
    expect(parseHttpDate('Tue, 31 Dec 2024 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(2024, 11, 31));
  });

  it('range-checks the time of day', () => {
    expect(parseHttpDate('Sun, 06 Nov 1994 23:59:59 GMT', NOW_2024)).toBe(Date.UTC(1994, 10, 6, 23, 59, 59));
    expect(parseHttpDate('Sun, 06 Nov 1994 24:00:00 GMT', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Sun, 06 Nov 1994 08:60:00 GMT', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Sun, 06 Nov 1994 08:49:61 GMT', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Sunday, 06-Nov-94 24:00:00 GMT', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Sun Nov  6 08:49:99 1994', NOW_2024)).toBeUndefined();
  });

  it('treats second 60 (leap second) as the next second', () => {
    expect(parseHttpDate('Sat, 31 Dec 2016 23:59:60 GMT', NOW_2024)).toBe(Date.UTC(2017, 0, 1, 0, 0, 0));
    expect(parseHttpDate('Saturday, 31-Dec-16 23:59:60 GMT', NOW_2024)).toBe(Date.UTC(2017, 0, 1, 0, 0, 0));
    expect(parseHttpDate('Sat Dec 31 23:59:60 2016', NOW_2024)).toBe(Date.UTC(2017, 0, 1, 0, 0, 0));
  });

  it('accepts the whole 4-digit year range', () => {
    expect(parseHttpDate('Sat, 01 Jan 0000 00:00:00 GMT', NOW_2024)).toBe(YEAR_0000);
    expect(parseHttpDate('Fri, 31 Dec 9999 23:59:59 GMT', NOW_2024)).toBe(YEAR_9999_END - 999);
    expect(parseHttpDate('Sun, 06 Nov 94 08:49:37 GMT', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Sun, 06 Nov 01994 08:49:37 GMT', NOW_2024)).toBeUndefined();
    expect(parseHttpDate('Sun Nov  6 08:49:37 94', NOW_2024)).toBeUndefined();
  });
});

describe('parseHttpDate: RFC 850 two-digit years (50-year rule)', () => {
  // wallNow = 2024-06-01T12:00:00Z, so the limit is 2074-06-01T12:00:00Z.
  it('reads a year more than 50 years ahead as the most recent past one', () => {
    expect(parseHttpDate('Sunday, 06-Nov-94 08:49:37 GMT', NOW_2024)).toBe(RFC_INSTANT); // not 2094
    expect(parseHttpDate('Monday, 01-Jan-99 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(1999, 0, 1));
    expect(parseHttpDate('Monday, 01-Jan-75 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(1975, 0, 1));
  });

  it('otherwise picks the nearest century', () => {
    expect(parseHttpDate('Monday, 01-Jan-24 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(2024, 0, 1));
    expect(parseHttpDate('Monday, 01-Jan-30 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(2030, 0, 1));
    expect(parseHttpDate('Monday, 01-Jan-74 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(2074, 0, 1));
    expect(parseHttpDate('Monday, 01-Jan-00 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(2000, 0, 1));
  });

  it('applies the limit to the exact timestamp, not just the year', () => {
    expect(parseHttpDate('Friday, 01-Jun-74 12:00:00 GMT', NOW_2024)).toBe(Date.UTC(2074, 5, 1, 12, 0, 0));
    expect(parseHttpDate('Friday, 01-Jun-74 12:00:01 GMT', NOW_2024)).toBe(Date.UTC(1974, 5, 1, 12, 0, 1));
    expect(parseHttpDate('Sunday, 01-Jul-74 00:00:00 GMT', NOW_2024)).toBe(Date.UTC(1974, 6, 1));
  });

  it('moves into the next century when the wall clock is late in this one', () => {
    const now2080 = Date.UTC(2080, 0, 1);
    expect(parseHttpDate('Monday, 01-Jan-10 00:00:00 GMT', now2080)).toBe(Date.UTC(2110, 0, 1));
    expect(parseHttpDate('Monday, 01-Jan-31 00:00:00 GMT', now2080)).toBe(Date.UTC(2031, 0, 1));
    expect(parseHttpDate('Monday, 01-Jan-79 00:00:00 GMT', now2080)).toBe(Date.UTC(2079, 0, 1));
  });

  it('cannot resolve an RFC 850 year without a finite wall clock (other forms are unaffected)', () => {
    expect(parseHttpDate('Sunday, 06-Nov-94 08:49:37 GMT', Number.NaN)).toBeUndefined();
    expect(parseHttpDate('Sunday, 06-Nov-94 08:49:37 GMT', Number.POSITIVE_INFINITY)).toBeUndefined();
    expect(parseHttpDate('Sun, 06 Nov 1994 08:49:37 GMT', Number.NaN)).toBe(RFC_INSTANT);
    expect(parseHttpDate('Sun Nov  6 08:49:37 1994', Number.NaN)).toBe(RFC_INSTANT);
  });
});

describe('parseHttpDate: strict grammar', () => {
  it('is case-sensitive', () => {
    for (const bad of [
      'sun, 06 Nov 1994 08:49:37 GMT',
      'SUN, 06 Nov 1994 08:49:37 GMT',
      'Sun, 06 nov 1994 08:49:37 GMT',
      'Sun, 06 NOV 1994 08:49:37 GMT',
      'Sun, 06 Nov 1994 08:49:37 gmt',
      'Sun, 06 Nov 1994 08:49:37 Gmt',
      'sunday, 06-Nov-94 08:49:37 GMT',
      'Sunday, 06-nov-94 08:49:37 GMT',
      'Sunday, 06-Nov-94 08:49:37 gmt',
      'sun Nov  6 08:49:37 1994',
      'Sun nov  6 08:49:37 1994',
    ]) {
      expect(parseHttpDate(bad, NOW_2024), bad).toBeUndefined();
    }
  });

  it('requires GMT and nothing else', () => {
    for (const bad of [
      'Sun, 06 Nov 1994 08:49:37',
      'Sun, 06 Nov 1994 08:49:37 UTC',
      'Sun, 06 Nov 1994 08:49:37 +0000',
      'Sun, 06 Nov 1994 08:49:37 Z',
      'Sunday, 06-Nov-94 08:49:37 UTC',
      'Sunday, 06-Nov-94 08:49:37',
      'Sun Nov  6 08:49:37 1994 GMT',
      'Sun, 06 Nov 1994 08:49:37 GMT GMT',
    ]) {
      expect(parseHttpDate(bad, NOW_2024), bad).toBeUndefined();
    }
  });

  it('rejects wrong names, separators and widths', () => {
    for (const bad of [
      '',
      ' ',
      'Sun,  06 Nov 1994 08:49:37 GMT',
      'Sun, 06  Nov 1994 08:49:37 GMT',
      'Sun, 06 Nov 1994  08:49:37 GMT',
      'Sun, 06 Nov 1994 08:49:37  GMT',
      'Sun,06 Nov 1994 08:49:37 GMT',
      'Sun 06 Nov 1994 08:49:37 GMT',
      'Sun, 6 Nov 1994 08:49:37 GMT',
      'Sun, 06-Nov-1994 08:49:37 GMT',
      'Sun, 06 Nov 1994 8:49:37 GMT',
      'Sun, 06 Nov 1994 08:49 GMT',
      'Sun, 06 Nov 1994 08.49.37 GMT',
      'Sun,\t06 Nov 1994 08:49:37 GMT',
      'Sunday, 06 Nov 1994 08:49:37 GMT',
      'Sun, 06-Nov-94 08:49:37 GMT',
      'Sunday, 6-Nov-94 08:49:37 GMT',
      'Sunday, 06-Nov-94  08:49:37 GMT',
      'Sund, 06 Nov 1994 08:49:37 GMT',
      'Sun, 06 November 1994 08:49:37 GMT',
      'Sun, 06 Nov 1994 08:49:37.000 GMT',
      'Sunday Nov  6 08:49:37 1994',
      'Sun, Nov  6 08:49:37 1994',
      'Sun Nov  6 08:49:37  1994',
      'Sun Nov  6  08:49:37 1994',
      '1994-11-06T08:49:37Z',
      '784111777',
      'Sun, ０6 Nov 1994 08:49:37 GMT', // fullwidth digit
      'Sun, ٠6 Nov 1994 08:49:37 GMT', // Arabic-Indic digit
    ]) {
      expect(parseHttpDate(bad, NOW_2024), JSON.stringify(bad)).toBeUndefined();
    }
  });

  it('never throws on non-string input from untyped callers', () => {
    for (const v of [undefined, null, 42, {}, [], Symbol('x')]) {
      expect(parseHttpDate(v as unknown as string, NOW_2024)).toBeUndefined();
    }
  });

  it('stays fast on long adversarial input', () => {
    const inputs = [
      ' '.repeat(200_000) + 'x' + ' '.repeat(200_000),
      'Sun, ' + '0'.repeat(500_000),
      'Sunday, 06-Nov-94 08:49:37 GMT'.repeat(20_000),
      '\t'.repeat(500_000),
    ];
    const started = Date.now();
    for (const input of inputs) expect(parseHttpDate(input, NOW_2024)).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(1000);
  });
});

describe('parseHttpDate: properties', () => {
  const instant = fc.integer({ min: YEAR_0000, max: YEAR_9999_END });
  const wallNow = fc.integer({ min: Date.UTC(1900, 0, 1), max: Date.UTC(2200, 0, 1) });

  it('never throws and returns whole seconds or undefined, on any string', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.string({ unit: 'grapheme' })), fc.double(), (s, now) => {
        const r = parseHttpDate(s, now);
        expect(r === undefined || (Number.isInteger(r) && r % 1000 === 0)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('formatImfFixdate -> parseHttpDate round-trips at second precision', () => {
    fc.assert(
      fc.property(instant, wallNow, (t, now) => {
        const text = formatImfFixdate(t);
        expect(parseHttpDate(text, now)).toBe(Math.floor(t / 1000) * 1000);
      }),
      { numRuns: 2000 },
    );
  });

  it('agrees with the platform Date on IMF-fixdate rendering and value', () => {
    fc.assert(
      fc.property(instant, (t) => {
        const text = formatImfFixdate(t);
        expect(text).toBe(new Date(t).toUTCString());
        // V8's Date.parse reads small years as 19xx/20xx (0000 -> 2000), so compare from year 1000 on.
        if (t >= Date.UTC(1000, 0, 1)) expect(parseHttpDate(text, 0)).toBe(Date.parse(text));
      }),
      { numRuns: 1000 },
    );
  });

  it('asctime rendering of an instant parses to the same value', () => {
    fc.assert(
      fc.property(instant, wallNow, (t, now) => {
        expect(parseHttpDate(renderAsctime(t), now)).toBe(Math.floor(t / 1000) * 1000);
      }),
      { numRuns: 2000 },
    );
  });

  it('RFC 850 rendering parses to the same value within the 50-year window', () => {
    const FIFTY_YEARS_MINUS_A_DAY = (50 * 365 + 11 - 1) * 86_400_000; // any 50 years hold at least 11 leap days
    fc.assert(
      fc.property(
        fc.integer({ min: Date.UTC(1900, 0, 1), max: Date.UTC(2200, 0, 1) }),
        fc.integer({ min: -FIFTY_YEARS_MINUS_A_DAY, max: FIFTY_YEARS_MINUS_A_DAY }),
        (now, offset) => {
          const t = now + offset;
          const expected = Math.floor(t / 1000) * 1000;
          expect(parseHttpDate(renderRfc850(t), now)).toBe(expected);
          expect(parseHttpDate(formatImfFixdate(t), now)).toBe(expected);
        },
      ),
      { numRuns: 3000 },
    );
  });

  it('RFC 850 results always lie within (now - 50y, now + 50y]', () => {
    fc.assert(
      fc.property(instant, wallNow, (t, now) => {
        const r = parseHttpDate(renderRfc850(t), now);
        if (r === undefined) {
          // only a 29 Feb whose resolved year is not a leap year can be rejected
          const d = new Date(t);
          expect(d.getUTCMonth() === 1 && d.getUTCDate() === 29).toBe(true);
          return;
        }
        const nowDate = new Date(now);
        const limit = new Date(now);
        limit.setUTCFullYear(nowDate.getUTCFullYear() + 50);
        const floor = new Date(now);
        floor.setUTCFullYear(nowDate.getUTCFullYear() - 50);
        expect(r).toBeLessThanOrEqual(limit.getTime());
        expect(r).toBeGreaterThan(floor.getTime() - 86_400_000);
        expect(new Date(r).getUTCFullYear() % 100).toBe(new Date(t).getUTCFullYear() % 100);
      }),
      { numRuns: 2000 },
    );
  });

  it('changing the case of one name letter, or adding a space, breaks an IMF-fixdate (or parses the same)', () => {
    fc.assert(
      fc.property(instant, fc.nat(), fc.boolean(), (t, pos, insertSpace) => {
        const text = formatImfFixdate(t);
        const expected = Math.floor(t / 1000) * 1000;
        if (insertSpace) {
          const at = pos % (text.length + 1);
          const mutated = text.slice(0, at) + ' ' + text.slice(at);
          const r = parseHttpDate(mutated, NOW_2024);
          // only OWS at either end is tolerated, and then the value is unchanged
          if (at === 0 || at === text.length) expect(r).toBe(expected);
          else expect(r).toBeUndefined();
        } else {
          // letters are in the day name (0-2), month name (8-10) and GMT (26-28)
          const letterPositions = [0, 1, 2, 8, 9, 10, 26, 27, 28];
          const at = letterPositions[pos % letterPositions.length] as number;
          const ch = text.charAt(at);
          const flipped = ch === ch.toUpperCase() ? ch.toLowerCase() : ch.toUpperCase();
          const mutated = text.slice(0, at) + flipped + text.slice(at + 1);
          expect(mutated).not.toBe(text);
          expect(parseHttpDate(mutated, NOW_2024)).toBeUndefined();
        }
      }),
      { numRuns: 2000 },
    );
  });
});
