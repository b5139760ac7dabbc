// Whole-chain verification behaviour: round trips with every verifier, streams, progress, options,
// and key rotation. Tamper detection over 1,000-entry chains lives in ../test/tamper-*.test.ts.

import type { ChainEntryRecord } from "@leash/core";
import { describe, expect, it } from "vitest";
import { makeChain, T0 } from "../test/chain-fixture.js";
import { buildEntry, keyRotationData } from "./entry.js";
import { ChainError } from "./errors.js";
import { generateKeyPair } from "./keys.js";
import { checkpointOf } from "./verify/checkpoint.js";
import { verifyChain } from "./verify-node.js";

const [k1, k2, k3] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
const { entries, chainId } = makeChain(1_000, [k1.signer], { seed: 3 });

describe("verifyChain round trip", () => {
  it("accepts an untouched 1,000-entry chain with node, node in parallel, and noble alike", async () => {
    const expected = { ok: true, count: 1_000, head_hash: entries[999]!.entry_hash, chain_id: chainId };
    expect(await verifyChain(entries, { publicKeys: [k1.publicKeyHex] })).toEqual(expected);
    expect(await verifyChain(entries, { publicKeys: [k1.publicKeyRaw], parallel: 16 })).toEqual(expected);
    expect(await verifyChain(entries, { publicKeys: [k1.publicKeyHex], verifier: "noble" })).toEqual(
      expected,
    );
  }, 60_000);

  it("pins the chain id when asked: another chain's genesis is 'inserted' at index 0", async () => {
    expect((await verifyChain(entries.slice(0, 5), { publicKeys: [k1.publicKeyHex], chainId })).ok).toBe(
      true,
    );
    const result = await verifyChain(entries.slice(0, 5), {
      publicKeys: [k1.publicKeyHex],
      chainId: "another",
    });
    expect(result).toMatchObject({ ok: false, failure: { index: 0, seq: 0, kind: "inserted" } });
  });

  it("reads async iterables and stops reading at an immediate failure", async () => {
    let pulled = 0;
    const tampered = entries.slice(0, 200);
    tampered[50] = { ...tampered[50]!, body: tampered[50]!.body.replace('"v":1', '"v":2') };
    async function* source(): AsyncGenerator<ChainEntryRecord> {
      for (const entry of tampered) {
        pulled++;
        yield entry;
      }
    }
    const result = await verifyChain(source(), { publicKeys: [k1.publicKeyHex] });
    expect(result).toMatchObject({ ok: false, failure: { index: 50, kind: "edited" } });
    expect(pulled).toBe(51);
  });

  it("reports progress every 1,024 entries and at the end", async () => {
    const seen: number[] = [];
    const long = makeChain(2_100, [k1.signer], { seed: 4 }).entries;
    await verifyChain(long, { publicKeys: [k1.publicKeyHex], parallel: 16, onProgress: (n) => seen.push(n) });
    expect(seen).toEqual([1_024, 2_048, 2_100]);
  }, 30_000);

  it("turns malformed records into 'edited' failures instead of throwing", async () => {
    const broken = [entries[0]!, { ...entries[1]!, body: 42 } as unknown as ChainEntryRecord];
    expect(await verifyChain(broken, { publicKeys: [k1.publicKeyHex] })).toMatchObject({
      ok: false,
      failure: { index: 1, seq: 1, kind: "edited" },
    });
    const garbage = [null as unknown as ChainEntryRecord];
    expect(await verifyChain(garbage, { publicKeys: [k1.publicKeyHex] })).toMatchObject({
      ok: false,
      failure: { index: 0, seq: null, kind: "edited" },
    });
  });

  it("rejects bad options with ChainError, not a failed result", async () => {
    const cases: [string, () => unknown][] = [
      ["no keys", () => verifyChain(entries, { publicKeys: [] })],
      ["short hex key", () => verifyChain(entries, { publicKeys: ["abcd"] })],
      [
        "bad checkpoint",
        () =>
          verifyChain(entries, { publicKeys: [k1.publicKeyHex], checkpoint: { count: -1, head_hash: "x" } }),
      ],
      ["parallel 0", () => verifyChain(entries, { publicKeys: [k1.publicKeyHex], parallel: 0 })],
    ];
    for (const [name, run] of cases) {
      let error: unknown;
      try {
        await run();
      } catch (e) {
        error = e;
      }
      expect(ChainError.isInstance(error), name).toBe(true);
    }
  });

  it("checkpointOf gives count and head of a good result, and refuses a failed one", async () => {
    const good = await verifyChain(entries.slice(0, 10), { publicKeys: [k1.publicKeyHex] });
    expect(checkpointOf(good)).toEqual({ count: 10, head_hash: entries[9]!.entry_hash });
    const bad = await verifyChain(entries.slice(1, 10), { publicKeys: [k1.publicKeyHex] });
    expect(() => checkpointOf(bad)).toThrow(/no checkpoint/);
  });
});

