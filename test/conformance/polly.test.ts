// Polly.Core hedging tests, restated (sources/polly.ts).
import { runSource } from './harness.js';
import { POLLY } from './sources/polly.js';

runSource(POLLY);
