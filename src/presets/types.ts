import type { PolicySpec, PresetName } from '../core/policy.js';

/** A documented retry policy of a real service, with the source it copies. */
export interface PresetDefinition {
  readonly name: PresetName;
  /** One line: what it is for. */
  readonly summary: string;
  /** Where the numbers come from: the public document's title and address (and what is relent's own choice). */
  readonly source: string;
  /** The documented schedule in words, as `relent presets` prints it. */
  readonly schedule: string;
  /** Choices relent made where the source is silent or ambiguous. */
  readonly notes: readonly string[];
  readonly spec: PolicySpec;
  /**
   * The source's own ceiling on maxAttempts: a larger value given with the preset is
   * taken as this one, without an error (gRPC A6: "Values greater than 5 are treated as 5").
   */
  readonly maxAttemptsCap?: number;
}
