// relent/sim: a seeded discrete-event simulator whose clients decide with the core's
// decide(). Every export is named here (no `export *`).

export type { ProgressFn } from './common.js';
export { PEER_POLICIES, RELENT_POLICIES, MEASURED_OVERLOAD } from './policies.js';
export type { SimPolicy } from './policies.js';
export { runBrooker, BROOKER_DEFAULTS, BROOKER_STRATEGIES, BROOKER_BACKOFFS, BROOKER_BASE_MS, BROOKER_CAP_MS, brookerPolicySpec } from './brooker.js';
export type { BrookerConfig, BrookerRow, BrookerResult } from './brooker.js';
export { runOverload, OVERLOAD_DEFAULTS, DEPENDENCY_DEFAULTS } from './overload.js';
export type { OverloadConfig, OverloadRow, OverloadResult, DependencyModel, Fault, WindowStats } from './overload.js';
export { runLayers, LAYERS_DEFAULTS, LAYER_POLICY } from './layers.js';
export { runCapacity, CAPACITY_DEFAULTS } from './capacity.js';
export { runTail, TAIL_DEFAULTS } from './tail.js';
export { runQuota, QUOTA_DEFAULTS } from './quota.js';
export type { QuotaConfig, QuotaContender, QuotaRow, QuotaResult } from './quota.js';
export type { TailConfig, TailContender, TailRow, TailResult } from './tail.js';
export type { CapacityConfig, CapacityContender, CapacityRow, CapacityResult } from './capacity.js';
export type { LayersConfig, LayersRow, LayersResult, LayersVariant } from './layers.js';
export { parseScenario, parseScenarioText, parseSimPolicy, runScenario, SCENARIO_NAMES } from './config.js';
export type { Scenario, ScenarioName, ScenarioResult } from './config.js';
export { formatBrooker, formatOverload, formatLayers, formatCapacity, formatTail, formatQuota, formatResult, textTable } from './format.js';
export { renderSimulationHtml } from './html.js';
