// HTTP-date parsing: Go's net/http TestParseTime, CPython's http.cookiejar and email.utils
// date tests, and the examples and rules of RFC 9110 §5.6.7 and §10.2.3, answered by
// relent's HTTP-date parser (the one parseRetryAfter and every Date/Retry-After reader use).
//
// relent parses the grammar of RFC 9110 exactly (the three forms, case-sensitive, GMT);
// the Python parsers are lenient e-mail (RFC 5322) and cookie parsers, so most of their
// extra forms differ on purpose (#strict-http-date).

import { parseRetryAfter } from '../../../src/index.js';
import { parseHttpDate } from '../../../src/core/http-date.js';
import { group, WALL_2026, type Source } from '../harness.js';

const GO = 'src/net/http/header_test.go TestParseTime';
const JAR = 'Lib/test/test_http_cookiejar.py DateTimeTests';
const EU = 'Lib/test/test_email/test_utils.py DateTimeTests';
const EM = 'Lib/test/test_email/test_email.py TestMiscellaneous';
const P2D = 'Lib/test/test_email/test_parsedate_to_datetime.py';
const RFC = 'RFC 9110 §5.6.7';

const STRICT =
  'relent parses the HTTP-date grammar of RFC 9110 exactly; other forms are invalid, and a Retry-After that carries one falls back to the backoff ([strict HTTP-date](#strict-http-date))';

type Parsed = string | 'invalid';

/** The instant an HTTP-date names, as an ISO string (whole seconds), or 'invalid'. */
function parsed(value: string, wallNowMs = WALL_2026): Parsed {
  const ms = parseHttpDate(value, wallNowMs);
  return ms === undefined ? 'invalid' : new Date(ms).toISOString().replace('.000Z', 'Z');
}

const NOV6 = '1994-11-06T08:49:37Z';
const FEB3 = '1994-02-03T00:00:00Z';

const go = group<string, Parsed>({
  title: 'Go net/http ParseTime',
  check: (v) => parsed(v),
  cases: [
    { id: 'empty Date is an error', from: `${GO} #0`, input: '', expected: 'invalid' },
    { id: '"invalid" is an error', from: `${GO} #1`, input: 'invalid', expected: 'invalid' },
    { id: 'an ISO 8601 timestamp is an error', from: `${GO} #2`, input: '1994-11-06T08:49:37Z00:00', expected: 'invalid' },
    { id: 'IMF-fixdate', from: `${GO} #3`, input: 'Sun, 06 Nov 1994 08:49:37 GMT', expected: NOV6 },
    { id: 'RFC 850 date', from: `${GO} #4`, input: 'Sunday, 06-Nov-94 08:49:37 GMT', expected: NOV6 },
    { id: 'ANSI C asctime date', from: `${GO} #5`, input: 'Sun Nov  6 08:49:37 1994', expected: NOV6 },
  ],
});

