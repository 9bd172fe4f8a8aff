// smithy / AWS SDK retries: the shared specification's cases, botocore, smithy-typescript (sources/smithy.ts).
import { runSource } from './harness.js';
import { SMITHY } from './sources/smithy.js';

runSource(SMITHY);
