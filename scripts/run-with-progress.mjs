// Runs a command for the scripts of package.json and says what it is doing: one line
// when it starts, and — when nobody sees the command's own output move (standard error is
// not a terminal, as under `npm start` in CI or a log) — a line every `everyMs` while it
// runs, then how long it took.
import { spawn } from 'node:child_process';

/**
 * @param {string} cmd
 * @param {string[]} args
 * @param {{ what: string, cwd?: string, env?: NodeJS.ProcessEnv, everyMs?: number, write?: (text: string) => void, tty?: boolean }} o
 * @returns {Promise<number>} the command's exit status
 */
export function runWithProgress(cmd, args, o) {
  const write = o.write ?? ((t) => process.stderr.write(t));
  const tty = o.tty ?? process.stderr.isTTY === true;
  const started = Date.now();
  const secs = () => Math.round((Date.now() - started) / 1000);
  write(`relent: ${o.what}…\n`);
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: o.cwd, env: o.env, stdio: ['ignore', 'inherit', 'inherit'] });
    const timer = tty ? null : setInterval(() => write(`relent: still ${o.what} (${secs()} s so far)…\n`), o.everyMs ?? 10_000);
    const done = (code) => {
      if (timer) clearInterval(timer);
      write(code === 0 ? `relent: ${o.what}: done in ${secs()} s\n` : `relent: ${o.what} failed (exit status ${code})\n`);
      resolve(code ?? 1);
    };
    child.on('error', () => done(127));
    child.on('close', done);
  });
}