const http2time = group<string, Parsed>({
  title: 'CPython http.cookiejar http2time',
  check: (v) => parsed(v),
  cases: [
    {
      id: 'http2time "01 Jan 2001"',
      from: `${JAR}.test_http2time`,
      input: '01 Jan 2001',
      expected: '2001-01-01T00:00:00Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'http2time "03-Feb-20"',
      from: `${JAR}.test_http2time`,
      input: '03-Feb-20',
      expected: '2020-02-03T00:00:00Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'http2time "03-Feb-98"',
      from: `${JAR}.test_http2time`,
      input: '03-Feb-98',
      expected: '1998-02-03T00:00:00Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    { id: 'format "Thu, 03 Feb 1994 00:00:00 GMT" (HTTP)', from: `${JAR}.test_http2time_formats`, input: 'Thu, 03 Feb 1994 00:00:00 GMT', expected: FEB3 },
    {
      id: 'format "Thursday, 03-Feb-94 00:00:00 GMT" (RFC 850)',
      from: `${JAR}.test_http2time_formats`,
      input: 'Thursday, 03-Feb-94 00:00:00 GMT',
      expected: FEB3,
    },
    ...[
      ['broken RFC 850, four-digit year', 'Thursday, 03-Feb-1994 00:00:00 GMT'],
      ['HTTP format without weekday', '03 Feb 1994 00:00:00 GMT'],
      ['RFC 850 without weekday', '03-Feb-94 00:00:00 GMT'],
      ['broken RFC 850 without weekday', '03-Feb-1994 00:00:00 GMT'],
      ['without seconds', '03-Feb-1994 00:00 GMT'],
      ['without seconds and zone', '03-Feb-1994 00:00'],
      ['hour 24 of the day before', '02-Feb-1994 24:00'],
      ['RFC 850 date only', '03-Feb-94'],
      ['broken RFC 850 date only', '03-Feb-1994'],
      ['HTTP date only', '03 Feb 1994'],
      ['extra spaces everywhere', '  03   Feb   1994  0:00  '],
      ['date with surrounding spaces', '  03-Feb-1994  '],
    ].map(([what, value]) => ({
      id: `format "${value}" (${what})`,
      from: `${JAR}.test_http2time_formats`,
      input: value!,
      expected: FEB3,
      status: 'differs' as const,
      relent: 'invalid' as const,
      why: STRICT,
    })),
    {
      id: 'formats in lower and upper case',
      from: `${JAR}.test_http2time_formats`,
      input: 'thu, 03 feb 1994 00:00:00 gmt',
      expected: FEB3,
      status: 'differs',
      relent: 'invalid',
      why: 'HTTP-date is case-sensitive (RFC 9110 §5.6.7) ([strict HTTP-date](#strict-http-date))',
    },
    ...[
      '',
      'Garbage',
      'Mandag 16. September 1996',
      '01-00-1980',
      '01-13-1980',
      '00-01-1980',
      '32-01-1980',
      '01-01-1980 25:00:00',
      '01-01-1980 00:61:00',
      '01-01-1980 00:00:62',
      '08-Oct-3697739',
      '08-01-3697739',
      '09 Feb 19942632 22:23:32 GMT',
      'Wed, 09 Feb 1994834 22:23:32 GMT',
    ].map((value) => ({
      id: `garbage ${JSON.stringify(value)}`,
      from: `${JAR}.test_http2time_garbage`,
      input: value,
      expected: 'invalid' as const,
    })),
    {
      id: 'spaces by the 100 000 parse quickly (ReDoS)',
      from: `${JAR}.test_http2time_redos_regression_actually_completes`,
      input: `01 Jan 1970${' '.repeat(100_000)}00:00:00 GMT!`,
      expected: 'invalid',
    },
  ],
});

const emailUtils = group<string, Parsed>({
  title: 'CPython email.utils parsedate',
  check: (v) => parsed(v),
  cases: [
    {
      id: 'parsedate_to_datetime with a -0700 offset',
      from: `${EU}.test_parsedate_to_datetime`,
      input: 'Sun, 23 Sep 2001 20:10:55 -0700',
      expected: '2001-09-24T03:10:55Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'parsedate_to_datetime with -0000 (naive)',
      from: `${EU}.test_parsedate_to_datetime_naive`,
      input: 'Sun, 23 Sep 2001 20:10:55 -0000',
      expected: '2001-09-23T20:10:55Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    ...[
      '',
      ' ',
      '0',
      'A Complete Waste of Time',
      'Wed, 3 Apr 2002 12.34.56.78+0800Tue, 06 Jun 2017 27:39:33 +0600',
      'Tue, 06 Jun 2017 07:39:33 +2600',
      'Tue, 06 Jun 2017 27:39:33',
      '17 June , 2022',
      'Friday, -Nov-82 16:14:55 EST',
      'Friday, Nov--82 16:14:55 EST',
      'Friday, 19-Nov- 16:14:55 EST',
    ].map((value) => ({
      id: `invalid ${JSON.stringify(value)}`,
      from: `${EU}.test_parsedate_to_datetime_with_invalid_raises_valueerror`,
      input: value,
      expected: 'invalid' as const,
    })),
    { id: 'parsedate of "" is None', from: `${EM}.test_parsedate_none`, input: '', expected: 'invalid' },
    {
      id: 'no space after the comma',
      from: `${EM}.test_parsedate_compact`,
      input: 'Wed,3 Apr 2002 14:58:26 +0800',
      expected: '2002-04-03T06:58:26Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'no day of week',
      from: `${EM}.test_parsedate_no_dayofweek`,
      input: '25 Feb 2003 13:47:26 -0800',
      expected: '2003-02-25T21:47:26Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'no day of week, one-digit day',
      from: `${EM}.test_parsedate_compact_no_dayofweek`,
      input: '5 Feb 2003 13:47:26 -0800',
      expected: '2003-02-05T21:47:26Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'two-digit year 03 is 2003',
      from: `${EM}.test_parsedate_y2k`,
      input: '25 Feb 03 13:47:26 -0800',
      expected: '2003-02-25T21:47:26Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'two-digit year 71 is 1971',
      from: `${EM}.test_parsedate_y2k`,
      input: '25 Feb 71 13:47:26 -0800',
      expected: '1971-02-25T21:47:26Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'formatdate(usegmt=True) parses back',
      from: 'Lib/test/test_email/test_utils.py FormatDateTests.test_formatdate',
      input: 'Thu, 01 Dec 2011 15:00:00 GMT',
      expected: '2011-12-01T15:00:00Z',
    },
    {
      id: 'formatdate() with -0000 parses back',
      from: 'Lib/test/test_email/test_utils.py FormatDateTests.test_formatdate',
      input: 'Thu, 01 Dec 2011 15:00:00 -0000',
      expected: '2011-12-01T15:00:00Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'year 0001 with four digits',
      from: `${P2D} test`,
      input: 'Sat, 15 Aug 0001 23:12:09 +0500',
      expected: '0001-08-15T18:12:09Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'year 1 with one digit',
      from: `${P2D} test`,
      input: 'Thu, 1 Sep 1 23:12:09 +0800',
      expected: '0001-09-01T15:12:09Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
    {
      id: 'year 123 with three digits',
      from: `${P2D} test`,
      input: 'Thu, 7 Oct 123 23:12:09 +0500',
      expected: '0123-10-07T18:12:09Z',
      status: 'differs',
      relent: 'invalid',
      why: STRICT,
    },
  ],
});

interface RfcIn {
  readonly value: string;
  readonly wall?: number;
}
const rfc = group<RfcIn, Parsed>({
  title: 'RFC 9110 §5.6.7 HTTP-date',
  check: (i) => parsed(i.value, i.wall),
  cases: [
    { id: 'example IMF-fixdate', from: `${RFC} (preferred format)`, input: { value: 'Sun, 06 Nov 1994 08:49:37 GMT' }, expected: NOV6 },
    { id: 'example obsolete RFC 850 format', from: `${RFC} (obsolete formats)`, input: { value: 'Sunday, 06-Nov-94 08:49:37 GMT' }, expected: NOV6 },
    { id: 'example ANSI C asctime() format', from: `${RFC} (obsolete formats)`, input: { value: 'Sun Nov  6 08:49:37 1994' }, expected: NOV6 },
    { id: 'asctime day needs two characters ("SP 1DIGIT")', from: `${RFC} date3`, input: { value: 'Sun Nov 6 08:49:37 1994' }, expected: 'invalid' },
    {
      id: 'HTTP-date is case-sensitive',
      from: `${RFC} ("HTTP-date is case sensitive")`,
      input: { value: 'sun, 06 nov 1994 08:49:37 gmt' },
      expected: 'invalid',
    },
    { id: 'the zone is the literal GMT', from: `${RFC} GMT = %s"GMT"`, input: { value: 'Sun, 06 Nov 1994 08:49:37 UTC' }, expected: 'invalid' },
    {
      id: 'RFC 850 year more than 50 years ahead is in the past',
      from: `${RFC} (two-digit year rule)`,
      input: { value: 'Saturday, 06-Nov-77 08:49:37 GMT', wall: WALL_2026 },
      expected: '1977-11-06T08:49:37Z',
      note: 'now = 2026-01-01: 2077 would be 51 years ahead',
    },
    {
      id: 'RFC 850 year 49 years ahead stays in the future',
      from: `${RFC} (two-digit year rule)`,
      input: { value: 'Wednesday, 06-Nov-75 08:49:37 GMT', wall: WALL_2026 },
      expected: '2075-11-06T08:49:37Z',
    },

    { id: 'hour 24 is not in the grammar', from: `${RFC} time-of-day`, input: { value: 'Sun, 06 Nov 1994 24:00:00 GMT' }, expected: 'invalid' },
  ],
});

const grammar = group<string, 'valid' | 'invalid'>({
  title: 'RFC 9110 §5.6.7 grammar',
  check: (v) => (parsed(v) === 'invalid' ? 'invalid' : 'valid'),
  cases: [
    {
      id: 'second 60 (a leap second) is in the grammar',
      from: `${RFC} time-of-day (00:00:00 - 23:59:60)`,
      input: 'Sat, 31 Dec 2016 23:59:60 GMT',
      expected: 'valid',
      note: 'relent takes 23:59:60 as the next second (epoch time has no leap second); the RFC names no instant',
    },
  ],
});

interface RaIn {
  readonly value: string;
  readonly wall: number;
}
const retryAfter = group<RaIn, number | 'invalid'>({
  title: 'RFC 9110 §10.2.3 Retry-After',
  check: (i) => {
    const r = parseRetryAfter(i.value, { wallNowMs: i.wall });
    return r.present && r.valid ? r.delayMs / 1000 : 'invalid';
  },
  cases: [
    {
      id: 'Retry-After: Fri, 31 Dec 1999 23:59:59 GMT',
      from: 'RFC 9110 §10.2.3 example',
      input: { value: 'Fri, 31 Dec 1999 23:59:59 GMT', wall: Date.UTC(1999, 11, 31, 23, 57, 59) },
      expected: 120,
      note: 'read two minutes before that date',
    },
    { id: 'Retry-After: 120 (two minutes)', from: 'RFC 9110 §10.2.3 example', input: { value: '120', wall: WALL_2026 }, expected: 120 },
    { id: 'delay-seconds is non-negative', from: 'RFC 9110 §10.2.3 delay-seconds = 1*DIGIT', input: { value: '-120', wall: WALL_2026 }, expected: 'invalid' },
    { id: 'delay-seconds is an integer', from: 'RFC 9110 §10.2.3 delay-seconds = 1*DIGIT', input: { value: '120.5', wall: WALL_2026 }, expected: 'invalid' },
  ],
});

const notApplicable = group<never, never>({
  title: 'not applicable',
  check: () => {
    throw new Error('not run');
  },
  cases: [
    {
      id: 'iso2time',
      from: `${JAR}.test_iso2time, test_iso2time_formats, test_iso2time_garbage`,
      status: 'na',
      why: 'ISO 8601 timestamps of cookie files, not an HTTP-date',
    },
    { id: 'iso2time performance', from: `${JAR}.test_iso2time_performance_regression`, status: 'na', why: 'ISO 8601 parsing speed, not an HTTP-date' },
    {
      id: 'time2isoz and time2netscape',
      from: `${JAR}.test_time2isoz, test_time2netscape`,
      status: 'na',
      why: 'formatting of cookie-file dates; relent formats only IMF-fixdate',
    },
    {
      id: 'format_datetime of naive and aware datetimes',
      from: `${EU}.test_naive_datetime, test_aware_datetime, test_usegmt*`,
      status: 'na',
      why: 'formatting Python datetime objects with zones; relent formats epoch ms as IMF-fixdate only',
    },
    { id: 'localtime()', from: 'Lib/test/test_email/test_utils.py LocaltimeTests', status: 'na', why: 'local time zones; relent reads no local zone' },
    { id: 'mktime_tz', from: `${EM}.test_mktime_tz`, status: 'na', why: 'a conversion of Python time tuples' },
    {
      id: 'parsedate result acceptable to time functions',
      from: `${EM}.test_parsedate_acceptable_to_time_functions`,
      status: 'na',
      why: 'Python time tuples and the local zone',
    },
  ],
});

export const HTTP_DATE: Source = {
  key: 'http-date',
  title: 'HTTP-date',
  upstream: [
    'golang/go src/net/http/header_test.go (TestParseTime)',
    'python/cpython Lib/test/test_http_cookiejar.py',
    'python/cpython Lib/test/test_email/test_utils.py, test_email.py, test_parsedate_to_datetime.py',
    'RFC 9110 §5.6.7 and §10.2.3',
  ],
  groups: [go, http2time, emailUtils, rfc, grammar, retryAfter, notApplicable],
};
