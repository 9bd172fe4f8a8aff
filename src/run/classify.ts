import { errorClassOfCode } from '../core/error-codes.js';
import { pickHintHeaders } from '../core/hints.js';
import { ERROR_CLASSES } from '../core/policy.js';
import type { ErrorClass } from '../core/types.js';
import type { Classified } from './run.js';

/**
 * run()'s default classifiers: what a resolved value or a thrown error says about an
 * attempt when the caller gives no `classifyValue` / `classifyError` (or theirs returns
 * undefined).
 */

/** A value with an HTTP `status` (a fetch Response) is that status; anything else is 200. */
export function classifyValueDefault(value: unknown): Classified {
  if (typeof value === 'object' && value !== null) {
    const status = (value as { status?: unknown }).status;
    if (typeof status === 'number' && Number.isInteger(status) && status >= 100 && status <= 999) {
      const h = (value as { headers?: unknown }).headers;
      if (status < 400 || !h) return { status };
      const headers = pickHintHeaders(h);
      return headers ? { status, headers } : { status };
    }
  }
  return OK_200;
}

export const OK_200: Classified = Object.freeze({ status: 200 });

/** relent's own errors carry their class; other errors are classed by their `code` (through `cause`), else `error`. */
export function classifyErrorDefault(error: unknown): Classified {
  if (typeof error === 'object' && error !== null) {
    const own = (error as { errorClass?: unknown }).errorClass;
    if (typeof own === 'string' && own in ERROR_CLASSES) {
      const sent = (error as { sent?: unknown }).sent;
      return sent === 'not_sent' || sent === 'sent' || sent === 'unknown' ? { errorClass: own as ErrorClass, sent } : { errorClass: own as ErrorClass };
    }
  }
  const cls = errorClassOfCode(error);
  return { errorClass: cls ?? 'error' };
}
