// docs/chain-format.md is what an auditor writes a verifier from: its worked example must be what
// buildEntry writes and what node:crypto alone verifies, and it must document every kind and field.
import { createHash, createPrivateKey, createPublicKey, verify } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  buildEntry,
  checkEventData,
  createSigner,
  EVENT_SCHEMAS,
  signingInputOf,
  verifyChain,
} from "../src/index.js";

const DOC = readFileSync(new URL("../../../docs/chain-format.md", import.meta.url), "utf8");

/** The one-line code blocks tagged `example:<name>`. */
const examples = new Map(
  [...DOC.matchAll(/```(?:json|text) example:([a-z0-9-]+)\n([^\n]*)\n```/g)].map((m) => [m[1]!, m[2]!]),
);
const example = (name: string): string => {
  const text = examples.get(name);
  if (text === undefined) throw new Error(`docs/chain-format.md has no example:${name} block`);
  return text;
};

/** The doc's key: the Ed25519 key whose seed is 32 bytes of 0x07 (PKCS#8 DER prefix + seed). */
const PRIVATE_KEY = createPrivateKey({
  key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), Buffer.alloc(32, 7)]),
  format: "der",
  type: "pkcs8",
});

describe("docs/chain-format.md", () => {
  it("the worked example is what buildEntry writes", () => {
    const signer = createSigner(PRIVATE_KEY);
    const random = (n: number) => new Uint8Array(n).fill(0x5a);
    const e0 = buildEntry({
      head: null,
      kind: "guard_created",
      data: { guard_id: "team", parent_guard_id: null, limit_usd: "10" },
      signer,
      nowNs: 1750000000000000000n,
      random,
    });
    const e1 = buildEntry({
      head: e0,
      chainId: e0.entry_id,
      kind: "guard_created",
      data: { guard_id: "team-a", parent_guard_id: "team", limit_usd: "2.5" },
      signer,
      nowNs: 1750000000001000000n,
      random,
    });
    expect(signer.publicKeyHex).toBe(example("public-key"));
    expect([e0.body, e0.entry_hash, signingInputOf(e0), e0.signature]).toEqual([
      example("body-0"),
      example("hash-0"),
      example("signing-input-0"),
      example("signature-0"),
    ]);
    expect([e1.body, e1.entry_hash, e1.signature]).toEqual([
      example("body-1"),
      example("hash-1"),
      example("signature-1"),
    ]);
  });

  it("the example verifies with node:crypto alone, by the doc's rules, and as a chain", async () => {
    const publicKey = createPublicKey({
      key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(example("public-key"), "hex").toString("base64url") },
      format: "jwk",
    });
    const header = Buffer.from(JSON.stringify({ alg: "EdDSA", kid: "fe812c12f3ab4ce6" })).toString(
      "base64url",
    );
    const entries = [0, 1].map((i) => {
      const body = example(`body-${i}`);
      const hash = createHash("sha256").update(body, "utf8").digest("hex");
      expect(hash).toBe(example(`hash-${i}`));
      const input = `${header}.${Buffer.from(body, "utf8").toString("base64url")}`;
      const signature = Buffer.from(example(`signature-${i}`), "base64url");
      expect(verify(null, Buffer.from(input, "ascii"), publicKey, signature)).toBe(true);
      const parsed = JSON.parse(body);
      expect(checkEventData(parsed.kind, parsed.data)).toBeNull();
      return {
        seq: parsed.seq,
        entry_id: parsed.entry_id,
        entry_hash: hash,
        prev_hash: parsed.prev_hash,
        body,
        signature: example(`signature-${i}`),
        key_id: parsed.key_id,
        kind: parsed.kind,
        session_id: null,
        created_ns: Number(parsed.timestamp_ns),
      };
    });
    expect(JSON.parse(example("body-1")).prev_hash).toBe(example("hash-0"));
    expect(await verifyChain(entries, { publicKeys: [example("public-key")] })).toMatchObject({ ok: true });
  });

  it("documents every kind, and every field of every version of its schema", () => {
    for (const [kind, versions] of Object.entries(EVENT_SCHEMAS)) {
      const start = DOC.indexOf(`### \`${kind}\``);
      expect(start, kind).toBeGreaterThan(0);
      const end = DOC.indexOf("\n### ", start + 1);
      const section = DOC.slice(start, end === -1 ? undefined : end);
      for (const { version, schema } of versions) {
        expect(section, `${kind} v${version}`).toContain(`v${version}`);
        for (const field of Object.keys(schema.properties as object)) {
          expect(section, `${kind}.${field}`).toContain(`\`${field}\``);
        }
      }
    }
  });
});
