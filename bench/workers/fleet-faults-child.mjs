// One process of bench/fleet-faults.mjs: a createClient() — with a fleet (or, `separate`,
// a budget of its own) — calling each dependency at a steady offered load (open loop).
// Settings: JSON in argv[2]. stdout, one JSON object a line: {"ready":…} once joined,
// {"mode":…} / {"dep":…} as the fleet's mode and each dependency's shared state change
// (polled every 10 ms), and a summary at the end. stdin: "go", then "stop".
import { createInterface } from 'node:readline';
import { createClient } from '../../dist/http/index.js';
import { createRedisFleet } from '../../dist/fleet/index.js';

const cfg = JSON.parse(process.argv[2]);
const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const problems = [];
process.on('unhandledRejection', (e) => problems.push(`unhandledRejection: ${e?.stack ?? e}`));
process.on('uncaughtException', (e) => problems.push(`uncaughtException: ${e?.stack ?? e}`));

const modes = [];
const fleet = cfg.separate
  ? null
  : createRedisFleet({
      ...cfg.redis,
      prefix: cfg.prefix,
      ...(cfg.fleetOptions ?? {}),
      onEvent: (e) => {
        if (e.type !== 'fleet_mode') return;
        modes.push({ t: e.ts, mode: e.mode, reason: e.reason });
        say({ mode: e.mode, t: e.ts, reason: e.reason });
      },
    });
const byPort = new Map(cfg.deps.map((d) => [String(new URL(d.url).port), d.name]));
const breakerChanges = [];
const client = createClient({
  fleet,
  policy: cfg.policy ?? {},
  breaker: cfg.breaker ?? false,
  key: (url) => byPort.get(String(new URL(url).port)) ?? 'other',
  // A response answered right at the deadline made the client throw from inside the body
  // stream's start() (an uncaught exception; the fetch never settled): not what is measured here.
  bodyDeadline: false,
  onBreakerStateChange: (c) => breakerChanges.push({ dep: c.name, to: c.to, t: Date.now() }),
});

const joined = fleet ? await fleet.ready(30_000) : true;
// Each dependency's mode (shared or local), as it changes.
const depModes = {};
const watch = fleet
  ? setInterval(() => {
      const s = fleet.stats();
      for (const d of cfg.deps) {
        const m = s.budgets[d.name]?.mode ?? null;
        const shared = m === 'fleet' && s.subscribed;
        if (depModes[d.name] !== shared) {
          depModes[d.name] = shared;
          say({ dep: d.name, shared, t: Date.now() });
        }
      }
    }, 10)
  : null;
const go = new Promise((resolve) =>
  createInterface({ input: process.stdin }).on('line', (l) => {
    if (l.trim() === 'go') resolve();
    if (l.trim() === 'stop') stopped = true;
  }),
);
let stopped = false;
say({ ready: true, joined });
await go;

const started = Date.now();
const statuses = {};
const rejections = {};
const calls = [];
const every = 1000 / cfg.rate;
let n = 0;
await new Promise((resolve) => {
  const over = () => stopped || Date.now() - started >= cfg.durationMs;
  const send = () => {
    while (!over() && Date.now() >= started + n * every) {
      n++;
      for (const d of cfg.deps) {
        calls.push(
          client.fetch(d.url, { headers: { 'x-child': String(cfg.index) } }).then(
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
    }
    if (over()) return resolve();
    setTimeout(() => setImmediate(send), Math.max(0, Math.min(50, started + n * every - Date.now())));
  };
  send();
});
await Promise.all(calls);
if (watch) clearInterval(watch);
const stats = fleet ? fleet.stats() : null;
if (fleet) await fleet.close();
await client.close();
say({
  index: cfg.index,
  statuses,
  rejections,
  modes,
  breakerChanges,
  problems,
  stats: stats && {
    fallbacks: stats.fallbacks,
    rejoins: stats.rejoins,
    syncFailures: stats.syncFailures,
    roundTrips: stats.roundTrips,
    rtt: stats.rttMs,
    store: stats.store,
    nodes: stats.nodes,
    budgets: stats.budgets,
  },
});
process.exit(0);
