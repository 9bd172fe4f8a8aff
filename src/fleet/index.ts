// relent/fleet: budgets and breakers shared by every process that calls a dependency,
// through Redis (ioredis, an optional peer dependency loaded only here).
export { createRedisFleet } from './redis.js';
export type { RedisFleet, RedisFleetOptions, FleetEvent, FleetStats } from './redis.js';
export { FLEET_DEFAULTS } from './options.js';
export type { FleetBudgetStats } from './budget.js';
export type { FleetBreakerStats } from './breaker.js';
export type { FleetRateStats } from './rate.js';
export type { Fleet } from '../core/fleet.js';
