// The body of the notice thread (see notice-thread.ts): a NoticeHub answering the main
// thread's messages, at a lower priority on Linux.
import { getPriority, setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { createSeededRandom } from '../core/random.js';
import { systemClock } from '../shared/clock.js';
import { NoticeHub, serveOutletRequest } from './notices.js';
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

// os.setPriority(0, …) is setpriority(PRIO_PROCESS, 0): on Linux, this thread only (elsewhere
// it would be the whole process). Below the process's own value: a process already niced keeps
// its notices below it. Not allowed: the thread keeps the process's priority.
if (d.nice !== null && process.platform === 'linux') {
  try {
    setPriority(Math.min(19, getPriority() + d.nice));
  } catch {
    // at the process's priority
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
  () => post({ t: 'opened' }),
  (e: unknown) => {
    const code = (e as { code?: unknown } | null)?.code;
    post({ t: 'failed', message: e instanceof Error ? e.message : String(e), code: typeof code === 'string' ? code : null });
    clearInterval(report);
    void hub
      .close({ drainMs: 0, force: true })
      .catch(() => {})
      .finally(() => port.close());
  },
);

port.on('message', (m: ToNoticeThread) => {
  switch (m.t) {
    case 'notices':
    case 'event':
    case 'sync':
      serveOutletRequest(hub, m, post);
      break;
    case 'close':
      clearInterval(report);
      void hub
        .close({ drainMs: m.drainMs, force: m.force })
        .catch(() => {})
        .finally(() => {
          post({ t: 'closed', s: hub.stats() });
          port.close();
        });
      break;
  }
});
