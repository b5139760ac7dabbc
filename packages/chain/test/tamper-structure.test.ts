// Tamper evidence, part 2: deletions, swaps, insertions and truncations of a 1,000-entry chain.
// Each trial must fail at the first out-of-place stream index, with the documented failure kind.

import type { ChainEntryRecord } from "@leash/core";
import { describe, expect, it } from "vitest";
import { buildEntry, checkpointOf, generateKeyPair, verifyChain, ZERO_HASH } from "../src/index.js";
import { decisionData, intBelow, makeChain, prng } from "./chain-fixture.js";

const N = 1_000;
const key = generateKeyPair();
const { entries, chainId } = makeChain(N, [key.signer], { seed: 11 });
const publicKeys = [key.publicKeyHex];
const options = { publicKeys, parallel: 64 };
const full = { count: N, head_hash: entries[N - 1]!.entry_hash };

/** A well-formed entry at `seq`, linked to `prev`, signed by `signer` with any claimed key id. */
function forge(
  seq: number,
  prev: ChainEntryRecord,
  signer: ReturnType<typeof generateKeyPair>["signer"],
  claimKeyId?: string,
): ChainEntryRecord {
  const lying = claimKeyId === undefined ? signer : { ...signer, keyId: claimKeyId };
  const forged = buildEntry({
    head: { seq: seq - 1, entry_hash: prev.entry_hash },
    chainId,
    kind: "decision",
    data: { ...decisionData(seq, prng(seq)), verdict: "ALLOW", reason: "forged" },
    signer: lying,
    nowNs: prev.created_ns + 1,
  });
  return forged;
}

describe("deletions", () => {
  it("of one entry or a run are 'removed' at the first index after the gap (40 trials)", async () => {
    const rand = prng(1);
    for (let trial = 0; trial < 40; trial++) {
      const k = intBelow(rand, N - 1); // never the last entry: that is a truncation
      const length = trial % 3 === 0 ? 1 + intBelow(rand, Math.min(20, N - 1 - k)) : 1;
      const tampered = [...entries.slice(0, k), ...entries.slice(k + length)];
      const result = await verifyChain(tampered, options);
      expect(result, `trial ${trial}: deleted ${k}..${k + length - 1}`).toMatchObject({
        ok: false,
        count_verified: k,
        failure: { index: k, seq: k + length, kind: "removed" },
      });
    }
  }, 60_000);

  it("of the genesis entry is 'removed' at index 0", async () => {
    const result = await verifyChain(entries.slice(1, 50), options);
    expect(result).toMatchObject({ ok: false, failure: { index: 0, seq: 1, kind: "removed" } });
  });
});

describe("swaps", () => {
  it("of two entries are 'reordered' at the earlier position (40 trials)", async () => {
    const rand = prng(2);
    for (let trial = 0; trial < 40; trial++) {
      const i = intBelow(rand, N - 1);
      const j = trial % 4 === 0 ? i + 1 : i + 1 + intBelow(rand, N - 1 - i);
      const tampered = entries.slice();
      tampered[i] = entries[j]!;
      tampered[j] = entries[i]!;
      const result = await verifyChain(tampered, options);
      expect(result, `trial ${trial}: swapped ${i} and ${j}`).toMatchObject({
        ok: false,
        count_verified: i,
        failure: { index: i, seq: j, kind: "reordered" },
      });
    }
  }, 60_000);

  it("moving an entry later is 'reordered' where it went missing", async () => {
    const tampered = [...entries.slice(0, 10), ...entries.slice(11, 30), entries[10]!, ...entries.slice(30)];
    const result = await verifyChain(tampered, options);
    expect(result).toMatchObject({ ok: false, failure: { index: 10, seq: 11, kind: "reordered" } });
  });
});

