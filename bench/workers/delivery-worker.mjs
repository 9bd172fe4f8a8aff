// One delivery worker process for bench/delivery.mjs (scale-out rows): opens the queue
// given as JSON in argv[2] ({ store, destinations }), says "ready" on stdout, starts on
// "go" from stdin, and stops gracefully on SIGTERM.
import { openDeliveryQueue } from '../../dist/delivery/index.js';

const { store, destinations, worker = {} } = JSON.parse(process.argv[2]);
const queue = await openDeliveryQueue({ store, destinations });
const w = queue.createWorker(worker);
process.stdout.write('ready\n');
process.stdin.once('data', () => w.start());
process.once('SIGTERM', async () => {
  await w.stop();
  await queue.close();
  process.exit(0);
});
