// The PostgreSQL store's wake-ups: enqueues, requeues and resumes NOTIFY a channel of the
// tables; one connection per store LISTENs and calls the store's subscribers.
import type * as Pg from 'pg';
import { DeliveryError } from './errors.js';
import { postgresError, type PgSession } from './postgres-session.js';

export class PgListener {
  private readonly listeners = new Set<(destination: string) => void>();
  private listener: Pg.Client | null = null;
  private listening: Promise<void> | null = null;
  private relisten: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly s: PgSession,
    private readonly channel: string,
  ) {}

  async subscribe(listener: (destination: string) => void): Promise<() => Promise<void>> {
    if (this.s.closed) throw new DeliveryError('ERR_STORE_CLOSED', `${this.s.description}: the store is closed`);
    this.listeners.add(listener);
    try {
      await this.listen();
    } catch (e) {
      this.listeners.delete(listener);
      throw postgresError(e, this.s.description, 'listening for new work');
    }
    return async () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) await this.unlisten();
    };
  }

  /** One connection per store LISTENs; when it breaks it is made again (a second later), and polling covers the gap. */
  private listen(): Promise<void> {
    this.listening ??= (async () => {
      const client = this.s.listenClient();
      client.on('error', () => {});
      client.on('notification', (m) => {
        if (m.channel !== this.channel || !m.payload) return;
        for (const l of this.listeners) l(m.payload);
      });
      client.on('end', () => {
        if (this.listener !== client) return;
        this.listener = null;
        this.listening = null;
        if (!this.s.closed && this.listeners.size > 0) {
          this.relisten = setTimeout(() => {
            this.relisten = null;
            if (!this.s.closed && this.listeners.size > 0) this.listen().catch(() => {});
          }, 1_000);
          this.relisten.unref?.();
        }
      });
      try {
        await client.connect();
        await this.s.exec(client, `LISTEN ${this.channel}`);
      } catch (e) {
        this.listening = null;
        await client.end().catch(() => {});
        throw e;
      }
      this.listener = client;
    })();
    return this.listening;
  }

  async unlisten(): Promise<void> {
    if (this.relisten) clearTimeout(this.relisten);
    this.relisten = null;
    const pending = this.listening;
    this.listening = null;
    await pending?.catch(() => {});
    const client = this.listener;
    this.listener = null;
    if (client !== null) await this.s.endClient(client);
  }

  /** The store closes: nobody listens any more. */
  async close(): Promise<void> {
    this.listeners.clear();
    await this.unlisten();
  }
}