describe("insertions", () => {
  const other = generateKeyPair();

  it("of a forged entry, linked to its predecessor and signed with another key, are 'inserted' (30 trials)", async () => {
    const rand = prng(3);
    for (let trial = 0; trial < 30; trial++) {
      const p = 1 + intBelow(rand, N - 1);
      // Even trials: the forger signs under its own key id; odd: it claims the chain's key id.
      const forged = forge(p, entries[p - 1]!, other.signer, trial % 2 === 0 ? undefined : key.keyId);
      const tampered = [...entries.slice(0, p), forged, ...entries.slice(p)];
      const result = await verifyChain(tampered, options);
      expect(result, `trial ${trial}: forged entry at ${p}`).toMatchObject({
        ok: false,
        count_verified: p,
        failure: { index: p, seq: p, kind: "inserted" },
      });
    }
  }, 60_000);

  it("of a forged entry that replaces a genuine one is reported by its key or signature", async () => {
    const p = 500;
    const ownKey = [...entries.slice(0, p), forge(p, entries[p - 1]!, other.signer), ...entries.slice(p + 1)];
    expect(await verifyChain(ownKey, options)).toMatchObject({
      ok: false,
      failure: { index: p, seq: p, kind: "unknown_key" },
    });
    const claimed = [
      ...entries.slice(0, p),
      forge(p, entries[p - 1]!, other.signer, key.keyId),
      ...entries.slice(p + 1),
    ];
    expect(await verifyChain(claimed, options)).toMatchObject({
      ok: false,
      failure: { index: p, seq: p, kind: "bad_signature" },
    });
  });

  it("of a forged entry whose successor is re-linked to it fails at the forged entry", async () => {
    const p = 321;
    const forged = forge(p, entries[p - 1]!, other.signer);
    // The successor's prev_hash column now names the forgery; its signed body cannot be changed.
    const relinked = { ...entries[p]!, prev_hash: forged.entry_hash };
    const tampered = [...entries.slice(0, p), forged, relinked, ...entries.slice(p + 1)];
    expect(await verifyChain(tampered, options)).toMatchObject({
      ok: false,
      count_verified: p,
      failure: { index: p, seq: p, kind: "unknown_key" },
    });
  });

  it("of a replayed genuine entry (earlier or later copy) are 'inserted' (30 trials)", async () => {
    const rand = prng(4);
    for (let trial = 0; trial < 30; trial++) {
      const p = 1 + intBelow(rand, N - 1);
      const copyOf = trial % 2 === 0 ? intBelow(rand, p) : p + intBelow(rand, N - p);
      const tampered = [...entries.slice(0, p), entries[copyOf]!, ...entries.slice(p)];
      // A copy of entry p placed just before it is indistinguishable from it: the second one is extra.
      const index = copyOf === p ? p + 1 : p;
      const result = await verifyChain(tampered, options);
      expect(result, `trial ${trial}: copy of ${copyOf} at ${p}`).toMatchObject({
        ok: false,
        count_verified: index,
        failure: { index, seq: copyOf, kind: "inserted" },
      });
    }
  }, 60_000);

  it("of an entry's copy right after it are 'inserted' at the copy", async () => {
    const tampered = [...entries.slice(0, 101), entries[100]!, ...entries.slice(101, 200)];
    const result = await verifyChain(tampered, options);
    expect(result).toMatchObject({
      ok: false,
      count_verified: 101,
      failure: { index: 101, seq: 100, kind: "inserted" },
    });
    if (!result.ok) expect(result.failure.message).toContain("second entry for seq 100");
  });

  it("of a genuine entry from another chain signed by the same key are 'inserted'", async () => {
    const foreign = makeChain(5, [key.signer], { seed: 12 }).entries;
    const tampered = [...entries.slice(0, 3), foreign[3]!, ...entries.slice(3, 10)];
    const result = await verifyChain(tampered, options);
    expect(result).toMatchObject({ ok: false, failure: { index: 3, seq: 3, kind: "inserted" } });
    if (!result.ok) expect(result.failure.message).toContain("belongs to chain");
  });

  it("of a fork (a second genesis-linked entry 1) are 'inserted'", async () => {
    const fork = buildEntry({
      head: { seq: 0, entry_hash: entries[0]!.entry_hash },
      chainId,
      kind: "decision",
      data: { session_id: "s_x" },
      signer: key.signer,
      nowNs: 1,
    });
    const tampered = [entries[0]!, entries[1]!, { ...fork }, ...entries.slice(2, 9)];
    const result = await verifyChain(tampered, options);
    expect(result).toMatchObject({ ok: false, failure: { index: 2, seq: 1, kind: "inserted" } });
  });
});

describe("truncations", () => {
  it("without a checkpoint are invisible: the shorter chain verifies (documented)", async () => {
    const result = await verifyChain(entries.slice(0, 700), options);
    expect(result).toEqual({ ok: true, count: 700, head_hash: entries[699]!.entry_hash, chain_id: chainId });
  });

  it("with a checkpoint are 'truncated' at the first missing index (20 trials)", async () => {
    const rand = prng(5);
    for (let trial = 0; trial < 20; trial++) {
      const keep = intBelow(rand, N); // 0..N-1 entries remain
      const result = await verifyChain(entries.slice(0, keep), { ...options, checkpoint: full });
      expect(result, `trial ${trial}: kept ${keep}`).toMatchObject({
        ok: false,
        count_verified: keep,
        failure: { index: keep, seq: keep, kind: "truncated" },
      });
    }
  }, 60_000);

  it("cut and re-extended by the key holder are 'truncated' at the checkpoint's head", async () => {
    const cut = 900;
    const rewritten = entries.slice(0, cut);
    for (let seq = cut; seq < N + 5; seq++) {
      const prev = rewritten[seq - 1]!;
      rewritten.push(
        buildEntry({
          head: { seq: prev.seq, entry_hash: prev.entry_hash },
          chainId,
          kind: "decision",
          data: { session_id: "s_rewrite", n: seq },
          signer: key.signer,
          nowNs: prev.created_ns + 1000,
        }),
      );
    }
    expect((await verifyChain(rewritten, options)).ok).toBe(true);
    const result = await verifyChain(rewritten, { ...options, checkpoint: full });
    expect(result).toMatchObject({ ok: false, failure: { index: N - 1, seq: N - 1, kind: "truncated" } });
  });

  it("an old checkpoint still verifies a chain that has grown since", async () => {
    const first = await verifyChain(entries.slice(0, 400), options);
    const result = await verifyChain(entries, { ...options, checkpoint: checkpointOf(first) });
    expect(result).toMatchObject({ ok: true, count: N });
  });

  it("an empty chain verifies only without a (non-empty) checkpoint", async () => {
    expect(await verifyChain([], options)).toEqual({
      ok: true,
      count: 0,
      head_hash: ZERO_HASH,
      chain_id: null,
    });
    expect(await verifyChain([], { ...options, checkpoint: full })).toMatchObject({
      ok: false,
      failure: { index: 0, seq: 0, kind: "truncated" },
    });
  });
});
