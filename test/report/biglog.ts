// Writes a large synthetic event log by streaming (a few MB in memory at a time), for the
// bounded-memory test of `relent report`. Deterministic (seeded), so its figures are known.
import { closeSync, openSync, writeSync } from 'node:fs';
import { rng } from './fixtures.js';

export interface BigLogStats {
  bytes: number;
  lines: number;
  attempts: number;
  results: number;
  operations: number;
  /** Operations whose last attempt decided `retry` and that have no result line. */
  unclosed: number;
  malformed: number;
  /** Operations (with a result line) that needed a retry, and of those the ones that returned. */
  retried: number;
  retriedReturned: number;
}

const ENDPOINTS = Array.from({ length: 40 }, (_, i) => `https://api${i % 7}.example.com:443/v1/resource-${i}`);

/**
 * Appends operations to `path` until it holds at least `targetBytes`. Every operation
 * has 1–4 attempts with an `ts` field (ms); 4 % never get a result line (their last
 * attempt decides `retry`: a log cut short), 1 % call an endpoint of their own (high
 * cardinality), one line in 100 000 is broken, and one line of 3 MB has no structure.
 */
export function writeBigLog(path: string, targetBytes: number, seed = 7): BigLogStats {
  const random = rng(seed);
  const fd = openSync(path, 'w');
  const s: BigLogStats = { bytes: 0, lines: 0, attempts: 0, results: 0, operations: 0, unclosed: 0, malformed: 0, retried: 0, retriedReturned: 0 };
  let ts = 1_767_225_600_000; // 2026-01-01T00:00:00Z
  let chunk: string[] = [];
  let chunkBytes = 0;
  const flush = (): void => {
    const text = chunk.join('');
    const buf = Buffer.from(text, 'utf8');
    writeSync(fd, buf);
    s.bytes += buf.length;
    chunk = [];
    chunkBytes = 0;
  };
  const line = (text: string): void => {
    chunk.push(text, '\n');
    chunkBytes += text.length + 1;
    s.lines++;
    if (chunkBytes >= 4 * 1024 * 1024) flush();
  };
  let longLineDone = false;
  try {
    while (s.bytes + chunkBytes < targetBytes) {
      const op = `op-${s.operations.toString(36)}`;
      s.operations++;
      const endpoint = random() < 0.01 ? `https://api.example.com:443/items/${s.operations}` : ENDPOINTS[Math.floor(random() * ENDPOINTS.length)]!;
      const unclosed = random() < 0.04;
      const n = 1 + Math.floor(random() * random() * 4); // mostly 1–2
      let remaining = 10_000;
      let ended = false;
      let lastReturn = false;
      for (let a = 1; a <= n && !ended; a++) {
        const fails = a < n || unclosed || random() < 0.3;
        const timeout = fails && random() < 0.25;
        const status = timeout ? 'null' : fails ? (random() < 0.7 ? '503' : '429') : '200';
        const errorClass = timeout ? '"timeout"' : 'null';
        const last = a === n;
        const decision = !fails ? 'return' : last && !unclosed ? (a === 4 ? 'max_attempts' : 'deadline_exceeded') : 'retry';
        const delay = decision === 'retry' ? String(Math.floor(random() * 100 * 2 ** a)) : 'null';
        const elapsed = timeout ? 2000 : Math.floor(5 + random() * 120);
        ts += Math.floor(random() * 3);
        line(
          `{"type":"attempt","operationId":"${op}","requestId":"${op}/attempt-${a}","attempt":${a},"method":"GET","endpoint":"${endpoint}","status":${status},"errorClass":${errorClass},"elapsedMs":${elapsed},"remainingMs":${remaining},"decision":"${decision}","delayMs":${delay},"retryAfterMs":null,"retryAfterValid":null,"ts":${ts}}`,
        );
        s.attempts++;
        remaining -= elapsed;
        if (decision !== 'retry') {
          ended = true;
          lastReturn = decision === 'return';
          if (!unclosed) {
            line(`{"type":"result","operationId":"${op}","status":${status},"errorClass":${errorClass},"reason":"${decision}","attempts":${a}}`);
            s.results++;
            if (a >= 2) {
              s.retried++;
              if (lastReturn) s.retriedReturned++;
            }
          }
        }
      }
      if (unclosed) s.unclosed++;
      if (s.lines % 100_000 < 3 && random() < 0.5) {
        line('{"type":"attempt","operationId": broken');
        s.malformed++;
      }
      if (!longLineDone && s.bytes > targetBytes / 2) {
        longLineDone = true;
        line('x'.repeat(3 * 1024 * 1024));
        s.malformed++;
      }
    }
    flush();
  } finally {
    closeSync(fd);
  }
  return s;
}
