// relent/testing: time and randomness for testing retry code (relent's or yours)
// without fake timers or wall-clock sleeps.
export { createTestClock, createRecordingRandom, constantRandom } from '../shared/test-clock.js';
export type { TestClock, TestClockOptions } from '../shared/test-clock.js';
export { createSeededRandom } from '../core/random.js';
export type { Clock, Random } from '../core/types.js';
