// What every command does the same way, as a user meets it (bin/relent in a child
// process, against dist/): a reader that goes away is not an error; help never runs a
// command; a mistake gets one line naming the flag as typed, never "internal error";
// inspecting never creates a store; Ctrl-C in fetch ends with the documented status; one
// table style; colour only on a terminal and never with NO_COLOR.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { COMMAND_NAMES, main } from '../../src/cli/main.js';
import { PG_URL, dropSchema, pgEnabled, uniqueSchema } from '../delivery/support.js';

const BIN = fileURLToPath(new URL('../../bin/relent', import.meta.url));
const EXAMPLES = fileURLToPath(new URL('../../examples/', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'relent-conv-'));
let server: Server;
let origin = '';

beforeAll(async () => {
  // A body of 256 KiB: more than a pipe holds, so a closed reader is met mid-body.
  const big = Buffer.alloc(256 * 1024, 'x');
  server = createServer((req, res) => {
    if (req.url === '/hang') return; // never answers
    if (req.url === '/big') return void res.end(big);
    res.end('hello\n');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => {
  server?.close();
  rmSync(dir, { recursive: true, force: true });
});

interface Out {
  code: number | null;
  signal: string | null;
  out: string;
  err: string;
}
interface RunOptions {
  /** Close the read end of the child's stdout (or stderr) before it writes anything: `relent … | true`. */
  readonly closeOut?: boolean;
  readonly closeErr?: boolean;
  readonly env?: Record<string, string>;
  readonly cwd?: string;
  readonly timeoutMs?: number;
}

function relent(args: string[], o: RunOptions = {}): Promise<Out> {
  return start(args, o).done;
}

function start(args: string[], o: RunOptions = {}): { child: ReturnType<typeof spawn>; done: Promise<Out> } {
  let child!: ReturnType<typeof spawn> & { stdout: NodeJS.ReadableStream & { destroy(): void }; stderr: NodeJS.ReadableStream & { destroy(): void } };
  const done = new Promise<Out>((resolve, reject) => {
    child = spawn(process.execPath, [BIN, ...args], { cwd: o.cwd ?? dir, env: { ...process.env, ...o.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    if (o.closeOut) child.stdout.destroy();
    else child.stdout.on('data', (d) => (out += d));
    if (o.closeErr) child.stderr.destroy();
    else child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`relent ${args.join(' ')}: still running after ${o.timeoutMs ?? 20_000} ms\n${out}\n${err}`));
    }, o.timeoutMs ?? 20_000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out, err });
    });
  });
  return { child, done };
}

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

/** main() in this process, with its output captured (for what needs no real process). */
async function inProcess(argv: string[]): Promise<Out> {
  let out = '';
  let err = '';
  const code = await main(argv, { out: (t) => (out += t), err: (t) => (err += t) });
  return { code, signal: null, out, err };
}

describe('help never runs a command', () => {
  it('relent help lists every command, and each has its own help under three spellings', async () => {
    const list = await inProcess(['help']);
    expect(list.code).toBe(0);
    for (const name of COMMAND_NAMES) {
      expect(list.out, name).toMatch(new RegExp(`\\n  ${name} `));
      for (const argv of [
        ['help', name],
        [name, '--help'],
        [name, '-h'],
        [name, '--json', '--help', 'extra'],
      ]) {
        const r = await inProcess(argv);
        expect(r.code, argv.join(' ')).toBe(0);
        expect(r.err, argv.join(' ')).toBe('');
        expect(r.out, argv.join(' ')).toMatch(new RegExp(`^relent ${name}\\b`));
      }
    }
  });

  it('demo --help prints help and replays nothing; exchange-demo --help starts nothing', async () => {
    const demo = await relent(['demo', '--help']);
    expect(demo.code).toBe(0);
    expect(demo.out).toMatch(/^relent demo\n/);
    expect(demo.out).not.toContain('▸');
    const ex = await relent(['exchange-demo', '--help'], { timeoutMs: 5000 });
    expect(ex.code).toBe(0);
    expect(ex.out).not.toContain('http://');
  });

  it('an unknown help topic exits 2 with one line; relent alone prints help on stderr and exits 2', async () => {
    const r = await relent(['help', 'nosuch']);
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
    expect(r.err).toMatch(/^relent help: unknown command "nosuch" \(commands: replay, .*\)\n$/);
    const bare = await relent([]);
    expect(bare.code).toBe(2);
    expect(bare.out).toBe('');
    expect(bare.err).toMatch(/^relent — /);
  });
});

