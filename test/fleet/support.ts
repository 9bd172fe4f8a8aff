// Shared helpers of the fleet tests: the shared Redis (required in CI, skipped with a
// message elsewhere), unique key prefixes, and private redis-server instances for the
// tests that kill or lock Redis (never the shared one).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';

export const REDIS_URL = process.env.RELENT_TEST_REDIS ?? 'redis://127.0.0.1:6379';
export const IN_CI = process.env.CI === 'true';

let probe: Promise<string | null> | null = null;

/** null when the shared Redis answers; otherwise why not. */
export function redisUnavailable(): Promise<string | null> {
  probe ??= (async () => {
    const r = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 2000, enableOfflineQueue: false });
    r.on('error', () => {});
    try {
      await r.connect();
      await r.ping();
      return null;
    } catch (e) {
      return e instanceof Error ? e.message : String(e);
    } finally {
      r.disconnect();
    }
  })();
  return probe;
}

/** Whether the Redis tests run: in CI always (and they fail if Redis is missing); elsewhere skipped, with a message, when it does not answer. */
export async function redisEnabled(): Promise<boolean> {
  const why = await redisUnavailable();
  if (why === null || IN_CI) return true;
  process.stderr.write(`\n[relent fleet tests] Redis at ${REDIS_URL} is unreachable (${why}): skipping the Redis tests (they run in CI)\n`);
  return false;
}

/**
 * Whether the tests that run a redis-server of their own (to kill or stall it) run: in CI
 * always (they fail if the binary is missing); elsewhere skipped, with a message, without it.
 */
export async function ownRedisEnabled(): Promise<boolean> {
  const found = await new Promise<boolean>((resolve) => {
    const p = spawn('redis-server', ['--version'], { stdio: 'ignore' });
    p.on('error', () => resolve(false));
    p.on('exit', (code) => resolve(code === 0));
  });
  if (found || IN_CI) return true;
  process.stderr.write('\n[relent fleet tests] no redis-server binary: skipping the tests that start, kill or stall their own Redis (they run in CI)\n');
  return false;
}

/** A key prefix no other test run uses. */
export function uniquePrefix(tag: string): string {
  return `relent-test:${tag}:${process.pid}:${randomBytes(3).toString('hex')}:`;
}

/** Deletes every key under a prefix (the shared Redis stays clean). */
export async function dropPrefix(prefix: string, url = REDIS_URL): Promise<void> {
  const r = new Redis(url, { maxRetriesPerRequest: 1 });
  r.on('error', () => {});
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await r.del(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** A redis-server of the test's own, on a free port; `stop()` kills it (SIGKILL), `start()` starts it again on the same port. */
export interface OwnRedis {
  readonly port: number;
  readonly url: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** SIGSTOP / SIGCONT: Redis stops answering without closing its connections (as in a partition). */
  pause(): void;
  resume(): void;
}

export async function ownRedis(extra: string[] = []): Promise<OwnRedis> {
  const port = await freePort();
  let proc: ChildProcess | null = null;
  const start = async (): Promise<void> => {
    proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extra], { stdio: 'ignore' });
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false, enableReadyCheck: false });
      // A server with a password answers NOAUTH: it is up. ioredis 6 says so on connect (its HELLO), 5 on the PING.
      let noAuth = false;
      r.on('error', (e: Error) => {
        if (/NOAUTH/.test(e.message)) noAuth = true;
      });
      try {
        await r.connect();
        await r.ping().catch((e: Error) => {
          if (!/NOAUTH/.test(e.message)) throw e;
        });
        return;
      } catch {
        if (noAuth) return;
        if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not start`);
        await new Promise((res) => setTimeout(res, 50));
      } finally {
        r.disconnect();
      }
    }
  };
  const stop = (): Promise<void> => new Promise((resolve) => {
    const p = proc;
    proc = null;
    if (p === null || p.exitCode !== null) return resolve();
    p.once('exit', () => resolve());
    p.kill('SIGKILL');
  });
  await start();
  return {
    port, url: `redis://127.0.0.1:${port}`, start, stop,
    pause: () => void (proc as ChildProcess | null)?.kill('SIGSTOP'),
    resume: () => void (proc as ChildProcess | null)?.kill('SIGCONT'),
  };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits until `check()` is true (polling every 5 ms), or fails after `ms`. */
export async function until(check: () => boolean, ms = 2000, what = 'the condition'): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(5);
  }
}
