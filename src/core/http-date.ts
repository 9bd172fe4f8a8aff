// HTTP-date (RFC 9110 §5.6.7): parse the three allowed forms, format the preferred one.
//
// Pure: no clocks. The only notion of "now" is the `wallNowMs` argument, used solely to
// resolve the two-digit year of the obsolete RFC 850 form.
//
// Decisions (documented here because the RFC leaves them open or they are ours):
// - The grammar is matched exactly and case-sensitively: day names `Mon`..`Sun` /
//   `Monday`..`Sunday`, month names `Jan`..`Dec`, the literal `GMT`, single SP separators.
//   Only optional whitespace (SP / HTAB) around the whole value is tolerated and trimmed.
// - The day name is NOT checked against the date (the RFC grammar does not relate them):
//   `Mon, 06 Nov 1994 08:49:37 GMT` parses to the same instant as `Sun, 06 Nov 1994 …`.
// - The day must exist in its month and year (proleptic Gregorian calendar): no 31 Apr,
//   29 Feb only in leap years. Hour 00-23, minute 00-59, second 00-60.
// - Leap second: second `60` is accepted (the grammar allows it) and means the NEXT second,
//   i.e. `23:59:60` on 31 Dec is the same instant as `00:00:00` on 1 Jan. For a Retry-After
//   this errs on the side of waiting one second longer rather than one second too short.
//   Epoch milliseconds (POSIX time) cannot represent the leap second itself.
// - IMF-fixdate and asctime years are exactly 4 digits, 0000-9999 included.
// - asctime: the day is `SP DIGIT` (`Nov  6`) or `2DIGIT` (`Nov 16`, and also `Nov 06`,
//   which the grammar's `2DIGIT` allows). It carries no zone and is taken as UTC.
// - RFC 850 two-digit years: of the years ending in those two digits, the latest one whose
//   timestamp is not more than 50 calendar years after `wallNowMs` is chosen. Hence a
//   timestamp that would be more than 50 years in the future becomes the most recent past
//   year with the same last two digits (as RFC 9110 requires), and otherwise the nearest
//   century wins. The leap-year check uses the resolved four-digit year. If `wallNowMs` is
//   not a finite number, RFC 850 dates cannot be resolved and yield `undefined`.

const DAY_NAMES = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'] as const;
const MONTH_NAMES = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'] as const;

const MONTH_INDEX: Readonly<Record<string, number>> = {
  Jan: 1,
  Feb: 2,
  Mar: 3,
  Apr: 4,
  May: 5,
  Jun: 6,
  Jul: 7,
  Aug: 8,
  Sep: 9,
  Oct: 10,
  Nov: 11,
  Dec: 12,
};

const MS_PER_DAY = 86_400_000;

// One anchored regex per form. Every part is a fixed-width literal or a fixed count of
// [0-9], so matching is linear and cannot backtrack catastrophically.
const MONTH = '(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)';
const TIME = '([0-9]{2}):([0-9]{2}):([0-9]{2})';
// Sun, 06 Nov 1994 08:49:37 GMT
const IMF_FIXDATE = new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) ${MONTH} ([0-9]{4}) ${TIME} GMT$`);
// Sunday, 06-Nov-94 08:49:37 GMT
const RFC850_DATE = new RegExp(`^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), ([0-9]{2})-${MONTH}-([0-9]{2}) ${TIME} GMT$`);
// Sun Nov  6 08:49:37 1994
const ASCTIME_DATE = new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ${MONTH} ( [0-9]|[0-9]{2}) ${TIME} ([0-9]{4})$`);

/** Longest HTTP-date: `Wednesday, 09-Nov-94 08:49:37 GMT` (33 characters). */
const MAX_HTTP_DATE_LENGTH = 33;

