// UUIDv7 layout: time in the first 48 bits, sub-millisecond fraction in rand_a, version and variant.
// Uniqueness under load is not tested here; chain order never depends on the id.

import { describe, expect, it } from "vitest";
import { ChainError } from "./errors.js";
import { uuidv7 } from "./uuid.js";

const zeros = (size: number) => new Uint8Array(size);
const ones = (size: number) => new Uint8Array(size).fill(0xff);
const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe("uuidv7", () => {
  it("puts the millisecond timestamp in the first 48 bits, version 7 and variant 10", () => {
    const ns = 1_700_000_000_123_456_789n;
    const id = uuidv7(ns, ones);
    expect(id).toMatch(UUID_V7);
    expect(Number.parseInt(id.replace(/-/g, "").slice(0, 12), 16)).toBe(1_700_000_000_123);
    expect(id[19]).toBe("b"); // 0b10 variant with the 2 random bits that follow set
    expect(uuidv7(ns, zeros)[19]).toBe("8");
  });

  it("encodes the sub-millisecond fraction in rand_a, so ids within a millisecond sort by time", () => {
    const base = 1_700_000_000_123_000_000n;
    const ids = [0n, 1_000n, 250_000n, 500_000n, 999_999n].map((d) => uuidv7(base + d, zeros));
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids[3]!.slice(15, 18)).toBe("800"); // half a millisecond = 2048/4096
  });

  it("is deterministic for a given time and random bytes, and uses the random bytes", () => {
    const random = () => Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(uuidv7(1_000_000n, random)).toBe(uuidv7(1_000_000n, random));
    expect(uuidv7(1_000_000n, random).slice(-17)).toBe("8102-030405060708");
  });

  it("writes the exact id for a given time and random bytes, at both ends of the time range", () => {
    const random = () => Uint8Array.from([0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67]);
    expect(uuidv7(1_700_000_000_123_456_789n, random)).toBe("018bcfe5-687b-774f-9ead-beef01234567");
    expect(uuidv7(0, random)).toBe("00000000-0000-7000-9ead-beef01234567");
    expect(uuidv7(2n ** 48n * 1_000_000n - 1n, random)).toBe("ffffffff-ffff-7fff-9ead-beef01234567");
  });

  it("draws fresh random bits for every id from the default pool, across refills", () => {
    const ids = Array.from({ length: 1200 }, () => uuidv7(1_700_000_000_000_000_000n));
    expect(new Set(ids).size).toBe(ids.length);
    for (const id of ids) expect(id).toMatch(UUID_V7);
  });

  it("agrees between number and bigint time", () => {
    expect(uuidv7(1_700_000_000_000_000_000, zeros)).toBe(uuidv7(1_700_000_000_000_000_000n, zeros));
  });

  it("rejects negative or fractional time", () => {
    for (const bad of [-1, 1.5, Number.NaN, -1n]) {
      let error: unknown;
      try {
        uuidv7(bad, zeros);
      } catch (e) {
        error = e;
      }
      expect(ChainError.isInstance(error) && error.code).toBe("invalid_argument");
    }
  });
});
