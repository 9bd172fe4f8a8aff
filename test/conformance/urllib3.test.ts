// urllib3 test/test_retry.py and util/retry.py, restated (sources/urllib3.ts).
import { runSource } from './harness.js';
import { URLLIB3 } from './sources/urllib3.js';

runSource(URLLIB3);
