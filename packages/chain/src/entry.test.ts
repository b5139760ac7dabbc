// Building entries: the body format, hashing, the JWS signature, genesis rules, input validation, and
// appendEntry against a ChainStore. Whole-chain verification is tested in verify-node.test.ts.

import { createHash, verify as nodeVerify } from "node:crypto";
import { CanonicalizationError, canonicalJson } from "@leash/core";
import { describe, expect, it } from "vitest";
import { ArrayChainStore, makeChain, T0 } from "../test/chain-fixture.js";
import { appendEntry, buildEntry, chainIdOf, compactJws, keyRotationData } from "./entry.js";
import { ChainError } from "./errors.js";
import { generateKeyPair } from "./keys.js";
import { jwsOf, ZERO_HASH } from "./verify/format.js";
import { verifyChain } from "./verify-node.js";

const key = generateKeyPair();
const fixed = () => Uint8Array.from([9, 9, 9, 9, 9, 9, 9, 9]);
const decision = {
  session_id: "s_01",
  agent_id: "research-bot",
  organization_id: "org_1",
  call_number: 4,
  tool_name: "web_search",
  params_hash: "de".repeat(32),
  nonce: "n-4",
  verdict: "DENY",
  reason: "max_repeat_exceeded",
  budget_before_usd: "0.494",
  budget_after_usd: "0.494",
  rng: null,
  operator_id: null,
};

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error("expected a throw");
}

describe("buildEntry", () => {
  const genesis = buildEntry({
    head: null,
    kind: "decision",
    data: decision,
    signer: key.signer,
    nowNs: T0,
    random: fixed,
  });

  it("makes a genesis entry whose chain_id is its own entry_id", () => {
    const body = JSON.parse(genesis.body);
    expect(genesis.seq).toBe(0);
    expect(genesis.prev_hash).toBe(ZERO_HASH);
    expect(body.chain_id).toBe(genesis.entry_id);
    expect(chainIdOf(genesis)).toBe(genesis.entry_id);
    expect(body).toEqual({
      v: 1,
      chain_id: genesis.entry_id,
      seq: 0,
      entry_id: genesis.entry_id,
      kind: "decision",
      timestamp_ns: "1700000000123456789",
      prev_hash: ZERO_HASH,
      key_id: key.keyId,
      data: decision,
    });
  });

  it("stores canonical JSON, hashes exactly those bytes, and copies the columns", () => {
    expect(genesis.body).toBe(canonicalJson(JSON.parse(genesis.body)));
    expect(genesis.entry_hash).toBe(createHash("sha256").update(genesis.body).digest("hex"));
    expect(genesis.session_id).toBe("s_01");
    expect(genesis.key_id).toBe(key.keyId);
    expect(genesis.kind).toBe("decision");
    expect(genesis.created_ns).toBe(Number(T0));
  });

  it("signs the JWS signing input, so the compact JWS verifies with the public key", () => {
    const [protectedB64, payloadB64, signatureB64] = jwsOf(genesis).split(".");
    expect(Buffer.from(protectedB64!, "base64url").toString()).toBe(`{"alg":"EdDSA","kid":"${key.keyId}"}`);
    expect(Buffer.from(payloadB64!, "base64url").toString()).toBe(genesis.body);
    const input = Buffer.from(`${protectedB64}.${payloadB64}`);
    expect(nodeVerify(null, input, key.publicKeyPem, Buffer.from(signatureB64!, "base64url"))).toBe(true);
    expect(
      nodeVerify(
        null,
        Buffer.from(`${protectedB64}.${payloadB64}x`),
        key.publicKeyPem,
        Buffer.from(signatureB64!, "base64url"),
      ),
    ).toBe(false);
  });

  it("links the next entry to the head and keeps the chain id", () => {
    const next = buildEntry({
      head: { seq: genesis.seq, entry_hash: genesis.entry_hash },
      chainId: chainIdOf(genesis),
      kind: "post_exec",
      data: { session_id: "s_01", actual_cost_usd: "0.0015" },
      signer: key.signer,
      nowNs: T0 + 5n,
    });
    const body = JSON.parse(next.body);
    expect(next.seq).toBe(1);
    expect(next.prev_hash).toBe(genesis.entry_hash);
    expect(body.prev_hash).toBe(genesis.entry_hash);
    expect(body.chain_id).toBe(genesis.entry_id);
    expect(body.timestamp_ns).toBe("1700000000123456794");
  });

  it("writes a null session_id column when data has no string session_id", () => {
    const entry = buildEntry({
      head: null,
      kind: "reset",
      data: { operator_id: "op" },
      signer: key.signer,
      nowNs: 1,
    });
    expect(entry.session_id).toBeNull();
  });

  it("is deterministic given the same time and random bytes", () => {
    const again = buildEntry({
      head: null,
      kind: "decision",
      data: decision,
      signer: key.signer,
      nowNs: T0,
      random: fixed,
    });
    expect(again).toEqual(genesis);
  });

  it("rejects inputs that cannot make a valid entry", () => {
    const base = { kind: "decision", data: decision, signer: key.signer, nowNs: T0 };
    const cases: [string, () => unknown][] = [
      ["genesis with a chainId", () => buildEntry({ ...base, head: null, chainId: "x" })],
      ["no chainId after genesis", () => buildEntry({ ...base, head: { seq: 0, entry_hash: ZERO_HASH } })],
      ["bad head hash", () => buildEntry({ ...base, head: { seq: 0, entry_hash: "abc" }, chainId: "c" })],
      ["empty kind", () => buildEntry({ ...base, head: null, kind: "" })],
      ["negative time", () => buildEntry({ ...base, head: null, nowNs: -1 })],
      [
        "bad rotation",
        () =>
          buildEntry({
            ...base,
            head: null,
            kind: "key_rotation",
            data: { next_key_id: "x", next_public_key: "y" },
          }),
      ],
    ];
    for (const [name, fn] of cases) {
      const error = thrown(fn);
      expect(ChainError.isInstance(error) && error.code, name).toBe("invalid_argument");
    }
  });

  it("refuses data without a canonical form (NaN, integers past 2^53), keeping the cause", () => {
    for (const bad of [Number.NaN, 2 ** 60]) {
      const error = thrown(() =>
        buildEntry({ head: null, kind: "decision", data: { x: bad }, signer: key.signer, nowNs: T0 }),
      );
      expect(ChainError.isInstance(error) && error.code).toBe("invalid_argument");
      expect(CanonicalizationError.isInstance((error as Error).cause)).toBe(true);
    }
  });

  it("accepts a valid key rotation", () => {
    const next = generateKeyPair();
    const entry = buildEntry({
      head: null,
      kind: "key_rotation",
      data: keyRotationData(next),
      signer: key.signer,
      nowNs: T0,
    });
    expect(JSON.parse(entry.body).data).toEqual({
      next_key_id: next.keyId,
      next_public_key: next.publicKeyHex,
    });
  });
});

