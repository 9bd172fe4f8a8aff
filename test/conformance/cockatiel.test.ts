// cockatiel's tests (retry, backoff, breaker, bulkhead, timeout), restated (sources/cockatiel.ts).
import { runSource } from './harness.js';
import { COCKATIEL } from './sources/cockatiel.js';

runSource(COCKATIEL);
