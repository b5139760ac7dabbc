// Export formats: JSONL round trips to the exact signed bytes, and the reference ledger is checked by
// an independent verifier written here from the format's description, not with this package's code.

import { createHash, createPublicKey, verify } from "node:crypto";
import { canonicalJson } from "@leash/core";
import { describe, expect, it } from "vitest";
import { makeChain, T0 } from "../test/chain-fixture.js";
import { fromJsonl, toJsonl, toShackleLedger, writeVerifiedShackleLedger } from "./export.js";
import { generateKeyPair } from "./keys.js";
import { verifyChain } from "./verify-node.js";

const [k1, k2] = [generateKeyPair(), generateKeyPair()];
const { entries } = makeChain(30, [k1.signer, k2.signer], { seed: 31, rotateAt: [10] });

async function collect(lines: AsyncIterable<string>): Promise<string[]> {
  const out: string[] = [];
  for await (const line of lines) out.push(line);
  return out;
}

/**
 * An independent verifier of the reference ledger format, as a third party would write it: sorted-key
 * compact JSON with non-ASCII escaped (Python's json.dumps defaults), SHA-256 over that text plus the
 * previous record_hash, Ed25519 over the record_hash's hex text, and a pinned verify key.
 */
function verifyLedger(lines: string[], pinnedKeyHex: string): number | null {
  const canon = (v: unknown): string =>
    Array.isArray(v)
      ? `[${v.map(canon).join(",")}]`
      : v !== null && typeof v === "object"
        ? `{${Object.keys(v)
            .sort()
            .map((k) => `${JSON.stringify(k)}:${canon((v as Record<string, unknown>)[k])}`)
            .join(",")}}`
        : JSON.stringify(v);
  const ascii = (s: string) =>
    s.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  const spki = (hex: string) =>
    Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), Buffer.from(hex, "hex")]);
  let prev = "0".repeat(64);
  for (const [i, line] of lines.entries()) {
    const { record_hash, signature, verify_key, ...core } = JSON.parse(line);
    if (core.prev_hash !== prev || verify_key !== pinnedKeyHex) return i;
    if (
      createHash("sha256")
        .update(ascii(canon(core)) + prev)
        .digest("hex") !== record_hash
    )
      return i;
    const key = createPublicKey({ key: spki(verify_key), format: "der", type: "spki" });
    if (!verify(null, Buffer.from(record_hash), key, Buffer.from(signature, "hex"))) return i;
    prev = record_hash;
  }
  return null;
}

describe("toJsonl / fromJsonl", () => {
  it("writes one line per entry with the body as an object, and reads back the exact signed bytes", async () => {
    const lines = await collect(toJsonl(entries));
    expect(lines).toHaveLength(entries.length);
    for (const line of lines) expect(line.endsWith("\n") && !line.slice(0, -1).includes("\n")).toBe(true);
    const first = JSON.parse(lines[0]!);
    expect(typeof first.body).toBe("object");
    expect(first.body.data.session_id).toBe(entries[0]!.session_id);
    const back = lines.map(fromJsonl);
    expect(back).toEqual(entries);
    expect(await verifyChain(back, { publicKeys: [k1.publicKeyHex] })).toMatchObject({ ok: true, count: 30 });
  });

  it("prints created_ns as its exact decimal digits, and reads back both that and the old number form", async () => {
    const lines = await collect(toJsonl(entries));
    for (const [i, line] of lines.entries()) {
      const value = JSON.parse(line);
      // Nanoseconds past 2^53: a JSON number would have printed rounded digits.
      expect(value.created_ns).toBe(JSON.parse(entries[i]!.body).timestamp_ns);
      expect(line).toContain(`"created_ns":"${value.created_ns}"`);
    }
    expect(JSON.parse(lines[3]!).created_ns).toBe((T0 + 3n * 1_000_123n).toString());
    // A file written before: created_ns as a JSON number.
    const old = lines.map((line) => {
      const value = JSON.parse(line);
      return JSON.stringify({ ...value, created_ns: Number(value.created_ns) });
    });
    expect(old.map(fromJsonl)).toEqual(entries);
    expect(await verifyChain(old.map(fromJsonl), { publicKeys: [k1.publicKeyHex] })).toMatchObject({
      ok: true,
    });
    // A column that disagrees with its body still disagrees once exported and read back.
    const skewed = entries
      .slice(0, 3)
      .map((e, i) => (i === 1 ? { ...e, created_ns: e.created_ns + 4096 } : e));
    const back = (await collect(toJsonl(skewed))).map(fromJsonl);
    expect(await verifyChain(back, { publicKeys: [k1.publicKeyHex] })).toMatchObject({
      ok: false,
      failure: { index: 1, kind: "edited", message: "column created_ns differs from body.timestamp_ns" },
    });
  });

  it("keeps a body that is not JSON as its string, so verification still sees the corruption", async () => {
    const corrupt = entries.slice(0, 5);
    corrupt[2] = { ...corrupt[2]!, body: "{not json" };
    const back = (await collect(toJsonl(corrupt))).map(fromJsonl);
    expect(back[2]!.body).toBe("{not json");
    expect(await verifyChain(back, { publicKeys: [k1.publicKeyHex] })).toMatchObject({
      ok: false,
      failure: { index: 2, kind: "edited" },
    });
  });
});

