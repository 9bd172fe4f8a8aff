import type { Random } from './types.js';

/**
 * A seeded random source (sfc32, seeded through splitmix32): the same seed gives the
 * same sequence on every machine and every run. Numbers are uniform in [0, 1).
 * Seeds may be integers or strings (hashed with FNV-1a).
 */
export function createSeededRandom(seed: number | string): Random {
  let s = typeof seed === 'string' ? fnv1a(seed) : seed >>> 0;
  if (typeof seed === 'number' && !Number.isInteger(seed)) s = fnv1a(String(seed));
  const split = (): number => {
    s = (s + 0x9e3779b9) | 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
  let a = split();
  let b = split();
  let c = split();
  let d = split();
  const next: Random = () => {
    a >>>= 0;
    b >>>= 0;
    c >>>= 0;
    d >>>= 0;
    let t = (a + b) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    d = (d + 1) | 0;
    t = (t + d) | 0;
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
  for (let i = 0; i < 12; i++) next();
  return next;
}

function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}
