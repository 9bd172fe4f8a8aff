// The Redis Cluster hash slot of a key, to group a sync's commands by the node that
// serves them. "Redis cluster specification", key distribution model and hash tags
// (https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/): the slot
// is CRC16 (XMODEM: polynomial 0x1021, initial value 0) of the key — or of its hash tag,
// the part between the first `{` and the first `}` after it when that part is not empty —
// modulo 16384. The spec's test vector: CRC16("123456789") = 0x31C3.

export const SLOTS = 16384;

const TABLE = (() => {
  const t = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let k = 0; k < 8; k++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
    t[i] = c;
  }
  return t;
})();

export function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ b) & 0xff]!;
  return crc;
}

const encoder = new TextEncoder();

/** The hash slot of `key` (its UTF-8 bytes, as Redis sees them). */
export function keySlot(key: string): number {
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  return crc16(encoder.encode(key)) % SLOTS;
}
