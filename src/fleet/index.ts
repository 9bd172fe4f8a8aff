// relent/fleet: budgets and breakers shared by every process that calls a dependency,
// through Redis — one node, a master behind Sentinels, or a Redis Cluster (ioredis, an
// optional peer dependency loaded only here).
export { createRedisFleet } from './redis.js';
export type { RedisFleet, RedisFleetOptions, FleetEvent, FleetStats, FleetNodeStats } from './redis.js';
export type { SentinelAddress } from './options.js';
export { FLEET_DEFAULTS } from './options.js';
export type { FleetBudgetStats } from './budget.js';
export type { FleetBreakerStats } from './breaker.js';
export type { FleetRateStats } from './rate.js';
export type { Fleet } from '../core/fleet.js';
