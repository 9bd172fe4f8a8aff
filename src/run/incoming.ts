// The request a relent server is serving, as the code that serves it sees it: set by the
// server middleware (relent/server) around the handler, read by relent's HTTP client and
// interceptor (relent/http) below it. It lives here, below both drivers, so that neither
// imports the other. AsyncLocalStorage carries it through awaits and callbacks; a
// process that never serves through relent never enables it (getStore() then costs
// nothing and finds nothing).
import { AsyncLocalStorage } from 'node:async_hooks';

/** The incoming request a handler serves. */
export interface IncomingCall {
  /** Aborts when the caller's deadline passes or the caller goes away. */
  readonly signal: AbortSignal;
  /** The caller's remaining time in ms (≤ 0: spent); Infinity when the request carried no deadline. */
  remainingMs(): number;
  /** The caller's attempt number (1-based), null when it sent none. */
  readonly attempt: number | null;
  /**
   * Called by relent's clients when a dependency said "don't retry" (or an operation
   * ended on such an answer): the server then tells its own caller the same on an
   * error answer, so that only one layer of a chain retries an overload.
   */
  dependencySaidNoRetry(): void;
}

const storage = new AsyncLocalStorage<IncomingCall>();

/** The incoming request being served here (relent/server), or undefined outside one. */
export function incomingCall(): IncomingCall | undefined {
  return storage.getStore();
}

/** Runs `fn` with `call` as the incoming request (what relent/server's middleware does around a handler). */
export function runIncoming<R>(call: IncomingCall, fn: () => R): R {
  return storage.run(call, fn);
}