function isLeapYear(y: number): boolean {
  return (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
}

function daysInMonth(y: number, m: number): number {
  if (m === 2) return isLeapYear(y) ? 29 : 28;
  return m === 4 || m === 6 || m === 9 || m === 11 ? 30 : 31;
}

/** Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
}

/** Inverse of daysFromCivil. */
function civilFromDays(days: number): { year: number; month: number; day: number } {
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const doe = z - era * 146_097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36_524) - Math.floor(doe / 146_096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  return { year: yoe + era * 400 + (month <= 2 ? 1 : 0), month, day };
}

function isOws(code: number): boolean {
  return code === 0x20 || code === 0x09;
}

/** Strip leading/trailing SP and HTAB without a regex (a trailing-whitespace regex can go quadratic). */
export function trimOws(value: string): string {
  let start = 0;
  let end = value.length;
  while (start < end && isOws(value.charCodeAt(start))) start++;
  while (end > start && isOws(value.charCodeAt(end - 1))) end--;
  return start === 0 && end === value.length ? value : value.slice(start, end);
}

interface Fields {
  readonly year: number;
  readonly month: number; // 1-12
  readonly day: number;
  readonly hour: number;
  readonly minute: number;
  readonly second: number;
}

/** Range-checks the fields and converts them to epoch ms; undefined if any is out of range. */
function toEpochMs(f: Fields): number | undefined {
  if (f.hour > 23 || f.minute > 59 || f.second > 60) return undefined;
  if (f.day < 1 || f.day > daysInMonth(f.year, f.month)) return undefined;
  // second 60 (leap second) deliberately lands on the next second.
  return daysFromCivil(f.year, f.month, f.day) * MS_PER_DAY + ((f.hour * 60 + f.minute) * 60 + f.second) * 1000;
}

/** Epoch ms of the same wall-clock moment `years` calendar years after `epochMs` (29 Feb rolls to 1 Mar). */
function addCalendarYears(epochMs: number, years: number): number {
  const days = Math.floor(epochMs / MS_PER_DAY);
  const timeOfDay = epochMs - days * MS_PER_DAY;
  const { year, month, day } = civilFromDays(days);
  return daysFromCivil(year + years, month, day) * MS_PER_DAY + timeOfDay;
}

function resolveTwoDigitYear(yy: number, rest: Omit<Fields, 'year'>, wallNowMs: number): number | undefined {
  if (!Number.isFinite(wallNowMs)) return undefined;
  const limitMs = addCalendarYears(wallNowMs, 50);
  const nowYear = civilFromDays(Math.floor(wallNowMs / MS_PER_DAY)).year;
  const base = nowYear - (((nowYear % 100) + 100) % 100) + yy;
  // Latest candidate that is not more than 50 years ahead. The comparison uses the raw
  // calendar position (day validity is checked afterwards, against the chosen year).
  // base - 100 is always before nowYear, so it is the fallback without a check.
  const timeMs = ((rest.hour * 60 + rest.minute) * 60 + rest.second) * 1000;
  for (const year of [base + 100, base]) {
    if (daysFromCivil(year, rest.month, rest.day) * MS_PER_DAY + timeMs <= limitMs) return year;
  }
  return base - 100;
}

/**
 * Parses an HTTP-date (RFC 9110 §5.6.7) to epoch milliseconds (whole seconds).
 *
 * Accepts exactly one of: IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, obsolete RFC 850
 * `Sunday, 06-Nov-94 08:49:37 GMT`, or ANSI C asctime `Sun Nov  6 08:49:37 1994` (UTC),
 * with optional surrounding SP/HTAB. Returns `undefined` for anything else, never throws.
 * `wallNowMs` (epoch ms) is only used to resolve RFC 850 two-digit years; see the notes
 * at the top of this file for the leap-second, day-name and year rules.
 */
export function parseHttpDate(value: string, wallNowMs: number): number | undefined {
  if (typeof value !== 'string') return undefined;
  const s = trimOws(value);
  if (s.length < 24 || s.length > MAX_HTTP_DATE_LENGTH) return undefined;

  let m = IMF_FIXDATE.exec(s);
  if (m) {
    return toEpochMs({
      day: Number(m[1]),
      month: MONTH_INDEX[m[2] as string] as number,
      year: Number(m[3]),
      hour: Number(m[4]),
      minute: Number(m[5]),
      second: Number(m[6]),
    });
  }

  m = RFC850_DATE.exec(s);
  if (m) {
    const rest = {
      day: Number(m[1]),
      month: MONTH_INDEX[m[2] as string] as number,
      hour: Number(m[4]),
      minute: Number(m[5]),
      second: Number(m[6]),
    };
    if (rest.day < 1 || rest.day > 31 || rest.hour > 23 || rest.minute > 59 || rest.second > 60) return undefined;
    const year = resolveTwoDigitYear(Number(m[3]), rest, wallNowMs);
    return year === undefined ? undefined : toEpochMs({ ...rest, year });
  }

  m = ASCTIME_DATE.exec(s);
  if (m) {
    return toEpochMs({
      month: MONTH_INDEX[m[1] as string] as number,
      day: Number((m[2] as string).trim()),
      hour: Number(m[3]),
      minute: Number(m[4]),
      second: Number(m[5]),
      year: Number(m[6]),
    });
  }

  return undefined;
}

function pad2(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/**
 * Formats epoch milliseconds as an IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
 * Sub-second precision is dropped (floored). Throws a RangeError when `epochMs` is not
 * finite or its year is outside 0000-9999 (not representable in the 4-digit grammar).
 */
export function formatImfFixdate(epochMs: number): string {
  if (!Number.isFinite(epochMs)) throw new RangeError(`formatImfFixdate: not a finite time: ${epochMs}`);
  const totalSeconds = Math.floor(epochMs / 1000);
  const days = Math.floor(totalSeconds / 86_400);
  const secondOfDay = totalSeconds - days * 86_400;
  const { year, month, day } = civilFromDays(days);
  if (year < 0 || year > 9999) throw new RangeError(`formatImfFixdate: year ${year} outside 0000-9999`);
  const weekday = DAY_NAMES[((days % 7) + 7 + 4) % 7] as string; // 1970-01-01 was a Thursday
  const hour = Math.floor(secondOfDay / 3600);
  const minute = Math.floor((secondOfDay % 3600) / 60);
  const second = secondOfDay % 60;
  return `${weekday}, ${pad2(day)} ${MONTH_NAMES[month - 1] as string} ${String(year).padStart(4, '0')} ${pad2(hour)}:${pad2(minute)}:${pad2(second)} GMT`;
}

/** What a reader of a server-relative time knows: our wall clock, and the response's `Date` header if any. */
export interface ServerTimeContext {
  readonly wallNowMs: number;
  readonly dateHeader?: string | null;
}

/**
 * "Now" on the server's clock: the response's `Date` header when it parses, else our wall
 * clock, so a skewed local clock neither hammers nor stalls. `fromDate` says which.
 */
export function serverNow(ctx: ServerTimeContext | null | undefined): { readonly ms: number; readonly fromDate: boolean } {
  const wall = ctx !== null && typeof ctx === 'object' ? ctx.wallNowMs : Number.NaN;
  const dateHeader = ctx !== null && typeof ctx === 'object' ? ctx.dateHeader : undefined;
  const fromHeader = typeof dateHeader === 'string' ? parseHttpDate(dateHeader, wall) : undefined;
  return fromHeader !== undefined ? { ms: fromHeader, fromDate: true } : { ms: wall, fromDate: false };
}
