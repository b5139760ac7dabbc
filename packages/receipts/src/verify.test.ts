// Receipts: a good one verifies (via the package entry point too); every kind of bad one is refused
// with its reason. Receipts are made by @leash/chain, the way the engine makes them.

import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { buildEntry, chainIdOf, generateKeyPair, jwsOf, keyRotationData } from "@leash/chain";
import { verifyReceipt as verifyFromPackage } from "@leash/receipts";
import { base64url, CompactSign, exportJWK, importPKCS8 } from "jose";
import { describe, expect, it } from "vitest";
import { ReceiptError } from "./errors.js";
import { receiptOf } from "./receipt.js";
import { receiptKeyId, verifyReceipt } from "./verify.js";

const key = generateKeyPair();
const other = generateKeyPair();
const decision = {
  session_id: "s_01",
  agent_id: "research-bot",
  organization_id: "org_1",
  call_number: 3,
  tool_name: "café_search",
  params_hash: "de".repeat(32),
  nonce: "n-3",
  verdict: "ALLOW",
  reason: "within_thresholds",
  budget_before_usd: "0.496",
  budget_after_usd: "0.494",
  rng: null,
  operator_id: null,
};
const genesis = buildEntry({
  head: null,
  kind: "decision",
  data: decision,
  signer: key.signer,
  nowNs: 1_700_000_000_000_000_000n,
});
const entry = buildEntry({
  head: { seq: 0, entry_hash: genesis.entry_hash },
  chainId: chainIdOf(genesis),
  kind: "decision",
  data: { ...decision, call_number: 4, nonce: "n-4" },
  signer: key.signer,
  nowNs: 1_700_000_000_000_001_000n,
});
const receipt = jwsOf(entry);

/** Signs any header and payload with `pem` — to make receipts that are validly signed but wrong. */
async function signRaw(
  header: Record<string, unknown>,
  payload: string,
  pem = key.privateKeyPem,
): Promise<string> {
  const privateKey = await importPKCS8(pem, "EdDSA");
  return new CompactSign(new TextEncoder().encode(payload))
    .setProtectedHeader(header as { alg: string })
    .sign(privateKey);
}