describe("appendEntry", () => {
  it("appends after the store's head, finding the chain id from entry 0, and the result verifies", async () => {
    const store = new ArrayChainStore();
    const tx = { chain: store };
    const first = await appendEntry(tx, { kind: "decision", data: decision, signer: key.signer, nowNs: T0 });
    const second = await appendEntry(tx, {
      kind: "decision",
      data: decision,
      signer: key.signer,
      nowNs: T0 + 1n,
    });
    const third = await appendEntry(tx, {
      kind: "decision",
      data: decision,
      signer: key.signer,
      nowNs: T0 + 2n,
      chainId: chainIdOf(first),
    });
    expect([first.seq, second.seq, third.seq]).toEqual([0, 1, 2]);
    expect(third.prev_hash).toBe(second.entry_hash);
    expect(store.rows).toEqual([first, second, third]);
    const result = await verifyChain(store.rows, { publicKeys: [key.publicKeyHex] });
    expect(result).toEqual({ ok: true, count: 3, head_hash: third.entry_hash, chain_id: first.entry_id });
  });

  it("refuses a chainId for an empty store", async () => {
    const store = new ArrayChainStore();
    await expect(
      appendEntry(
        { chain: store },
        { kind: "decision", data: decision, signer: key.signer, nowNs: T0, chainId: "c" },
      ),
    ).rejects.toMatchObject({ code: "invalid_argument" });
    expect(store.rows).toHaveLength(0);
  });
});

describe("chainIdOf", () => {
  it("refuses an entry that is not a genesis", () => {
    const { entries } = makeChain(2, [key.signer]);
    expect(chainIdOf(entries[0]!)).toBe(entries[0]!.entry_id);
    expect((thrown(() => chainIdOf(entries[1]!)) as ChainError).code).toBe("invalid_argument");
  });
});

describe("compactJws", () => {
  it("equals the browser-safe jwsOf, including non-ASCII bodies", () => {
    const { signer } = generateKeyPair();
    const e = buildEntry({
      head: null,
      kind: "decision",
      data: { note: "héllo 😀 \u2028", n: 1 },
      signer,
      nowNs: 1_796_012_406_975_000_000,
    });
    expect(compactJws(e)).toBe(jwsOf(e));
  });

  it("matches jwsOf for a copy of an entry and after its body, signature or key id changed", () => {
    const { signer } = generateKeyPair();
    const e = buildEntry({ head: null, kind: "decision", data: { n: 1 }, signer, nowNs: T0 });
    expect(compactJws({ ...e })).toBe(jwsOf(e));
    const changed = { body: e.body.replace('"n":1', '"n":2'), signature: "AAAA", key_id: "k2" };
    for (const [field, value] of Object.entries(changed)) {
      const copy = { ...e, [field]: value };
      Object.assign(e, copy);
      expect(compactJws(e)).toBe(jwsOf(copy));
    }
  });

  it("gives each entry its own receipt and hash when many are built in a row, large non-ASCII bodies included", () => {
    const { signer } = generateKeyPair();
    const entries = Array.from({ length: 20 }, (_, i) =>
      buildEntry({
        head: null,
        kind: "decision",
        data: { i, pad: "é".repeat(i * 700) },
        signer,
        nowNs: T0 + BigInt(i),
      }),
    );
    for (const e of entries) {
      expect(compactJws(e)).toBe(jwsOf(e));
      expect(e.entry_hash).toBe(createHash("sha256").update(e.body, "utf8").digest("hex"));
    }
  });
});
