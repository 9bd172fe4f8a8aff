// Types of servers.mjs.
import type { Redis } from 'ioredis';
export declare function freePort(): Promise<number>;
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
export declare function ownRedis(extra?: string[]): Promise<OwnRedis>;
export declare const sleep: (ms: number) => Promise<void>;
/** One node of a cluster of the test's own. */
export interface ClusterNode {
  readonly port: number;
  readonly url: string;
}
/** A Redis Cluster of the test's own: 3 masters + 3 replicas on free ports (never the shared 6379). */
export interface OwnCluster {
  readonly nodes: readonly ClusterNode[];
  /** redis:// URLs of every node (seeds for the fleet). */
  readonly urls: readonly string[];
  /** The master serving a key now (asks a live node: CLUSTER KEYSLOT and CLUSTER SLOTS). */
  masterOf(key: string): Promise<number>;
  /** The ports of the masters serving slots now. */
  masters(): Promise<number[]>;
  /** kill -9 of a node. */
  kill(port: number): Promise<void>;
  /** Waits until `port` has no slots any more and every slot is served by a live master (a replica took over). */
  failedOver(port: number, ms?: number): Promise<void>;
  /** A client of one live node (not a cluster client), for checks. */
  node(port: number): Redis;
  /** Kills every node and removes its files. */
  stop(): Promise<void>;
}
/**
 * Starts six redis-servers with `cluster-enabled yes` (node timeout `nodeTimeoutMs`: how
 * long before a silent master is failed over), joins them with `redis-cli --cluster
 * create … --cluster-replicas 1`, and waits for `cluster_state:ok` on every node.
 */
export declare function ownCluster(nodeTimeoutMs?: number): Promise<OwnCluster>;
/** A redis-server in a network namespace of the test's own, reached over a veth pair; `partition()` drops every packet both ways (iptables DROP inside the namespace), `heal()` lets them through again. */
export interface NamespacedRedis {
  readonly url: string;
  readonly host: string;
  readonly port: number;
  partition(): Promise<void>;
  heal(): Promise<void>;
  /** Connections Redis has accepted so far (INFO stats total_connections_received). */
  connectionsReceived(): Promise<number>;
  stop(): Promise<void>;
}
/** Whether this process may make namespaces and iptables rules (root, with ip and iptables installed); why not otherwise. */
export declare function namespacesUnavailable(): Promise<string | null>;
export declare function namespacedRedis(): Promise<NamespacedRedis>;
