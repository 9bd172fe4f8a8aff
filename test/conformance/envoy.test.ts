// Envoy router retries: docs and tests, restated (sources/envoy.ts).
import { runSource } from './harness.js';
import { ENVOY } from './sources/envoy.js';

runSource(ENVOY);
