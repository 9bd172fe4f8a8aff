import type { DriverName, Instrumentation, InstrumentationAttributes } from './run.js';

/**
 * The instrumentation a driver hands to execute(): the same hooks, with every operation
 * marked as the driver's (`driver`, and span attributes such as a partner's name). Made
 * once per client, interceptor or partner, so an operation costs one small object more,
 * and only when instrumentation is on. null in, null out.
 */
export function forDriver(inst: Instrumentation | null | undefined, driver: DriverName, attributes?: InstrumentationAttributes): Instrumentation | null {
  if (inst === null || inst === undefined) return null;
  const work = inst.work;
  return {
    operation: (info) => inst.operation(attributes === undefined ? { ...info, driver } : { ...info, driver, attributes }),
    ...(work !== undefined ? { work: (info) => work.call(inst, info) } : {}),
  };
}
