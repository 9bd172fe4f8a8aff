import { createPolicy, DEFAULT_POLICY, type Policy, type PolicySpec, type PresetName } from '../core/policy.js';
import { RelentError } from '../core/errors.js';
import { adobeBestEffort, adobeConfigurable } from './adobe.js';
import { awsStandard, envoyDefault, grpc, grpc2017 } from './extras.js';
import { http429 } from './http-429.js';
import { modelArmor } from './model-armor.js';
import { backgroundFullJitter, openrtbBid, openrtbBillingNotice } from './openrtb.js';
import type { PresetDefinition } from './types.js';

export type { PresetDefinition } from './types.js';
export type { PresetName } from '../core/policy.js';

/** Every preset, by name, in the order `relent presets` lists them. */
export const PRESETS: ReadonlyMap<PresetName, PresetDefinition> = new Map(
  [
    modelArmor,
    adobeBestEffort,
    adobeConfigurable,
    openrtbBid,
    openrtbBillingNotice,
    backgroundFullJitter,
    http429,
    grpc,
    grpc2017,
    awsStandard,
    envoyDefault,
  ].map((p) => [p.name, p] as const),
);

const compiled = new Map<string, Policy>();

/** Whether `name` is one of relent's presets. */
export function isPresetName(name: unknown): name is PresetName {
  return typeof name === 'string' && PRESETS.has(name as PresetName);
}

/** The policy of a preset, validated once and cached. */
export function presetPolicy(name: PresetName): Policy {
  let p = compiled.get(name);
  if (!p) {
    const def = PRESETS.get(name as PresetName);
    if (!def) {
      throw new RelentError('ERR_INVALID_POLICY', `Unknown preset ${JSON.stringify(name)} (known: ${[...PRESETS.keys()].join(', ')})`, { field: 'preset' });
    }
    p = createPolicy(def.spec, name);
    compiled.set(name, p);
  }
  return p;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Objects whose fields merge one level deep; a backoff or budget of another kind replaces the base. */
function mergeField(key: string, base: unknown, over: unknown): unknown {
  if (!isPlainObject(base) || !isPlainObject(over)) return over;
  if ((key === 'backoff' || key === 'throttleBackoff' || key === 'budget') && over.kind !== undefined && over.kind !== base.kind) return over;
  return { ...base, ...over };
}

/** A preset's spec with the caller's overrides on top. */
export function mergeSpecs(base: PolicySpec, over: PolicySpec): PolicySpec {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) {
    if (k === 'preset' || v === undefined) continue;
    out[k] = k in out ? mergeField(k, out[k], v) : v;
  }
  return out as PolicySpec;
}

function isPolicy(v: unknown): v is Policy {
  return isPlainObject(v) && 'retryOnStatus' in v && 'spec' in v;
}

/**
 * Turns what users write — a preset name, a policy spec (optionally naming a `preset`
 * to start from), or an already validated Policy — into a validated Policy.
 * Errors name the field that is wrong.
 */
const fromSpec = new WeakMap<object, Policy>();

export function resolvePolicy(input?: PresetName | PolicySpec | Policy | null): Policy {
  return resolvePolicyInput(input);
}

/**
 * resolvePolicy() for input that was not type-checked (JSON, flags, config files): the
 * same checks, with errors that name what was wrong (an unknown preset lists the known).
 */
export function resolvePolicyInput(input: unknown): Policy {
  if (input === undefined || input === null) return DEFAULT_POLICY;
  if (typeof input === 'object' && input !== null) {
    // A spec object reused across calls is validated once.
    if (isPolicy(input)) return input;
    const cached = fromSpec.get(input);
    if (cached) return cached;
    const p = resolveSpec(input);
    fromSpec.set(input, p);
    return p;
  }
  return resolveSpec(input);
}

/**
 * The kill switch of chaos injection: RELENT_CHAOS=off (or 0, false, no) in the
 * environment, read when a policy is resolved. Read through globalThis, so the entry
 * point stays free of Node-only globals (in a browser there is no environment: chaos
 * stays as the policy says).
 */
export function chaosSwitchedOff(): boolean {
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  const v = env?.RELENT_CHAOS;
  return v !== undefined && /^(off|0|false|no)$/i.test(v.trim());
}

/** A spec without its chaos when the kill switch is on. */
function switched(spec: PolicySpec): PolicySpec {
  return spec.chaos !== undefined && spec.chaos !== null && chaosSwitchedOff() ? { ...spec, chaos: null } : spec;
}

function resolveSpec(input: unknown): Policy {
  if (typeof input === 'string') return presetPolicy(input as PresetName);
  if (!isPlainObject(input)) throw new RelentError('ERR_INVALID_POLICY', 'Expected `policy` to be a preset name or a policy object', { field: 'policy' });
  const spec = switched(input as PolicySpec);
  if (spec.preset === undefined) return createPolicy(spec);
  if (typeof spec.preset !== 'string') throw new RelentError('ERR_INVALID_POLICY', 'Expected `preset` to be a preset name', { field: 'preset' });
  const base = PRESETS.get(spec.preset);
  if (!base) presetPolicy(spec.preset); // throws the "unknown preset" error
  return createPolicy(capped(base!, mergeSpecs(base!.spec, spec)), spec.preset);
}

/** A spec under a preset's own ceiling on maxAttempts (see PresetDefinition.maxAttemptsCap). */
function capped(def: PresetDefinition | undefined, spec: PolicySpec): PolicySpec {
  const cap = def?.maxAttemptsCap;
  if (cap === undefined || typeof spec.maxAttempts !== 'number' || !(spec.maxAttempts > cap)) return spec;
  return { ...spec, maxAttempts: cap };
}

/** A policy derived from another with a few fields changed (per-call overrides). */
export function withOverrides(policy: Policy, over: PolicySpec): Policy {
  return createPolicy(capped(PRESETS.get(policy.name as PresetName), switched(mergeSpecs(policy.spec as PolicySpec, over))), policy.name);
}
