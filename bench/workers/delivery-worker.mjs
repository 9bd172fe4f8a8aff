// One delivery worker process for bench/delivery.mjs (scale-out rows): opens the queue
// given as JSON in argv[2] ({ store, destinations }), says "ready" on stdout, starts on
// "go" from stdin, and on SIGTERM stops gracefully and prints its store calls (a JSON
// line: calls per store method, and batches claimed) before it exits.
import { openDeliveryQueue, openStore } from '../../dist/delivery/index.js';

const { store: url, destinations, worker = {} } = JSON.parse(process.argv[2]);
const calls = {};
let claimed = 0;
const raw = await openStore(url);
// Counts every store call the worker makes (and the batches its claims bring back).
const store = new Proxy(raw, {
  get(target, prop, receiver) {
    const v = Reflect.get(target, prop, receiver);
    if (typeof v !== 'function' || typeof prop !== 'string') return v;
    return (...args) => {
      calls[prop] = (calls[prop] ?? 0) + 1;
      const out = v.apply(target, args);
      if (prop === 'claim' || prop === 'formAndClaim' || prop === 'claimLimited') {
        return out.then((r) => {
          claimed += Array.isArray(r) ? r.length : r.claimed.length;
          return r;
        });
      }
      return out;
    };
  },
});
const queue = await openDeliveryQueue({ store, destinations });
const w = queue.createWorker(worker);
process.stdout.write('ready\n');
process.stdin.once('data', () => w.start());
process.once('SIGTERM', async () => {
  await w.stop();
  await queue.close();
  process.stdout.write(`${JSON.stringify({ calls, claimed })}\n`, () => process.exit(0));
});
