// Tamper evidence, part 3: moves and insertions the way they happen in a database, where rows are read
// in seq-column order, so moving one means renumbering it; and walks that start at a checkpoint.

import type { ChainEntryRecord } from "@leash/core";
import { describe, expect, it } from "vitest";
import { buildEntry, generateKeyPair, verifyChain } from "../src/index.js";
import { intBelow, makeChain, prng } from "./chain-fixture.js";

const N = 200;
const key = generateKeyPair();
const next = generateKeyPair();
const { entries, chainId } = makeChain(N, [key.signer, next.signer], { seed: 31, rotateAt: [120] });
const publicKeys = [key.publicKeyHex];

/** The rows as a store returns them after the attacker rewrote the seq column to the new order. */
const renumbered = (rows: readonly ChainEntryRecord[]): ChainEntryRecord[] =>
  rows.map((row, seq) => ({ ...row, seq }));

describe("rows renumbered in the store", () => {
  it("two swapped rows are 'reordered' at the earlier position, not 'edited' (20 trials)", async () => {
    const rand = prng(8);
    // Both on one side of the rotation at 120: moved before it, an entry of the next key is unknown_key.
    for (let trial = 0; trial < 20; trial++) {
      const [lo, hi] = trial % 2 === 0 ? [0, 120] : [121, N];
      const i = lo + intBelow(rand, hi - lo - 1);
      const j = trial % 4 === 0 ? i + 1 : i + 1 + intBelow(rand, hi - 1 - i);
      const swapped = entries.slice();
      swapped[i] = entries[j]!;
      swapped[j] = entries[i]!;
      const result = await verifyChain(renumbered(swapped), { publicKeys });
      expect(result, `trial ${trial}: swapped ${i} and ${j}`).toMatchObject({
        ok: false,
        count_verified: i,
        failure: { index: i, seq: j, kind: "reordered" },
      });
    }
  });

  it("a forged row slid in (later rows renumbered up) is 'inserted'", async () => {
    const other = generateKeyPair();
    const p = 57;
    const forged = buildEntry({
      head: { seq: p - 1, entry_hash: entries[p - 1]!.entry_hash },
      chainId,
      kind: "decision",
      data: { session_id: "s_forged", verdict: "ALLOW", reason: "within_thresholds" },
      signer: other.signer,
      nowNs: entries[p - 1]!.created_ns + 1,
    });
    const rows = renumbered([...entries.slice(0, p), forged, ...entries.slice(p)]);
    expect(await verifyChain(rows, { publicKeys })).toMatchObject({
      ok: false,
      count_verified: p,
      failure: { index: p, seq: p, kind: "inserted" },
    });
  });

  it("a genuine row copied in (later rows renumbered up) is 'inserted'", async () => {
    for (const copyOf of [3, 150]) {
      const p = 90;
      const rows = renumbered([...entries.slice(0, p), entries[copyOf]!, ...entries.slice(p)]);
      expect(await verifyChain(rows, { publicKeys }), `copy of ${copyOf}`).toMatchObject({
        ok: false,
        count_verified: p,
        failure: { index: p, seq: copyOf, kind: "inserted" },
      });
    }
  });

  it("a deleted row whose successors were renumbered down is 'removed'", async () => {
    const rows = renumbered([...entries.slice(0, 44), ...entries.slice(45)]);
    expect(await verifyChain(rows, { publicKeys })).toMatchObject({
      ok: false,
      count_verified: 44,
      failure: { index: 44, seq: 45, kind: "removed" },
    });
  });

  it("a seq column edited on a row that stays in place is still 'edited'", async () => {
    const rows = entries.slice();
    rows[30] = { ...rows[30]!, seq: 1000 };
    expect(await verifyChain(rows, { publicKeys })).toMatchObject({
      ok: false,
      failure: { index: 30, kind: "edited", message: "column seq differs from the body" },
    });
  });
});