describe("keys and rotation", () => {
  const rotated = makeChain(60, [k1.signer, k2.signer, k3.signer], { seed: 8, rotateAt: [20, 40] });

  it("follows rotations from the first key alone, with both verifiers", async () => {
    const expected = {
      ok: true,
      count: 60,
      head_hash: rotated.entries[59]!.entry_hash,
      chain_id: rotated.chainId,
    };
    expect(await verifyChain(rotated.entries, { publicKeys: [k1.publicKeyHex] })).toEqual(expected);
    expect(await verifyChain(rotated.entries, { publicKeys: [k1.publicKeyHex], verifier: "noble" })).toEqual(
      expected,
    );
    expect(await verifyChain(rotated.entries, { publicKeys: [k1.publicKeyHex], parallel: 8 })).toEqual(
      expected,
    );
    expect(rotated.entries.map((e) => e.key_id).slice(19, 23)).toEqual([
      k1.keyId,
      k1.keyId,
      k2.keyId,
      k2.keyId,
    ]);
  });

  it("fails 'unknown_key' when the first key is not trusted", async () => {
    const result = await verifyChain(rotated.entries, { publicKeys: [k2.publicKeyHex] });
    expect(result).toMatchObject({
      ok: false,
      count_verified: 0,
      failure: { index: 0, seq: 0, kind: "unknown_key" },
    });
  });

  it("fails 'unknown_key' for a key never introduced, and for the retired key after a rotation", async () => {
    const head = rotated.entries[20]!; // the first rotation: k1 → k2
    const next = (signer: typeof k1.signer) =>
      buildEntry({
        head: { seq: head.seq, entry_hash: head.entry_hash },
        chainId: rotated.chainId,
        kind: "decision",
        data: { session_id: "s" },
        signer,
        nowNs: T0,
      });
    const stranger = await verifyChain([...rotated.entries.slice(0, 21), next(k3.signer)], {
      publicKeys: [k1.publicKeyHex],
    });
    expect(stranger).toMatchObject({ ok: false, failure: { index: 21, seq: 21, kind: "unknown_key" } });
    // k1 is still in the trusted list, yet it may not sign after handing over to k2.
    const retired = await verifyChain([...rotated.entries.slice(0, 21), next(k1.signer)], {
      publicKeys: [k1.publicKeyHex],
    });
    expect(retired).toMatchObject({ ok: false, failure: { index: 21, seq: 21, kind: "unknown_key" } });
    if (!retired.ok) expect(retired.failure.message).toContain("retired by the key_rotation at seq 20");
    const proper = await verifyChain([...rotated.entries.slice(0, 21), next(k2.signer)], {
      publicKeys: [k1.publicKeyHex],
    });
    expect(proper.ok).toBe(true);
  });

  it("a removed rotation entry shows up as 'unknown_key' at the entry signed by the new key", async () => {
    const tampered = [...rotated.entries.slice(0, 20), ...rotated.entries.slice(21)];
    const result = await verifyChain(tampered, { publicKeys: [k1.publicKeyHex] });
    expect(result).toMatchObject({ ok: false, failure: { index: 20, seq: 21, kind: "unknown_key" } });
  });

  it("trusting several keys lets any of them start the chain", async () => {
    const result = await verifyChain(rotated.entries, { publicKeys: [k3.publicKeyHex, k1.publicKeyHex] });
    expect(result.ok).toBe(true);
  });

  it("a rotation entry signed by a retired key is refused and introduces nothing", async () => {
    const rogue = buildEntry({
      head: { seq: 59, entry_hash: rotated.entries[59]!.entry_hash },
      chainId: rotated.chainId,
      kind: "key_rotation",
      data: keyRotationData(k1),
      signer: k2.signer, // k2 was retired at seq 40
      nowNs: T0,
    });
    const result = await verifyChain([...rotated.entries, rogue], { publicKeys: [k1.publicKeyHex] });
    expect(result).toMatchObject({ ok: false, failure: { index: 60, kind: "unknown_key" } });
  });
});
