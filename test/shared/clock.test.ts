import { describe, expect, it } from 'vitest';
import { systemClock } from '../../src/shared/clock.js';

// The system clock's timers share one Node timer (a heap by due time): these check that
// they still fire as separate timers would — each once, no earlier than asked, in order —
// that a cancelled one never fires, and that none keeps the process alive once cancelled.
describe('systemClock timers (one shared Node timer)', () => {
  const nodeTimers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

  it('fire in due order, each once and not early; cancelled ones never fire', async () => {
    const fired: number[] = [];
    const start = performance.now();
    const late: number[] = [];
    const cancels = new Map<number, () => void>();
    for (const ms of [40, 5, 25, 15, 30, 10, 20, 35, 45, 50]) {
      cancels.set(
        ms,
        systemClock.setTimer(
          () => {
            fired.push(ms);
            late.push(performance.now() - start - ms);
          },
          ms,
          start,
        ),
      );
    }
    // Armed first (a turn passes), then cancelled: an earlier and a later one.
    await new Promise((r) => setImmediate(r));
    cancels.get(10)!();
    cancels.get(45)!();
    // One set later, earlier than every armed one: the shared timer is moved forward.
    systemClock.setTimer(() => fired.push(1), 1, performance.now());
    await new Promise((r) => setTimeout(r, 120));
    expect(fired).toEqual([1, 5, 15, 20, 25, 30, 35, 40, 50]);
    for (const l of late) expect(l).toBeGreaterThanOrEqual(-1);
  });

  it('nothing is left armed once every timer is cancelled or fired', async () => {
    const before = nodeTimers();
    const cancels = Array.from({ length: 20 }, (_, i) =>
      systemClock.setTimer(() => {
        throw new Error('cancelled timer fired');
      }, 10_000 + i),
    );
    await new Promise((r) => setImmediate(r));
    expect(nodeTimers()).toBe(before + 1); // one Node timer for the twenty
    for (const c of cancels) c();
    expect(nodeTimers()).toBe(before);
  });
});