describe("toShackleLedger", () => {
  it("produces a ledger an independent verifier accepts (non-ASCII text and a rotation included)", async () => {
    const lines = await collect(toShackleLedger(entries, k2.signer));
    expect(lines.some((l) => /[^\x20-\x7e\n]/.test(l))).toBe(true); // café / 📈 reach the file unescaped
    expect(verifyLedger(lines, k2.publicKeyHex)).toBeNull();
    expect(verifyLedger(lines, k1.publicKeyHex)).toBe(0); // pinned to the wrong key
  });

  it("lets the independent verifier find an edit, a deletion and a swap at the right record", async () => {
    const lines = await collect(toShackleLedger(entries, k2.signer));
    const edited = lines.slice();
    const record = JSON.parse(edited[17]!);
    record.data.verdict = record.data.verdict === "ALLOW" ? "DENY" : "ALLOW";
    edited[17] = JSON.stringify(record);
    expect(verifyLedger(edited, k2.publicKeyHex)).toBe(17);
    expect(verifyLedger([...lines.slice(0, 5), ...lines.slice(6)], k2.publicKeyHex)).toBe(5);
    const swapped = lines.slice();
    [swapped[3], swapped[4]] = [lines[4]!, lines[3]!];
    expect(verifyLedger(swapped, k2.publicKeyHex)).toBe(3);
  });

  it("carries enough of each entry to rebuild its signed body", async () => {
    const lines = await collect(toShackleLedger(entries, k1.signer));
    for (const [i, line] of lines.entries()) {
      const r = JSON.parse(line);
      const body = canonicalJson({
        v: 1,
        chain_id: r.chain_id,
        seq: r.seq,
        entry_id: r.entry_id,
        kind: r.event_type,
        timestamp_ns: r.timestamp_ns,
        prev_hash: r.entry_prev_hash,
        key_id: r.key_id,
        data: r.data,
      });
      expect(body).toBe(entries[i]!.body);
      expect(r.entry_signature).toBe(entries[i]!.signature);
    }
  });

  it("without a signer writes the reference's unsigned form", async () => {
    const [line] = await collect(toShackleLedger(entries.slice(0, 1)));
    expect(JSON.parse(line!)).toMatchObject({ signature: "", verify_key: "", prev_hash: "0".repeat(64) });
  });

  it("refuses to export an entry whose body is not a v1 body", async () => {
    const bad = [{ ...entries[0]!, body: "[]" }];
    await expect(collect(toShackleLedger(bad, k1.signer))).rejects.toMatchObject({
      code: "invalid_argument",
    });
  });
});

describe("writeVerifiedShackleLedger", () => {
  async function run(chain: typeof entries, signer = k2.signer, publicKeys = [k1.publicKeyHex]) {
    const lines: string[] = [];
    const result = await writeVerifiedShackleLedger(chain, { signer, publicKeys }, (line) => {
      lines.push(line);
    });
    return { result, lines };
  }

  it("exports a chain that verifies, signed by the key in force at its head, for the independent verifier", async () => {
    const { result, lines } = await run(entries);
    expect(result).toEqual({ ok: true, count: 30, head_hash: entries[29]!.entry_hash });
    expect(lines).toEqual(await collect(toShackleLedger(entries, k2.signer)));
    expect(verifyLedger(lines, k2.publicKeyHex)).toBeNull();
    // Before the rotation at seq 10 the first key was in force.
    expect((await run(entries.slice(0, 10), k1.signer)).result).toMatchObject({ ok: true, count: 10 });
  });

  it("refuses a chain that does not verify against the trusted key, naming the entry", async () => {
    const forged = entries.slice();
    const body = JSON.parse(forged[12]!.body);
    body.data.verdict = body.data.verdict === "ALLOW" ? "DENY" : "ALLOW";
    const text = canonicalJson(body);
    // Re-hashed, so hash and link checks alone would pass; the signature gives it away. Exported
    // with a stranger's key, the reference verifier (which trusts verify_key) would accept it.
    const stranger = generateKeyPair();
    forged[12] = { ...forged[12]!, body: text, entry_hash: createHash("sha256").update(text).digest("hex") };
    expect(
      verifyLedger(await collect(toShackleLedger(forged, stranger.signer)), stranger.publicKeyHex),
    ).toBeNull();
    const { result } = await run(forged, stranger.signer);
    expect(result).toMatchObject({ ok: false, reason: "chain", failure: { index: 12 } });
    // A key the caller does not trust: nothing in the chain verifies.
    expect((await run(entries, k2.signer, [stranger.publicKeyHex])).result).toMatchObject({
      ok: false,
      reason: "chain",
      failure: { index: 0, kind: "unknown_key" },
    });
  });

  it("refuses a signer that is not the key in force at the head: a stranger's, or one a rotation retired", async () => {
    const stranger = generateKeyPair();
    for (const signer of [stranger.signer, k1.signer]) {
      const { result } = await run(entries, signer);
      expect(result).toMatchObject({ ok: false, reason: "signer" });
      expect(result.ok === false && result.reason === "signer" && result.message).toContain(
        `key ${k2.signer.keyId} is in force at its head (seq 29)`,
      );
    }
    // An empty chain: only a trusted key.
    expect((await run([], k1.signer)).result).toMatchObject({ ok: true, count: 0 });
    expect((await run([], stranger.signer)).result).toMatchObject({ ok: false, reason: "signer" });
  });
});
