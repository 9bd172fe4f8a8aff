// Numbered schema migrations, shared by the two stores (as pg-boss keeps a version table
// and BullMQ a version in its meta key). The meta table holds two rows:
//   schema    = SCHEMA_VERSION: the tables' compatibility version. A relent refuses tables
//               of another one (every relent since the first release checks it, so a
//               change an older relent cannot work with bumps it);
//   migration = the number of the last migration applied to the tables.
// A store opening tables whose migration row is below its last migration applies the
// missing ones, in order, in one transaction, under a lock (two processes opening the
// same tables do not both run them), and writes the row. Tables at its last migration (or
// beyond: a newer relent's additive changes) are opened as they are, with no lock taken.
//
// Tables made before numbered migrations have no migration row and may be at any of the
// shapes earlier relents made: every one of migrations 1 to LEGACY_MIGRATIONS therefore
// changes only what is missing (IF NOT EXISTS, or a column looked up first), and all of
// them run on such tables. A migration after those runs exactly once and need not check.
import { DeliveryError } from './errors.js';
import { SCHEMA_VERSION } from './store-common.js';

/** One numbered change to a store's tables; `up` runs inside the upgrade's transaction. */
export interface Migration<Cx, R = void> {
  readonly version: number;
  /** What it changes (in messages). */
  readonly name: string;
  up(cx: Cx): R;
}

/** The migrations that may meet tables made before numbered migrations: each changes only what is missing. */
export const LEGACY_MIGRATIONS = 5;

/** The meta rows that say the tables' versions. */
export const SCHEMA_KEY = 'schema';
export const MIGRATION_KEY = 'migration';

/** The versions the meta table says (null / 0 where it says nothing). */
export interface TableVersions {
  readonly schema: string | null;
  readonly migration: number;
}

export function tableVersions(rows: readonly { readonly k: string; readonly v: string }[]): TableVersions {
  let schema: string | null = null;
  let migration = 0;
  for (const r of rows) {
    if (r.k === SCHEMA_KEY) schema = r.v;
    else if (r.k === MIGRATION_KEY) migration = Number(r.v) || 0;
  }
  return { schema, migration };
}

/** Tables of another compatibility version are refused (as every relent since the first release does). */
export function refuseOtherSchema(description: string, v: TableVersions): void {
  if (v.schema !== null && v.schema !== String(SCHEMA_VERSION)) {
    throw new DeliveryError('ERR_STORE', `${description}: schema version ${v.schema}, this relent knows ${SCHEMA_VERSION}`);
  }
}

/** The last migration of a list (they are numbered 1, 2, 3, … in order). */
export function lastMigration(list: readonly Migration<never, unknown>[]): number {
  list.forEach((m, i) => {
    if (m.version !== i + 1) throw new Error(`internal: migration ${m.version} is number ${i + 1} of its list`);
  });
  return list.length;
}

/**
 * SQL with `{name}` placeholders filled from `names` (table names, the schema and the
 * prefix: identifiers the store validated, never values). An unknown name is an error.
 */
export function fill(sql: string, names: Readonly<Record<string, string>>): string {
  return sql.replace(/\{(\w+)\}/g, (_m, name: string) => {
    const v = names[name];
    if (v === undefined) throw new Error(`internal: no table name for {${name}}`);
    return v;
  });
}
