// What the fleet's shared objects (budgets, breakers) see of the connection that keeps
// them in step, and how they hand it their Redis commands.

/** The connection as the shared objects see it. */
export interface Link {
  /** True while the fleet runs on local state (Redis away, slow, or not joined yet). Read on every call. */
  readonly local: boolean;
  /** Events (failures) after which a shared object asks for an early sync. */
  readonly syncEvery: number;
  /** How long unused keys live, ms. */
  readonly keyTtlMs: number;
  /** The pub/sub channel of breaker announcements. */
  readonly channel: string;
  /** This process's id among the fleet (holder of half-open trials). */
  readonly id: string;
  /**
   * Asks for a sync soon (coalesced; one in flight at a time). `urgent` (a breaker's state
   * change or trial) does not wait behind a sync already in flight.
   */
  soon(urgent?: boolean): void;
  /** The wall clock the callers use (ms). */
  wallNow(): number;
  /** A Redis time (ms) on the callers' wall clock. */
  toLocal(serverMs: number): number;
  /** Reports an error thrown by user code (a listener) without letting it escape. */
  swallow(during: string, error: unknown): void;
}

/** One Lua script call of a sync. */
export interface Command {
  readonly script: 'budget' | 'breakerSync' | 'breakerTrial' | 'rate';
  readonly keys: readonly string[];
  readonly args: readonly (string | number)[];
  /** The script's reply (an array whose first element is Redis time in µs). */
  readonly onReply: (reply: unknown[]) => void;
  /** The command failed or its answer did not come within timeoutMs. */
  readonly onFail: () => void;
}

/** A shared object kept in step with Redis. */
export interface Member {
  /** Whether it has something to hand in or ask for. */
  dirty(): boolean;
  /** Adds its commands to a sync (`all`: also when it has nothing to hand in, to read the fleet's state). */
  write(out: Command[], all: boolean): void;
  /** Called when the process joins the fleet again after running locally. */
  rejoined?(): void;
}
