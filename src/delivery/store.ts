import { existsSync } from 'node:fs';
import { DeliveryError } from './errors.js';
import type { DeliveryStore } from './types.js';

/**
 * Opens a store from a URL:
 * - `sqlite:./relent.db`, `sqlite:/var/lib/app/relent.db`, `sqlite::memory:` — the
 *   embedded store (query parameters: `busyTimeoutMs`, `synchronous=FULL`, `tablePrefix`, `maxSizeBytes`,
 *   `runIn=process|thread|caller`: where its work runs, a process of its own by default);
 * - `postgres://user@host:5432/db?schema=relent` (or `postgresql://`) — the shared
 *   store for several workers (query parameters: `schema`, `tablePrefix`, `poolSize`,
 *   `connectTimeoutMs`, `queryTimeoutMs`, `statementTimeoutMs`, `keepAliveMs`,
 *   `synchronousOutcomes`; the rest goes to `pg`).
 *
 * The driver of each store is imported only when that store is opened.
 */
export async function openStore(
  url: string,
  options: { readonly mustExist?: boolean; readonly sqliteRunIn?: 'process' | 'thread' | 'caller' } = {},
): Promise<DeliveryStore> {
  if (typeof url !== 'string' || url.length === 0) {
    throw new DeliveryError('ERR_INVALID_CONFIG', 'Expected `store` to be sqlite:FILE or postgres://…', { field: 'store' });
  }
  if (url.startsWith('sqlite:')) {
    const rest = url.slice('sqlite:'.length);
    const q = rest.indexOf('?');
    const file = (q >= 0 ? rest.slice(0, q) : rest).replace(/^\/\/(?=\/)/, '');
    const params = new URLSearchParams(q >= 0 ? rest.slice(q + 1) : '');
    if (file.length === 0)
      throw new DeliveryError('ERR_INVALID_CONFIG', 'Expected `store` to name a file: sqlite:./relent.db (or sqlite::memory:)', { field: 'store' });
    const busy = params.get('busyTimeoutMs');
    const maxSize = params.get('maxSizeBytes');
    const maxSizeBytes = maxSize === null ? undefined : Number(maxSize);
    if (maxSizeBytes !== undefined && !(Number.isInteger(maxSizeBytes) && maxSizeBytes > 0)) {
      throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`maxSizeBytes\` in the store URL to be an integer > 0, got ${JSON.stringify(maxSize)}`, {
        field: 'store.maxSizeBytes',
      });
    }
    const sync = params.get('synchronous');
    const runIn = params.get('runIn') ?? options.sqliteRunIn ?? null;
    if (runIn !== null && runIn !== 'process' && runIn !== 'thread' && runIn !== 'caller') {
      throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`runIn\` in the store URL to be process, thread or caller, got ${JSON.stringify(runIn)}`, {
        field: 'store.runIn',
      });
    }
    const busyTimeoutMs = busy === null ? undefined : Number(busy);
    if (busyTimeoutMs !== undefined && !(Number.isInteger(busyTimeoutMs) && busyTimeoutMs >= 0)) {
      throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`busyTimeoutMs\` in the store URL to be an integer >= 0, got ${JSON.stringify(busy)}`, {
        field: 'store.busyTimeoutMs',
      });
    }
    if (sync !== null && sync !== 'NORMAL' && sync !== 'FULL') {
      throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`synchronous\` in the store URL to be NORMAL or FULL, got ${JSON.stringify(sync)}`, {
        field: 'store.synchronous',
      });
    }
    if (options.mustExist === true && file !== ':memory:' && !existsSync(file)) {
      throw new DeliveryError('ERR_NO_QUEUE', `no queue at sqlite:${file} (the file does not exist: nothing was enqueued there)`);
    }
    const { openSqliteStore } = await import('./sqlite-store.js');
    return openSqliteStore({
      file,
      ...(busyTimeoutMs !== undefined ? { busyTimeoutMs } : {}),
      ...(maxSizeBytes !== undefined ? { maxSizeBytes } : {}),
      ...(sync !== null ? { synchronous: sync } : {}),
      ...(runIn !== null ? { runIn } : {}),
      ...(params.get('tablePrefix') !== null ? { tablePrefix: params.get('tablePrefix')! } : {}),
    });
  }
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new DeliveryError('ERR_INVALID_CONFIG', 'Expected `store` to be a URL like postgres://user@host:5432/db', { field: 'store' });
    }
    const prefix = u.searchParams.get('tablePrefix');
    const pool = u.searchParams.get('poolSize');
    const syncOutcomes = u.searchParams.get('synchronousOutcomes');
    u.searchParams.delete('tablePrefix');
    u.searchParams.delete('poolSize');
    u.searchParams.delete('synchronousOutcomes');
    const timeouts: Record<string, number> = {};
    for (const k of ['connectTimeoutMs', 'queryTimeoutMs', 'statementTimeoutMs', 'keepAliveMs'] as const) {
      const v = u.searchParams.get(k);
      if (v === null) continue;
      u.searchParams.delete(k);
      const n = Number(v);
      if (!(/^\d+$/.test(v) && Number.isSafeInteger(n))) {
        throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`${k}\` in the store URL to be an integer number of ms >= 0, got ${JSON.stringify(v)}`, {
          field: `store.${k}`,
        });
      }
      timeouts[k] = n;
    }
    if (syncOutcomes !== null && syncOutcomes !== 'true' && syncOutcomes !== 'false') {
      throw new DeliveryError(
        'ERR_INVALID_CONFIG',
        `Expected \`synchronousOutcomes\` in the store URL to be true or false, got ${JSON.stringify(syncOutcomes)}`,
        { field: 'store.synchronousOutcomes' },
      );
    }
    const poolSize = pool === null ? undefined : Number(pool);
    if (poolSize !== undefined && !(Number.isInteger(poolSize) && poolSize >= 1 && poolSize <= 100)) {
      throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`poolSize\` in the store URL to be an integer in [1, 100], got ${JSON.stringify(pool)}`, {
        field: 'store.poolSize',
      });
    }
    const { openPostgresStore } = await import('./postgres-store.js');
    return openPostgresStore({
      connectionString: u.toString(),
      ...(prefix !== null ? { tablePrefix: prefix } : {}),
      ...(poolSize !== undefined ? { poolSize } : {}),
      ...(syncOutcomes !== null ? { synchronousOutcomes: syncOutcomes === 'true' } : {}),
      ...timeouts,
      ...(options.mustExist === true ? { mustExist: true } : {}),
    });
  }
  throw new DeliveryError(
    'ERR_INVALID_CONFIG',
    `Expected \`store\` to start with sqlite: or postgres://, got ${JSON.stringify(url.replace(/\/\/[^@/]*@/, '//…@'))}`,
    { field: 'store' },
  );
}
