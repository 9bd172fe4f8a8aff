// The body of the notice thread (see notice-thread.ts): a NoticeHub answering the main
// thread's messages, at a lower priority on Linux.
import { getPriority, setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { createSeededRandom } from '../core/random.js';
import { systemClock } from '../shared/clock.js';
import { NoticeHub } from './notices.js';
import type { FromNoticeThread, NoticeThreadData, ToNoticeThread } from './notice-thread.js';

const d = workerData as NoticeThreadData;
const port = parentPort!;
const post = (m: FromNoticeThread): void => {
  try {
    port.postMessage(m);
  } catch {
    // an event that cannot be cloned is not forwarded; nothing else is lost
  }
};

let nice: number | null = null;
let why: string | null = null;
if (d.nice !== null) {
  if (process.platform !== 'linux') why = `the nice value is per process on ${process.platform}`;
  else {
    try {
      // os.setPriority(0, …) is setpriority(PRIO_PROCESS, 0): on Linux, this thread only.
      // Below the process's own value (a process already niced keeps its notices below it).
      const target = Math.min(19, getPriority() + d.nice);
      setPriority(target);
      nice = target;
    } catch (e) {
      why = e instanceof Error ? e.message : String(e);
    }
  }
}

const hub = new NoticeHub(d.cfg, {
  clock: systemClock,
  random: createSeededRandom(Date.now()),
  onEvent: d.events ? (e) => post({ t: 'ev', e }) : undefined,
  onDeliveryEvent: d.deliveryEvents ? (e) => post({ t: 'dev', e }) : null,
  partners: d.partners.map((p) => ({ name: p.name, url: new URL(p.url) })),
});

const report = setInterval(() => post({ t: 'stats', s: hub.stats() }), d.statsEveryMs);

hub.open().then(
  () => post({ t: 'opened', nice, why }),
  (e: unknown) => {
    const code = (e as { code?: unknown } | null)?.code;
    post({ t: 'failed', message: e instanceof Error ? e.message : String(e), code: typeof code === 'string' ? code : null });
    clearInterval(report);
    void hub.close({ drainMs: 0, force: true }).catch(() => {}).finally(() => port.close());
  },
);

port.on('message', (m: ToNoticeThread) => {
  switch (m.t) {
    case 'n':
      for (const b of m.b) hub.keepBillable(b);
      for (const n of m.n) hub.send(n);
      break;
    case 'event':
      post({ t: 'event', id: m.id, r: hub.billingEvent(m.requestId, m.impId) });
      break;
    case 'stored':
      void hub.stored().then((ok) => post({ t: 'stored', id: m.id, ok }));
      break;
    case 'close':
      clearInterval(report);
      void hub.close({ drainMs: m.drainMs, force: m.force }).catch(() => {}).finally(() => {
        post({ t: 'closed', s: hub.stats() });
        port.close();
      });
      break;
  }
});
