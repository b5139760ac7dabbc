// Tamper evidence, part 1: random single-byte edits of a random entry's body, signature or hash, and
// edits of the copied columns, over a 1,000-entry chain. Every trial must fail at the edited entry.

import type { ChainEntryRecord } from "@leash/core";
import { describe, expect, it } from "vitest";
import { generateKeyPair, verifyChain } from "../src/index.js";
import { intBelow, makeChain, prng } from "./chain-fixture.js";

const N = 1_000;
const key = generateKeyPair();
const { entries } = makeChain(N, [key.signer], { seed: 7 });
const publicKeys = [key.publicKeyHex];

/** Replaces the byte at `pos` of the field's UTF-8 (body) or Latin-1 (ASCII fields) encoding. */
function editByte(text: string, encoding: "utf8" | "latin1", rand: () => number): string {
  const bytes = Buffer.from(text, encoding);
  const pos = intBelow(rand, bytes.length);
  const old = bytes[pos]!;
  bytes[pos] = (old + 1 + intBelow(rand, 255)) % 256; // any value but the old one
  return bytes.toString(encoding);
}

describe("random single-byte edits (1,000 entries, 150 trials)", () => {
  it("are each caught at the edited entry, with the right kind", async () => {
    const rand = prng(20240611);
    const fields = ["body", "signature", "entry_hash"] as const;
    for (let trial = 0; trial < 150; trial++) {
      const k = intBelow(rand, N);
      const field = fields[trial % 3]!;
      const original = entries[k]!;
      const edited: ChainEntryRecord = {
        ...original,
        [field]: editByte(original[field], field === "body" ? "utf8" : "latin1", rand),
      };
      expect(edited[field]).not.toBe(original[field]);
      const tampered = entries.slice();
      tampered[k] = edited;
      // Most trials run the thread-pool path (faster here); it must name the same first failure.
      const result = await verifyChain(tampered, { publicKeys, parallel: trial % 4 === 0 ? 1 : 64 });
      const kind = field === "signature" ? "bad_signature" : "edited";
      expect(result, `trial ${trial}: ${field} of entry ${k}`).toMatchObject({
        ok: false,
        count_verified: k,
        failure: { index: k, seq: k, kind },
      });
    }
  }, 120_000);

  it("also catches edits of the copied columns", async () => {
    const rand = prng(99);
    const edits: [string, (e: ChainEntryRecord) => ChainEntryRecord][] = [
      ["seq", (e) => ({ ...e, seq: e.seq + 1 })],
      [
        "entry_id",
        (e) => ({
          ...e,
          entry_id: `${e.entry_id.slice(0, -1)}0` === e.entry_id ? "x" : `${e.entry_id.slice(0, -1)}0`,
        }),
      ],
      ["prev_hash", (e) => ({ ...e, prev_hash: e.prev_hash.replace(/^./, (c) => (c === "a" ? "b" : "a")) })],
      ["key_id", (e) => ({ ...e, key_id: "0123456789abcdef" })],
      ["kind", (e) => ({ ...e, kind: "post_exec" })],
      ["session_id", (e) => ({ ...e, session_id: "someone_else" })],
      ["created_ns", (e) => ({ ...e, created_ns: e.created_ns + 1e6 })],
    ];
    for (let trial = 0; trial < 35; trial++) {
      const k = 1 + intBelow(rand, N - 1);
      const [name, edit] = edits[trial % edits.length]!;
      const tampered = entries.slice();
      tampered[k] = edit(entries[k]!);
      const result = await verifyChain(tampered, { publicKeys, parallel: 32 });
      expect(result, `trial ${trial}: column ${name} of entry ${k}`).toMatchObject({
        ok: false,
        failure: { index: k, kind: "edited" },
      });
    }
  }, 60_000);

  it("are caught identically by the noble verifier", async () => {
    const rand = prng(5);
    const fields = ["body", "signature", "entry_hash"] as const;
    const short = entries.slice(0, 120);
    for (let trial = 0; trial < 9; trial++) {
      const k = intBelow(rand, short.length);
      const field = fields[trial % 3]!;
      const tampered = short.slice();
      tampered[k] = {
        ...short[k]!,
        [field]: editByte(short[k]![field], field === "body" ? "utf8" : "latin1", rand),
      };
      const viaNode = await verifyChain(tampered, { publicKeys });
      const viaNoble = await verifyChain(tampered, { publicKeys, verifier: "noble" });
      expect(viaNoble).toEqual(viaNode);
      expect(viaNoble.ok).toBe(false);
    }
  }, 60_000);
});