describe("verifyReceipt", () => {
  it("accepts a good receipt and returns the body, entry hash, seq and chain", async () => {
    const result = await verifyReceipt(receipt, key.publicKeyHex);
    expect(result).toEqual({
      ok: true,
      payload: JSON.parse(entry.body),
      entry_hash: entry.entry_hash,
      seq: 1,
      chain_id: genesis.entry_id,
      key_id: key.keyId,
    });
  });

  it("remembers imported keys without mixing them up: the right key, another, then the right one again", async () => {
    expect((await verifyReceipt(receipt, key.publicKeyHex)).ok).toBe(true);
    expect(await verifyReceipt(receipt, other.publicKeyHex)).toMatchObject({
      ok: false,
      reason: "kid_mismatch",
    });
    expect((await verifyReceipt(receipt, key.publicKeyRaw)).ok).toBe(true);
    const forged = `${receipt.slice(0, -2)}${receipt.endsWith("AA") ? "AB" : "AA"}`;
    expect(await verifyReceipt(forged, key.publicKeyHex)).toMatchObject({ ok: false });
  });

  it("is the same string whether built by @leash/chain's jwsOf or by receiptOf", () => {
    expect(receiptOf(entry)).toBe(receipt);
    expect(() => receiptOf({ ...entry, key_id: "nope" })).toThrow(ReceiptError);
    const error = (() => {
      try {
        receiptOf({ ...entry, key_id: "nope" });
      } catch (e) {
        return e;
      }
    })();
    // One spelling of the code across packages; the old one stays readable for a release.
    expect(ReceiptError.isInstance(error) && [error.code, error.legacyCode]).toEqual([
      "invalid_argument",
      "invalid_input",
    ]);
  });

  it("works through the package entry point with the key as hex, bytes or JWK", async () => {
    const jwk = { kty: "OKP", crv: "Ed25519", x: base64url.encode(key.publicKeyRaw) };
    for (const publicKey of [key.publicKeyHex, key.publicKeyRaw, jwk]) {
      expect((await verifyFromPackage(receipt, publicKey)).ok).toBe(true);
    }
    expect(await receiptKeyId(jwk)).toBe(key.keyId);
  });

  it("rejects every single-character change anywhere in the receipt", async () => {
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const reasons = new Set<string>();
    for (let i = 0; i < receipt.length; i++) {
      if (receipt[i] === ".") continue;
      // The next letter of the alphabet: a valid base64url character, always a different one.
      const replacement = alphabet[(alphabet.indexOf(receipt[i]!) + 1) % alphabet.length]!;
      const changed = receipt.slice(0, i) + replacement + receipt.slice(i + 1);
      const result = await verifyReceipt(changed, key.publicKeyHex);
      expect(result.ok, `position ${i}`).toBe(false);
      if (!result.ok) reasons.add(result.reason);
    }
    expect(reasons.has("bad_signature")).toBe(true);
    expect(reasons.has("malformed")).toBe(true);
  });

  it("rejects a receipt verified with another key (kid mismatch)", async () => {
    expect(await verifyReceipt(receipt, other.publicKeyHex)).toMatchObject({
      ok: false,
      reason: "kid_mismatch",
    });
  });

  it("rejects a kid that names the given key while the signature is another key's", async () => {
    const [, payload, signature] = receipt.split(".");
    const relabelled = `${base64url.encode(`{"alg":"EdDSA","kid":"${other.keyId}"}`)}.${payload}.${signature}`;
    expect(await verifyReceipt(relabelled, other.publicKeyHex)).toMatchObject({
      ok: false,
      reason: "bad_signature",
    });
  });

  it("rejects a receipt of another chain when a chainId is given", async () => {
    expect(
      await verifyReceipt(receipt, key.publicKeyHex, { chainId: "0190aaaa-0000-7000-8000-000000000000" }),
    ).toMatchObject({
      ok: false,
      reason: "chain_mismatch",
    });
    expect((await verifyReceipt(receipt, key.publicKeyHex, { chainId: genesis.entry_id })).ok).toBe(true);
  });

  it("rejects algorithms other than EdDSA, including none and the validly signed Ed25519 alias", async () => {
    const [, payload, signature] = receipt.split(".");
    for (const alg of ["none", "HS256", "ES256", "Ed25519"]) {
      const forged = `${base64url.encode(JSON.stringify({ alg, kid: key.keyId }))}.${payload}.${signature}`;
      expect(await verifyReceipt(forged, key.publicKeyHex), alg).toMatchObject({
        ok: false,
        reason: "alg_not_allowed",
      });
    }
    const signedAsEd25519 = await signRaw({ alg: "Ed25519", kid: key.keyId }, entry.body);
    expect(await verifyReceipt(signedAsEd25519, key.publicKeyHex)).toMatchObject({
      ok: false,
      reason: "alg_not_allowed",
    });
  });

  it("rejects a validly signed payload that is not an entry body of that key", async () => {
    const notABody = await signRaw({ alg: "EdDSA", kid: key.keyId }, '{"hello":"world"}');
    expect(await verifyReceipt(notABody, key.publicKeyHex)).toMatchObject({
      ok: false,
      reason: "invalid_payload",
    });
    const otherKid = await signRaw(
      { alg: "EdDSA", kid: key.keyId },
      entry.body.replace(key.keyId, other.keyId),
    );
    expect(await verifyReceipt(otherKid, key.publicKeyHex)).toMatchObject({
      ok: false,
      reason: "invalid_payload",
    });
    const rotation = buildEntry({
      head: null,
      kind: "key_rotation",
      data: keyRotationData(other),
      signer: key.signer,
      nowNs: 5,
    });
    expect((await verifyReceipt(jwsOf(rotation), key.publicKeyHex)).ok).toBe(true);
  });

  it("rejects malformed receipts and unusable keys without throwing", async () => {
    for (const bad of ["", "a.b", "a.b.c.d", "..", `${receipt}.`, 42 as unknown as string]) {
      expect(await verifyReceipt(bad, key.publicKeyHex)).toMatchObject({ ok: false, reason: "malformed" });
    }
    const privateJwk = await exportJWK(await importPKCS8(key.privateKeyPem, "EdDSA", { extractable: true }));
    for (const badKey of ["abcd", new Uint8Array(31), { kty: "RSA", n: "x", e: "AQAB" }, privateJwk]) {
      expect(await verifyReceipt(receipt, badKey)).toMatchObject({ ok: false, reason: "invalid_key" });
    }
  });

  it("rejects a non-canonical base64url spelling of the signature", async () => {
    // The last character of a 64-byte signature carries 2 bits; flipping one of its 4 unused bits
    // leaves the decoded bytes unchanged for a lenient decoder.
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const last = alphabet.indexOf(receipt.at(-1)!);
    const twin = `${receipt.slice(0, -1)}${alphabet[last ^ 1]}`;
    expect(await verifyReceipt(twin, key.publicKeyHex)).toMatchObject({ ok: false, reason: "malformed" });
  });

  it("imports nothing Node-only (source scan)", () => {
    const dir = fileURLToPath(new URL(".", import.meta.url));
    const files = readdirSync(dir).filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts"));
    expect(files.length).toBeGreaterThanOrEqual(4);
    for (const file of files) {
      const source = readFileSync(`${dir}${file}`, "utf8");
      const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
      const specifiers = [...code.matchAll(/from\s+"([^"]+)"/g)].map((m) => m[1]!);
      for (const spec of specifiers)
        expect(["jose", "@leash/core"].includes(spec) || spec.startsWith("./"), `${file}: ${spec}`).toBe(
          true,
        );
      expect(code, file).not.toMatch(/\bBuffer\b|\bprocess\.|require\(|node:/);
    }
  });
});