describe("fromCheckpoint", () => {
  const at = (count: number) => ({ count, head_hash: entries[count - 1]!.entry_hash });

  it("reads only from the checkpoint's head on, and ends where a full walk ends", async () => {
    const full = await verifyChain(entries, { publicKeys });
    const resumed = await verifyChain(entries.slice(79), {
      publicKeys,
      checkpoint: at(80),
      fromCheckpoint: true,
    });
    expect(resumed).toEqual(full);
  });

  it("follows the key in force at the head: a rotation there, or its signer (and only it)", async () => {
    // The head is the rotation itself: the next key comes from its body, no trusted key needed for it.
    const onRotation = await verifyChain(entries.slice(120), {
      publicKeys,
      checkpoint: at(121),
      fromCheckpoint: true,
    });
    expect(onRotation).toMatchObject({ ok: true, count: N });
    // After the rotation the old key is retired: trusting it does not make it sign again.
    const later = await verifyChain(entries.slice(150), {
      publicKeys: [next.publicKeyHex],
      checkpoint: at(151),
      fromCheckpoint: true,
    });
    expect(later).toMatchObject({ ok: true, count: N });
    const forged = buildEntry({
      head: { seq: N - 1, entry_hash: entries[N - 1]!.entry_hash },
      chainId,
      kind: "decision",
      data: { session_id: "s_old_key" },
      signer: key.signer,
      nowNs: entries[N - 1]!.created_ns + 1,
    });
    const withOld = await verifyChain([...entries.slice(150), forged], {
      publicKeys: [key.publicKeyHex, next.publicKeyHex],
      checkpoint: at(151),
      fromCheckpoint: true,
    });
    expect(withOld).toMatchObject({ ok: false, failure: { index: N, seq: N, kind: "unknown_key" } });
  });

  it("names chain positions, and refuses a head that is not the checkpoint's", async () => {
    const tampered = entries.slice(79);
    tampered[20] = { ...tampered[20]!, signature: entries[5]!.signature };
    expect(
      await verifyChain(tampered, { publicKeys, checkpoint: at(80), fromCheckpoint: true }),
    ).toMatchObject({
      ok: false,
      count_verified: 99,
      failure: { index: 99, seq: 99, kind: "bad_signature" },
    });
    const wrongHead = await verifyChain(entries.slice(78), {
      publicKeys,
      checkpoint: at(80),
      fromCheckpoint: true,
    });
    expect(wrongHead).toMatchObject({ ok: false, failure: { index: 79, seq: 78, kind: "truncated" } });
    expect(await verifyChain([], { publicKeys, checkpoint: at(80), fromCheckpoint: true })).toMatchObject({
      ok: false,
      failure: { index: 79, seq: 79, kind: "truncated" },
    });
  });
});

describe('signatures: "last"', () => {
  const at = (count: number) => ({ count, head_hash: entries[count - 1]!.entry_hash });
  const resumed = { publicKeys: [next.publicKeyHex], checkpoint: at(151), fromCheckpoint: true } as const;
  const withSignature = (row: ChainEntryRecord, from: ChainEntryRecord) => ({
    ...row,
    signature: from.signature,
  });

  it("checks the last entry's signature, and everything else on every entry", async () => {
    const rows = entries.slice(150);
    expect(await verifyChain(rows, { ...resumed, signatures: "last" })).toMatchObject({ ok: true, count: N });
    const badLast = [...rows.slice(0, -1), withSignature(rows.at(-1)!, rows[3]!)];
    expect(await verifyChain(badLast, { ...resumed, signatures: "last" })).toMatchObject({
      ok: false,
      failure: { index: N - 1, kind: "bad_signature" },
    });
    const edited = rows.slice();
    edited[10] = { ...edited[10]!, body: edited[10]!.body.replace('"v":1', '"v":2') };
    expect(await verifyChain(edited, { ...resumed, signatures: "last" })).toMatchObject({
      ok: false,
      failure: { index: 160, kind: "edited" },
    });
  });

  it("leaves a middle entry's signature to full verification (documented)", async () => {
    const rows = entries.slice(150);
    rows[10] = withSignature(rows[10]!, rows[11]!);
    expect(await verifyChain(rows, { ...resumed, signatures: "last" })).toMatchObject({ ok: true });
    expect(await verifyChain(rows, resumed)).toMatchObject({
      ok: false,
      failure: { index: 160, kind: "bad_signature" },
    });
  });
});
