/**
 * Runs a callback once the current macrotask (and the microtasks it queued) is done: the
 * end of a turn of the event loop, on any runtime. Node, Bun and Deno have setImmediate
 * (in Node its check phase runs before the loop's next timers phase); browsers and edge
 * workers get a MessageChannel message, a task of its own that runs after the current
 * one without setTimeout's clamping (4 ms once nested); setTimeout(0) where neither exists.
 * Feature-detected once, at load: nothing here needs Node.
 */
export const nextTurn: (fn: () => void) => void = pick();

function pick(): (fn: () => void) => void {
  const g = globalThis as unknown as {
    setImmediate?: (fn: () => void) => unknown;
    MessageChannel?: new () => { port1: { onmessage: ((e: unknown) => void) | null }; port2: { postMessage(m: unknown): void } };
  };
  const immediate = g.setImmediate;
  if (typeof immediate === 'function') return immediate as (fn: () => void) => void;
  if (typeof g.MessageChannel === 'function') {
    // One channel; callbacks in the order they were queued, one message each.
    const channel = new g.MessageChannel();
    const queue: (() => void)[] = [];
    let head = 0;
    channel.port1.onmessage = () => {
      const fn = queue[head++]!;
      if (head === queue.length) {
        queue.length = 0;
        head = 0;
      }
      fn();
    };
    return (fn) => {
      queue.push(fn);
      channel.port2.postMessage(null);
    };
  }
  return (fn) => {
    setTimeout(fn, 0);
  };
}
