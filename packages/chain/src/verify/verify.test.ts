// The browser-safe entry point: it must verify on its own (through the package's subpath export)
// and must not reach for anything Node-only.

import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import {
  base64UrlDecode,
  base64UrlEncode,
  checkpointOf,
  jwsOf,
  keyId,
  parseEntryBody,
  verifyChain,
} from "@leash/chain/verify";
import { describe, expect, it } from "vitest";
import { makeChain } from "../../test/chain-fixture.js";
import { generateKeyPair } from "../keys.js";

const key = generateKeyPair();
const { entries, chainId } = makeChain(40, [key.signer], { seed: 21 });

describe("@leash/chain/verify", () => {
  it("verifies a chain with @noble alone, and finds an edit", async () => {
    const result = await verifyChain(entries, { publicKeys: [key.publicKeyHex] });
    expect(result).toEqual({ ok: true, count: 40, head_hash: entries[39]!.entry_hash, chain_id: chainId });
    expect(checkpointOf(result)).toEqual({ count: 40, head_hash: entries[39]!.entry_hash });
    const tampered = entries.slice();
    const sig = entries[7]!.signature;
    tampered[7] = {
      ...entries[7]!,
      signature: `${sig.slice(0, 10)}${sig[10] === "A" ? "B" : "A"}${sig.slice(11)}`,
    };
    expect(await verifyChain(tampered, { publicKeys: [key.publicKeyHex] })).toMatchObject({
      ok: false,
      failure: { index: 7, kind: "bad_signature" },
    });
  });

  it("computes key ids and compact JWS the way Node does", () => {
    expect(keyId(key.publicKeyRaw)).toBe(key.keyId);
    const [, payload] = jwsOf(entries[3]!).split(".");
    expect(Buffer.from(payload!, "base64url").toString("utf8")).toBe(entries[3]!.body);
  });

  it("base64url decoding accepts only the canonical spelling", () => {
    const sig = entries[0]!.signature;
    expect(base64UrlEncode(base64UrlDecode(sig)!)).toBe(sig);
    // 64 bytes end in a character carrying 2 data bits and 4 zero bits; a lenient decoder reads the
    // 15 other characters with the same 2 data bits as the same signature. All must be refused.
    const last = sig.at(-1)!;
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const sameBits = alphabet
      .split("")
      .filter((c) => c !== last && alphabet.indexOf(c) >> 4 === alphabet.indexOf(last) >> 4);
    expect(sameBits).toHaveLength(15);
    for (const c of sameBits) expect(base64UrlDecode(sig.slice(0, -1) + c)).toBeNull();
    expect(base64UrlDecode("ab=c")).toBeNull();
    expect(base64UrlDecode("a")).toBeNull();
  });

  it("parseEntryBody explains what is wrong with a body", () => {
    expect(typeof parseEntryBody(entries[0]!.body)).toBe("object");
    expect(parseEntryBody("[]")).toBe("body is not a JSON object");
    expect(parseEntryBody("{")).toBe("body is not JSON");
    const body = JSON.parse(entries[2]!.body);
    expect(parseEntryBody(JSON.stringify({ ...body, timestamp_ns: 5 }))).toBe(
      "body.timestamp_ns is not decimal",
    );
    expect(parseEntryBody(JSON.stringify({ ...body, seq: 0 }))).toMatch(/entry 0 must have/);
  });

  it("imports nothing Node-only (source scan of src/verify and what it imports)", () => {
    const dir = fileURLToPath(new URL(".", import.meta.url));
    const files = readdirSync(dir)
      .filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts"))
      .map((f) => `${dir}${f}`);
    files.push(fileURLToPath(new URL("../errors.ts", import.meta.url)));
    expect(files.length).toBeGreaterThanOrEqual(7);
    for (const file of files) {
      const source = readFileSync(file, "utf8");
      const specifiers = [...source.matchAll(/^(import|export)\b[^;]*?from\s+"([^"]+)"/gms)].map(
        (m) => m[2]!,
      );
      for (const spec of specifiers) {
        const allowed = spec.startsWith("./") || spec === "../errors.js" || spec.startsWith("@noble/");
        // @leash/core is pure by its own lint rule (no node: imports), so it runs in a browser too:
        // the error base comes from there.
        const core = spec === "@leash/core";
        expect(allowed || core, `${file} imports ${spec}`).toBe(true);
      }
      const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
      expect(code, file).not.toMatch(/\bBuffer\b|\bprocess\.|require\(|from "node:/);
    }
  });
});
