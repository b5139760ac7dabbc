// Key generation, key files (modes, overwrite refusal), loading signers from files and the
// environment, loading public keys, and the error codes of each failure. Uses a temporary directory.

import { execFileSync } from "node:child_process";
import { createHash, createPrivateKey, generateKeyPairSync, sign, verify } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { ChainError, KeyFileError } from "./errors.js";
import { createSigner, generateKeyPair, loadPublicKey, loadSigningKey, writeKeyFiles } from "./keys.js";
import { keyId } from "./verify/keys.js";

const dir = mkdtempSync(join(tmpdir(), "leash-chain-keys-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error("expected a throw");
}

describe("generateKeyPair", () => {
  it("derives the key id as the first 16 hex of SHA-256 of the raw public key", () => {
    const pair = generateKeyPair();
    const expected = createHash("sha256").update(pair.publicKeyRaw).digest("hex").slice(0, 16);
    expect(pair.keyId).toBe(expected);
    expect(keyId(pair.publicKeyRaw)).toBe(expected);
    expect(pair.publicKeyHex).toBe(Buffer.from(pair.publicKeyRaw).toString("hex"));
    expect(pair.publicKeyHex).toMatch(/^[0-9a-f]{64}$/);
  });

  it("signs so that the SPKI public key verifies, and a different message does not", () => {
    const pair = generateKeyPair();
    const message = new TextEncoder().encode("leash");
    const signature = pair.signer.sign(message);
    expect(signature).toHaveLength(64);
    expect(verify(null, message, pair.publicKeyPem, signature)).toBe(true);
    expect(verify(null, new TextEncoder().encode("leask"), pair.publicKeyPem, signature)).toBe(false);
  });

  it("gives a different key every time", () => {
    expect(generateKeyPair().publicKeyHex).not.toBe(generateKeyPair().publicKeyHex);
  });
});

describe("writeKeyFiles", () => {
  it("writes the private key with mode 0600 and the public key as PEM and hex", () => {
    const pair = generateKeyPair();
    const paths = writeKeyFiles(pair, join(dir, "a.key"));
    expect(paths).toEqual({
      privateKeyPath: join(dir, "a.key"),
      publicKeyPath: join(dir, "a.pub.pem"),
      publicKeyHexPath: join(dir, "a.pub.hex"),
    });
    expect(statSync(paths.privateKeyPath).mode & 0o777).toBe(0o600);
    expect(readFileSync(paths.privateKeyPath, "utf8")).toContain("BEGIN PRIVATE KEY");
    expect(readFileSync(paths.publicKeyPath, "utf8")).toContain("BEGIN PUBLIC KEY");
    expect(readFileSync(paths.publicKeyHexPath, "utf8").trim()).toBe(pair.publicKeyHex);
    expect(loadSigningKey({ file: paths.privateKeyPath }).keyId).toBe(pair.keyId);
  });

  it("refuses to overwrite without being asked, and leaves the old files intact", () => {
    const first = generateKeyPair();
    const path = join(dir, "b.key");
    writeKeyFiles(first, path);
    const error = thrown(() => writeKeyFiles(generateKeyPair(), path));
    expect(KeyFileError.isInstance(error) && error.code).toBe("key_exists");
    expect(loadSigningKey({ file: path }).keyId).toBe(first.keyId);
    expect(readFileSync(join(dir, "b.pub.hex"), "utf8").trim()).toBe(first.publicKeyHex);
  });

  it("overwrites when asked, and the replacement is 0600 even if the old file was 0644", () => {
    const path = join(dir, "c.key");
    writeKeyFiles(generateKeyPair(), path);
    chmodSync(path, 0o644);
    const second = generateKeyPair();
    writeKeyFiles(second, path, { overwrite: true });
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(loadSigningKey({ file: path }).keyId).toBe(second.keyId);
    expect(loadPublicKey(join(dir, "c.pub.pem")).keyId).toBe(second.keyId);
  });
});

describe("loadSigningKey", () => {
  it("refuses a key file that group or others can read, saying chmod 600", () => {
    const path = join(dir, "loose.key");
    writeKeyFiles(generateKeyPair(), path);
    chmodSync(path, 0o640);
    const error = thrown(() => loadSigningKey({ file: path }));
    expect(KeyFileError.isInstance(error)).toBe(true);
    expect((error as KeyFileError).code).toBe("key_permissions");
    expect((error as KeyFileError).path).toBe(path);
    expect((error as Error).message).toContain("chmod 600");
    expect((error as Error).message).toContain("0640");
  });

  it("names a missing file, an unreadable one, a public key and garbage with distinct codes", () => {
    const missing = thrown(() => loadSigningKey({ file: join(dir, "nope.key") }));
    expect((missing as ChainError).code).toBe("key_not_found");

    const sub = join(dir, "a-directory");
    mkdirSync(sub, { mode: 0o700 });
    expect((thrown(() => loadSigningKey({ file: sub })) as ChainError).code).toBe("key_unreadable");

    const pub = join(dir, "pub-as-private.key");
    writeFileSync(pub, generateKeyPair().publicKeyPem, { mode: 0o600 });
    expect((thrown(() => loadSigningKey({ file: pub })) as ChainError).code).toBe("key_wrong_type");

    const junk = join(dir, "junk.key");
    writeFileSync(junk, "this is not a key", { mode: 0o600 });
    expect((thrown(() => loadSigningKey({ file: junk })) as ChainError).code).toBe("key_invalid");
  });

  it("reads LEASH_SIGNING_KEY as PEM or as base64 of the PKCS#8 DER", () => {
    const pair = generateKeyPair();
    expect(loadSigningKey({ env: { LEASH_SIGNING_KEY: pair.privateKeyPem } }).keyId).toBe(pair.keyId);
    const der = pair.privateKeyPem.replace(/-----(BEGIN|END) PRIVATE KEY-----/g, "").replace(/\s+/g, "");
    expect(loadSigningKey({ env: { LEASH_SIGNING_KEY: der } }).keyId).toBe(pair.keyId);
  });

  it("prefers the file over the environment", () => {
    const fromFile = generateKeyPair();
    const path = join(dir, "pref.key");
    writeKeyFiles(fromFile, path);
    const signer = loadSigningKey({
      file: path,
      env: { LEASH_SIGNING_KEY: generateKeyPair().privateKeyPem },
    });
    expect(signer.keyId).toBe(fromFile.keyId);
  });

  it("fails clearly with no key, a non-Ed25519 key, or bad base64, keeping the cause", () => {
    const none = thrown(() => loadSigningKey({ env: {} }));
    expect(ChainError.isInstance(none) && none.code).toBe("key_not_found");
    expect((none as Error).message).toContain("LEASH_SIGNING_KEY");

    const ec = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({
      format: "pem",
      type: "pkcs8",
    });
    const wrong = thrown(() => loadSigningKey({ env: { LEASH_SIGNING_KEY: ec.toString() } }));
    expect((wrong as ChainError).code).toBe("key_wrong_type");

    const bad = thrown(() => loadSigningKey({ env: { LEASH_SIGNING_KEY: "AAAA" } }));
    expect((bad as ChainError).code).toBe("key_invalid");
    expect((bad as Error).cause).toBeInstanceOf(Error);
  });

  it("createSigner refuses a public KeyObject", () => {
    const { publicKey } = generateKeyPairSync("ed25519");
    expect((thrown(() => createSigner(publicKey)) as ChainError).code).toBe("key_wrong_type");
  });
});

describe("loadPublicKey", () => {
  const pair = generateKeyPair();
  const paths = writeKeyFiles(pair, join(dir, "pk.key"));

  it("accepts hex (either case), PEM text, raw bytes, and files holding PEM or hex", () => {
    for (const source of [
      pair.publicKeyHex,
      pair.publicKeyHex.toUpperCase(),
      pair.publicKeyPem,
      pair.publicKeyRaw,
      paths.publicKeyPath,
      paths.publicKeyHexPath,
    ]) {
      const info = loadPublicKey(source);
      expect(info.keyId).toBe(pair.keyId);
      expect(info.publicKeyHex).toBe(pair.publicKeyHex);
    }
  });

  it("refuses a private key, a missing path, a file of junk and a short key", () => {
    expect((thrown(() => loadPublicKey(pair.privateKeyPem)) as ChainError).code).toBe("key_wrong_type");
    expect((thrown(() => loadPublicKey(join(dir, "absent.pub"))) as ChainError).code).toBe("key_not_found");
    const junk = join(dir, "junk.pub");
    writeFileSync(junk, "hello");
    expect((thrown(() => loadPublicKey(junk)) as ChainError).code).toBe("key_invalid");
    expect((thrown(() => loadPublicKey(new Uint8Array(31))) as ChainError).code).toBe("key_invalid");
  });
});

describe("errors", () => {
  it("are recognised by marker, keep their code, and KeyFileError is a ChainError", () => {
    const error = new KeyFileError("key_permissions", "/k", "m", { cause: 1 });
    expect(ChainError.isInstance(error)).toBe(true);
    expect(KeyFileError.isInstance(error)).toBe(true);
    expect(KeyFileError.isInstance(new ChainError("key_invalid", "m"))).toBe(false);
    expect(ChainError.isInstance(new Error("x"))).toBe(false);
    expect(error.cause).toBe(1);
    expect(error.name).toBe("KeyFileError");
  });
});

describe("the signer's implementation", () => {
  // Where sodium-native's prebuilt addon loads (linux-x64 here), createSigner signs with libsodium.
  const sodiumLoads = (() => {
    try {
      createRequire(import.meta.url)("sodium-native");
      return true;
    } catch {
      return false;
    }
  })();

  it("is libsodium where sodium-native loads, and its signatures are node:crypto's, byte for byte", () => {
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    const signer = createSigner(privateKey);
    expect(signer.implementation).toBe(sodiumLoads ? "libsodium" : "node:crypto");
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 4096, size: "max" }), (message) => {
        const ours = signer.sign(message);
        const theirs = sign(null, message, privateKey);
        expect(Buffer.from(ours).equals(theirs)).toBe(true);
        expect(verify(null, message, publicKey, ours)).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it("signs alike for many keys, from a KeyObject or its PEM", () => {
    for (let i = 0; i < 50; i++) {
      const pair = generateKeyPair();
      const message = createHash("sha512").update(String(i)).digest();
      const fromPem = createSigner(pair.privateKeyPem);
      const expected = sign(null, message, createPrivateKey(pair.privateKeyPem));
      expect(Buffer.from(pair.signer.sign(message)).equals(expected)).toBe(true);
      expect(Buffer.from(fromPem.sign(message)).equals(expected)).toBe(true);
    }
  });

  it("is node:crypto with LEASH_SIGNER=node, with the same signatures", () => {
    const pair = generateKeyPair();
    const script = `
      const { createSigner } = await import(${JSON.stringify(new URL("../dist/keys.js", import.meta.url).href)});
      const signer = createSigner(process.env.KEY_PEM);
      process.stdout.write(JSON.stringify([signer.implementation, Buffer.from(signer.sign(Buffer.from("m"))).toString("hex")]));
    `;
    const run = (env: Record<string, string>) =>
      JSON.parse(
        execFileSync(process.execPath, ["--input-type=module", "-e", script], {
          env: { ...process.env, KEY_PEM: pair.privateKeyPem, ...env },
          encoding: "utf8",
        }),
      ) as [string, string];
    const expected = Buffer.from(pair.signer.sign(Buffer.from("m"))).toString("hex");
    expect(run({ LEASH_SIGNER: "node" })).toEqual(["node:crypto", expected]);
    expect(run({ LEASH_SIGNER: "" })).toEqual([sodiumLoads ? "libsodium" : "node:crypto", expected]);
  });
});