describe('a reader that goes away is not an error (EPIPE)', () => {
  let store = '';
  let cfg = '';
  beforeAll(async () => {
    store = `sqlite:${join(dir, 'pipe.db')}`;
    cfg = file('pipe.json', JSON.stringify({ destinations: { sink: { url: `${origin}/in` } } }));
    expect((await relent(['enqueue', 'sink', '--data', '{"n":1}', '--store', store, '--config', cfg])).code).toBe(0);
    expect((await relent(['deliver', '--config', cfg, '--store', store, '--exit-when-idle'])).code).toBe(0); // batch 1, delivered
  });

  const stdoutCases: [string, () => string[]][] = [
    ['presets', () => ['presets']],
    ['presets --json', () => ['presets', '--json']],
    ['demo', () => ['demo']],
    ['replay --human', () => ['replay', '--human', join(EXAMPLES, 'timelines', 's3-read.json')]],
    ['help', () => ['help']],
    ['help fetch', () => ['help', 'fetch']],
    ['fetch (a body larger than a pipe)', () => ['fetch', `${origin}/big`]],
    ['report', () => ['report', file('log.jsonl', '{"type":"attempt","operationId":"a","attempt":1,"decision":"return","status":200}\n')]],
    ['simulate', () => ['simulate', 'brooker', '--runs', '1', '--clients', '10']],
    ['queue stats', () => ['queue', 'stats', '--store', store]],
    ['queue ls', () => ['queue', 'ls', '--store', store]],
    ['queue show', () => ['queue', 'show', '1', '--store', store]],
    ['enqueue', () => ['enqueue', 'sink', '--data', '2', '--store', store, '--config', cfg]],
    ['exchange-demo (stops early)', () => ['exchange-demo', '--duration', '5s', '--rate', '20']],
  ];

  it.each(stdoutCases)(
    '%s: stdout closed before it writes → quiet exit, nothing on stderr',
    async (_name, args) => {
      const r = await relent(args(), { closeOut: true });
      expect(r.err).toBe('');
      expect(r.signal).toBeNull();
      expect(r.code).toBe(0);
    },
    30_000,
  );

  it('fetch -v and --events -: stderr closed → the body still arrives whole, exit 0', async () => {
    for (const flags of [['-v'], ['--events', '-']]) {
      const r = await relent(['fetch', `${origin}/ok`, ...flags], { closeErr: true });
      expect(r.out).toBe('hello\n');
      expect(r.code).toBe(0);
    }
  });

  it('a failing replay with stderr closed keeps its own status', async () => {
    const r = await relent(['replay', join(EXAMPLES, 'timelines', 's3-write-timeout.json')], { closeErr: true });
    expect(r.code).toBe(9);
    expect(r.out).toContain('"type":"result"');
  });

  it('exchange: stderr closed → stops as on a signal, prints its summary, exit 0', async () => {
    const r = await relent(['exchange', '--config', join(EXAMPLES, 'exchange', 'exchange.json'), '--port', '0', '--stats-every', '50ms'], { closeErr: true });
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/relent exchange: stopped\./);
  });

  it('bidder: stderr closed → stops as on a signal, prints its summary, exit 0', async () => {
    const r = await relent(['bidder', '--config', join(EXAMPLES, 'exchange', 'bidders', 'fast.json'), '--port', '0', '--stats-every', '50ms'], {
      closeErr: true,
    });
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/relent bidder: stopped\./);
  });

  it('relent presets | head -1: one line, nothing on stderr, status 0 (a real shell pipe)', () => {
    const r = spawnSync('bash', ['-c', `set -o pipefail; "${process.execPath}" "${BIN}" presets | head -1`], { encoding: 'utf8' });
    expect(r.stdout.split('\n')).toHaveLength(2);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });
});

