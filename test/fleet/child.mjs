// One process of the fleet tests (test/fleet/processes.test.ts): a createClient() —
// with a fleet or without — calling one dependency at a steady offered load (open loop:
// a call every 1000/rate ms, whatever the earlier ones do). Settings: JSON in argv[2].
// stdout, one JSON object a line: {"ready":…} once joined, {"event":…} as breaker and
// fleet changes happen, and a summary when every call it started has ended.
// stdin: "go" starts the calls, "stop" (or durationMs) ends them.
import { createInterface } from 'node:readline';
import { createClient } from '../../dist/http/index.js';
import { createRedisFleet } from '../../dist/fleet/index.js';

const cfg = JSON.parse(process.argv[2]);
const problems = [];
process.on('unhandledRejection', (e) => problems.push(`unhandledRejection: ${e?.stack ?? e}`));
process.on('uncaughtException', (e) => problems.push(`uncaughtException: ${e?.stack ?? e}`));
const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

const fleetEvents = [];
const fleet = cfg.redisUrl
  ? createRedisFleet({
      url: cfg.redisUrl,
      prefix: cfg.prefix,
      timeoutMs: cfg.timeoutMs,
      syncMs: cfg.syncMs,
      syncEvery: cfg.syncEvery,
      onEvent: (e) => {
        fleetEvents.push(e);
        say({ event: 'fleet', mode: e.mode ?? null, t: e.ts });
      },
    })
  : null;
const breakerChanges = [];
// A measuring instrument: a subscriber of our own on the fleet's channel tells when an
// announcement could first be read in this process, to compare with when the fleet's
// breaker acted on it.
const announcements = [];
let watch = null;
if (cfg.redisUrl && cfg.watch) {
  const { Redis } = await import('ioredis');
  watch = new Redis(cfg.redisUrl);
  watch.on('error', () => {});
  watch.on('message', (_channel, m) => announcements.push({ t: Date.now(), s: JSON.parse(m).s }));
  await watch.subscribe(`${cfg.prefix}breaker`);
}
const client = createClient({
  policy: cfg.policy,
  fleet,
  breaker: cfg.breaker ?? false,
  onBreakerStateChange: (c) => {
    breakerChanges.push({ to: c.to, reason: c.reason, t: Date.now() });
    say({ event: 'breaker', to: c.to, t: Date.now() });
  },
});

const commands = createInterface({ input: process.stdin });
const waiting = new Map();
commands.on('line', (l) => waiting.get(l.trim())?.());
const command = (name) => new Promise((resolve) => waiting.set(name, resolve));

const joined = fleet ? await fleet.ready(20_000) : true;
const go = command('go');
say({ ready: true, joined });
await go;

const sent = []; // wall time each call was started
const statuses = {};
const rejections = {};
const calls = [];
const started = Date.now();
let stopped = false;
void command('stop').then(() => {
  stopped = true;
});
await new Promise((resolve) => {
  const every = 1000 / cfg.rate;
  let n = 0;
  const over = () => stopped || Date.now() - started >= cfg.durationMs;
  // The calls due are made from setImmediate, after the loop has read its sockets (as a
  // server's work arrives through I/O): a process the machine left without CPU for a
  // while does not fire a backlog of calls on a view of the fleet it has not read yet.
  const send = () => {
    while (!over() && Date.now() >= started + n * every) {
      n++;
      const t = Date.now();
      sent.push(t);
      calls.push(
        client.fetch(cfg.url, { headers: { 'x-child': String(cfg.index), 'x-sent': String(t) } }).then(
          async (res) => {
            await res.arrayBuffer();
            statuses[res.status] = (statuses[res.status] ?? 0) + 1;
          },
          (e) => {
            const code = e?.code ?? e?.name ?? 'unknown';
            rejections[code] = (rejections[code] ?? 0) + 1;
          },
        ),
      );
    }
    if (over()) return resolve();
    setTimeout(tick, Math.max(0, Math.min(50, started + n * every - Date.now())));
  };
  const tick = () => setImmediate(send);
  tick();
});
await Promise.all(calls);
const stats = fleet ? fleet.stats() : null;
if (fleet) await fleet.close();
await client.close();
commands.close();
watch?.disconnect();
say({ index: cfg.index, sent, statuses, rejections, breakerChanges, announcements, fleetEvents, stats, problems });
