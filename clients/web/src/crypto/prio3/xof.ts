/**
 * XofTurboShake128 of the VDAF specification (draft-irtf-cfrg-vdaf-18…20, §6.2.1), ported from
 * shared/crypto/prio3/xof.py: TurboSHAKE128(M, D = 1) (RFC 9861) of
 * M = le16(len(dst)) ‖ dst ‖ le8(len(seed)) ‖ seed ‖ binder, squeezed as a stream.
 * `nextVec` expands into field elements by rejection sampling: each encodedSize-byte
 * little-endian chunk, masked to the bit length of p, is kept iff it is < p, in stream order.
 */
import { turboshake128 } from "@noble/hashes/sha3-addons.js";

import type { Field, FVec } from "./field.js";

export const SEED_SIZE = 32;

export function concatBytes(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

export class XofTurboShake128 {
  private readonly h: ReturnType<typeof turboshake128.create>;

  constructor(seed: Uint8Array, dst: Uint8Array, binder: Uint8Array) {
    if (seed.length > 255) throw new RangeError("seed longer than 255 bytes");
    if (dst.length > 65535) throw new RangeError("dst longer than 65535 bytes");
    this.h = turboshake128.create({ D: 1 });
    this.h.update(
      concatBytes(
        new Uint8Array([dst.length & 0xff, dst.length >> 8]),
        dst,
        new Uint8Array([seed.length]),
        seed,
        binder,
      ),
    );
  }

  /** The next `length` bytes of the output stream. */
  next(length: number): Uint8Array {
    return this.h.xof(length);
  }

  /** The next `length` field elements by rejection sampling (§6.2 next_vec). */
  nextVec(field: Field, length: number): FVec {
    const out: FVec = [];
    while (out.length < length) {
      const want = length - out.length;
      for (const x of field.intsFromLE(this.next(want * field.encodedSize))) {
        const v = x & field.mask;
        if (v < field.p) out.push(v);
      }
    }
    return out;
  }

  /** A fresh SEED_SIZE-byte seed: the first SEED_SIZE output bytes. */
  static deriveSeed(seed: Uint8Array, dst: Uint8Array, binder: Uint8Array): Uint8Array {
    return new XofTurboShake128(seed, dst, binder).next(SEED_SIZE);
  }

  /** `length` field elements expanded from `seed` (§6.2 expand_into_vec). */
  static expandIntoVec(
    field: Field,
    seed: Uint8Array,
    dst: Uint8Array,
    binder: Uint8Array,
    length: number,
  ): FVec {
    return new XofTurboShake128(seed, dst, binder).nextVec(field, length);
  }
}
