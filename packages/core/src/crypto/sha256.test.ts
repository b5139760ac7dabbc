import { createHash } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { sha256Hex } from "./sha256.js";

const reference = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");

describe("sha256Hex", () => {
  it("matches the FIPS 180-2 test vectors", () => {
    expect(sha256Hex("")).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect(sha256Hex("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")).toBe(
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
    );
  });

  it("agrees with node:crypto at every length around the block and padding boundaries", () => {
    for (let n = 0; n < 300; n++) expect(sha256Hex("x".repeat(n))).toBe(reference("x".repeat(n)));
  });

  it("agrees with node:crypto on arbitrary well-formed Unicode, including astral characters", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", maxLength: 200 }), (s) => sha256Hex(s) === reference(s)),
      { numRuns: 2000 },
    );
    expect(sha256Hex("é😀ﬁ\u0000")).toBe(reference("é😀ﬁ\u0000"));
  });
});