describe('a mistake gets one line naming the flag as typed', () => {
  const cases: [string[], RegExp][] = [
    [['fetch', '--deadline', '-5s', 'http://x'], /^relent fetch: --deadline: expected a duration like .* got "-5s"$/],
    [['fetch', '--deadline', '0', 'http://x'], /^relent fetch: --deadline: expected a duration of at least 1ms, got "0"$/],
    [['fetch', '--attempt-timeout', '-1', 'http://x'], /^relent fetch: --attempt-timeout: .*"-1"$/],
    [['fetch', '--max-attempts', '-3', 'http://x'], /^relent fetch: --max-attempts: .*"-3"$/],
    [['fetch', '-X', '-y', 'http://x'], /^relent fetch: -X needs a value \(one that starts with a dash is written --request=VALUE\)$/],
    [['fetch', '--request', 'BAD METHOD', 'http://x'], /^relent fetch: --request: expected an HTTP method/],
    [['fetch', '-X', 'BAD METHOD', 'http://x'], /^relent fetch: -X: expected an HTTP method/],
    [['fetch', '--header', 'nocolon', 'http://x'], /^relent fetch: --header #1: /],
    [['fetch', '--nope', 'http://x'], /^relent fetch: unknown option --nope$/],
    [['fetch', 'http://x', '--events'], /^relent fetch: --events needs a value$/],
    [['fetch', '--preset', 'nope', 'http://x'], /^relent fetch: --preset: Unknown preset "nope"/],
    [['simulate', 'brooker', '--runs', '-1'], /^relent simulate: --runs: .*"-1"$/],
    [['report', '--max-open', '-5', 'x.jsonl'], /^relent report: --max-open: .*"-5"$/],
    [['deliver', '--config', 'c.json', '--poll', '0'], /^relent deliver: --poll: expected a duration from 1ms to 1h, got "0"$/],
    [['deliver', '--config', 'c.json', '--poll', '-1s'], /^relent deliver: --poll: expected a duration like .*"-1s"$/],
    [['deliver', '--config', 'c.json', '--lease', '5ms'], /^relent deliver: --lease: expected a duration from 100ms to 24h, got "5ms"$/],
    [['queue', 'ls', '--limit', '-1'], /^relent queue ls: --limit: .*"-1"$/],
    [['exchange', '--config', 'x.json', '--port', '-1'], /^relent exchange: --port: .*"-1"$/],
    [['exchange', '--config', 'x.json', '--stats-every', '-1s'], /^relent exchange: --stats-every: .*"-1s"$/],
    [['exchange-demo', '--rate', '-5'], /^relent exchange-demo: --rate: .*"-5"$/],
    [['exchange-demo', '--duration', '-2s'], /^relent exchange-demo: --duration: .*"-2s"$/],
    [
      ['exchange-demo', '--dir', '/nonexistent'],
      /^relent exchange-demo: --dir \/nonexistent: expected a directory with exchange\.json and bidders\/\*\.json \(no such file or directory\)$/,
    ],
    [['demo', 'extra'], /^relent demo: unexpected argument "extra"$/],
  ];

  beforeAll(() => {
    file('c.json', JSON.stringify({ destinations: { sink: { url: `${origin}/in` } } }));
  });

  it.each(cases)('%j', async (argv, message) => {
    const r = await relent(argv);
    expect(r.err.split('\n').filter(Boolean), r.err).toHaveLength(1);
    expect(r.err.trimEnd()).toMatch(message);
    expect(r.err).not.toMatch(/internal error/);
    expect(r.code).toBe(2);
  });
});

describe('what a user meant', () => {
  it('report: a file in which no line is an event exits 2; an empty log is still a report of nothing', async () => {
    const notLog = await relent(['report', file('notes.txt', 'hello\nworld\n')]);
    expect(notLog.code).toBe(2);
    expect(notLog.err).toMatch(/^relent report: .*notes\.txt: none of its 2 lines is a relent event .*\n$/);
    const empty = await relent(['report', file('empty.jsonl', '')]);
    expect(empty.code).toBe(0);
  });

  it('queue ls|show|stats|drop-stats|requeue never create a store', async () => {
    const cwd = mkdtempSync(join(dir, 'fresh-'));
    for (const argv of [['ls'], ['show', '1'], ['stats'], ['drop-stats'], ['requeue', '--all'], ['stats', '--store', `sqlite:${join(cwd, 'other.db')}`]]) {
      const r = await relent(['queue', ...argv], { cwd, env: { RELENT_STORE: '' } });
      expect(r.code, argv.join(' ')).toBe(1);
      expect(r.err, argv.join(' ')).toMatch(/^relent queue \S+: no queue at sqlite:\S+ \(the file does not exist/);
    }
    expect(existsSync(join(cwd, 'relent.db'))).toBe(false);
    expect(existsSync(join(cwd, 'other.db'))).toBe(false);
  });

  it('queue commands on a PostgreSQL schema without a queue say so and create nothing there', async () => {
    if (!(await pgEnabled())) return;
    const schema = uniqueSchema('cliq');
    const store = `${PG_URL}?schema=${schema}`;
    const schemaExists = async (): Promise<boolean> => {
      const c = new pg.Client({ connectionString: PG_URL });
      await c.connect();
      try {
        return (await c.query('SELECT 1 FROM information_schema.schemata WHERE schema_name = $1', [schema])).rowCount === 1;
      } finally {
        await c.end();
      }
    };
    try {
      for (const argv of [['ls'], ['show', '1'], ['stats'], ['drop-stats'], ['requeue', '--all'], ['pause', 'sink']]) {
        const r = await relent(['queue', ...argv, '--store', store], { env: { RELENT_STORE: '' } });
        expect(r.code, argv.join(' ')).toBe(1);
        expect(r.err, argv.join(' ')).toMatch(
          new RegExp(
            `^relent queue \\S+: postgres://postgres@127\\.0\\.0\\.1:5432/test \\(schema ${schema}\\): no queue here \\(there is no table "${schema}"\\."relent_items"`,
          ),
        );
      }
      expect(await schemaExists()).toBe(false);
      // Once something was enqueued there, the same commands read it.
      const e = await relent(['enqueue', 'sink', '--data', '{"n":1}', '--store', store], { env: { RELENT_STORE: '' } });
      expect(e.code, e.err).toBe(0);
      const st = await relent(['queue', 'stats', '--json', '--store', store], { env: { RELENT_STORE: '' } });
      expect(st.code, st.err).toBe(0);
      expect(st.out).toMatch(/"sink"/);
    } finally {
      await dropSchema(schema);
    }
  });

  it('enqueue: a destination the config does not name is refused (nothing stored); without a config, a warning', async () => {
    const cwd = mkdtempSync(join(dir, 'enq-'));
    const cfg = file('enq.json', JSON.stringify({ destinations: { billing: { url: `${origin}/in` } } }));
    const refused = await relent(['enqueue', 'biling', '--data', '1', '--config', cfg], { cwd, env: { RELENT_STORE: '' } });
    expect(refused.code).toBe(2);
    expect(refused.err).toBe(`relent enqueue: unknown destination "biling": ${cfg} names "billing"\n`);
    expect(existsSync(join(cwd, 'relent.db'))).toBe(false);
    const warned = await relent(['enqueue', 'biling', '--data', '1'], { cwd, env: { RELENT_STORE: '' } });
    expect(warned.code).toBe(0);
    expect(warned.out).toBe('enqueued 1 item for biling\n');
    expect(warned.err).toMatch(/^relent enqueue: warning: no --config given, so nothing checked that a worker delivers to "biling"/);
  });

  it('fetch: Ctrl-C while waiting for an answer → status 8 (cancelled) and one line', async () => {
    let arrived!: () => void;
    const seen = new Promise<void>((r) => (arrived = r));
    server.once('request', () => arrived());
    const { child, done } = start(['fetch', `${origin}/hang`]);
    await seen; // the request has reached the server: the operation is in its first attempt
    child.kill('SIGINT');
    const r = await done;
    expect(r.code).toBe(8);
    expect(r.err).toBe('relent fetch: cancelled by SIGINT after 1 attempt\n');
  });

  it('fetch prints the body only; events only with --events', async () => {
    const r = await relent(['fetch', `${origin}/ok`]);
    expect(r.out).toBe('hello\n');
    expect(r.err).toBe('');
    const help = await inProcess(['fetch', '--help']);
    expect(help.out).toMatch(/With --events,\s+it also writes one JSON line per attempt/);
  });
});

describe('one table style; colour only on a terminal, never with NO_COLOR', () => {
  /** Every table: a header line, then a rule of dashes under each column. */
  function tables(text: string): string[] {
    const lines = text.split('\n');
    return lines.filter((l, i) => i > 0 && /^ *-+( +-+)+$/.test(l)).map((l) => lines[lines.indexOf(l) - 1]!);
  }

  it('queue stats, queue ls, report, simulate and the exchange summary use the same layout', async () => {
    const store = `sqlite:${join(dir, 'tables.db')}`;
    const cfg = file('tables.json', JSON.stringify({ destinations: { sink: { url: `${origin}/in` } } }));
    await relent(['enqueue', 'sink', '--data', '1', '--store', store, '--config', cfg]);
    await relent(['deliver', '--config', cfg, '--store', store, '--exit-when-idle']);
    const outputs = {
      stats: (await relent(['queue', 'stats', '--store', store])).out,
      ls: (await relent(['queue', 'ls', '--store', store])).out,
      report: (await relent(['report', file('t.jsonl', '{"type":"attempt","operationId":"a","attempt":1,"decision":"return","status":200}\n')])).out,
      simulate: (await relent(['simulate', 'layers'])).out,
      exchange: (
        await relent(['exchange', '--config', join(EXAMPLES, 'exchange', 'exchange.json'), '--port', '0', '--stats-every', '50ms'], { closeErr: true })
      ).out,
    };
    for (const [name, text] of Object.entries(outputs)) {
      expect(tables(text).length, name).toBeGreaterThan(0);
      expect(text, name).not.toMatch(/^[A-Z]{2,}\s+[A-Z]{2,}/m); // no SHOUTED headers
      expect(text, name).not.toMatch(/ +$/m); // no trailing spaces
      expect(text, name).not.toContain('\x1b['); // not a terminal: no colour
    }
    expect(tables(outputs.stats)[0]).toMatch(/^destination +pending +ready/);
  });

  const hasScript = spawnSync('script', ['--version']).status === 0;
  it.runIf(hasScript)('on a terminal, headers and names are bold; with NO_COLOR=1 or TERM=dumb, not', () => {
    const onTty = (env: string, args = 'presets http-429'): string =>
      spawnSync('script', ['-qec', `env ${env} "${process.execPath}" "${BIN}" ${args}`, '/dev/null'], {
        encoding: 'utf8',
        env: { ...process.env, NO_COLOR: '', FORCE_COLOR: '' },
      }).stdout;
    expect(onTty('TERM=xterm')).toContain('\x1b[1mhttp-429\x1b[22m');
    expect(onTty('TERM=xterm NO_COLOR=1')).not.toContain('\x1b[');
    expect(onTty('TERM=dumb')).not.toContain('\x1b[');
    // The tables of the drivers' formatters get the same bold header.
    expect(onTty('TERM=xterm', 'simulate layers --quiet')).toContain('\x1b[1mvariant  ');
    expect(onTty('TERM=xterm NO_COLOR=1', 'simulate layers --quiet')).not.toContain('\x1b[');
  });
});
