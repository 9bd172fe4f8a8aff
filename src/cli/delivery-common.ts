// Shared by `relent deliver`, `relent enqueue` and `relent queue`: where the store is,
// reading a config file, and turning delivery errors into one line and an exit status.
import { readFile } from 'node:fs/promises';
import { parseDeliveryConfig, type DeliveryConfig } from '../delivery/config.js';
import { DeliveryError } from '../delivery/errors.js';
import { EXIT, fsReason, jsonErrorWhere, type Io } from './args.js';

export const DEFAULT_STORE = 'sqlite:./relent.db';

/** --store, else the config's `store`, else $RELENT_STORE (when set and not empty), else sqlite:./relent.db. */
export function storeUrl(flag: string | undefined, config: DeliveryConfig | null): string {
  return flag ?? config?.store ?? (process.env.RELENT_STORE || DEFAULT_STORE);
}

/** Reads and validates a delivery config file; errors name the file and the field. */
export async function readConfig(file: string): Promise<DeliveryConfig> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    throw new DeliveryError('ERR_INVALID_CONFIG', `${file}: cannot read (${fsReason(e, String(e))})`, { field: '' });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new DeliveryError('ERR_INVALID_CONFIG', `${file}: invalid JSON at ${jsonErrorWhere(text)}`, { field: '' });
  }
  return parseDeliveryConfig(raw, file);
}

const USAGE_CODES = new Set(['ERR_INVALID_CONFIG', 'ERR_INVALID_ITEM', 'ERR_UNKNOWN_DESTINATION']);

/** One line on stderr and the exit status for an error of a delivery command. */
export function reportError(command: string, e: unknown, io: Io): number {
  if (DeliveryError.is(e)) {
    io.err(`relent ${command}: ${e.message}\n`);
    return USAGE_CODES.has(e.code) ? EXIT.usage : EXIT.failure;
  }
  throw e; // main() reports anything else
}

/** 1,234,567 */
export function int(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** An epoch time relative to now: "in 29m 58s", "3s ago". */
export function relative(at: number, now: number): string {
  const d = at - now;
  const abs = Math.abs(d);
  const s = Math.round(abs / 1000);
  const text = s < 60 ? `${s}s` : s < 3600 ? `${Math.floor(s / 60)}m ${s % 60}s` : `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return d > 0 ? `in ${text}` : `${text} ago`;
}
