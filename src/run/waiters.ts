/**
 * The line of callers waiting for a slot or a token (the bulkhead, the adaptive
 * concurrency limit, the rate limiter): first come, first served, an intrusive list so
 * that leaving from the middle (an aborted caller) costs nothing, and each waiter's abort
 * listener removed when it leaves.
 */
export interface Waiter {
  prev: Waiter | null;
  next: Waiter | null;
  resolve: () => void;
  reject: (reason: unknown) => void;
  signal: AbortSignal | null;
  onAbort: (() => void) | null;
}

export class WaiterQueue<W extends Waiter = Waiter> {
  head: W | null = null;
  private tail: W | null = null;
  /** Waiters in line. */
  size = 0;

  /**
   * Puts `w` at the end of the line. When its signal aborts, it leaves the line, is
   * rejected with the signal's reason, and `afterAbort` (if any) runs.
   */
  push(w: W, afterAbort?: () => void): void {
    w.prev = this.tail;
    w.next = null;
    if (this.tail) this.tail.next = w;
    else this.head = w;
    this.tail = w;
    this.size++;
    const signal = w.signal;
    if (signal) {
      w.onAbort = () => {
        this.remove(w);
        w.reject(signal.reason);
        afterAbort?.();
      };
      signal.addEventListener('abort', w.onAbort, { once: true });
    }
  }

  /** Takes `w` out of the line (wherever it is) and drops its abort listener. */
  remove(w: W): void {
    if (w.prev) w.prev.next = w.next;
    else this.head = w.next as W | null;
    if (w.next) w.next.prev = w.prev;
    else this.tail = w.prev as W | null;
    w.prev = w.next = null;
    this.size--;
    if (w.signal !== null && w.onAbort !== null) w.signal.removeEventListener('abort', w.onAbort);
  }
}
