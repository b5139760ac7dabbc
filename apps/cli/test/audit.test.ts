// The signed audit chain from the command line: keygen, signing keys, receipts, verify, export, key rotation.
// Real SQLite files and PostgreSQL schemas; tampering is plain SQL on the store, behind Leash's back.
import { createPublicKey, verify as verifySignature } from "node:crypto";
import { chmodSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { keyFilePathsFor } from "@leash/chain";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { storeEntries } from "../src/chain-io.js";
import { run } from "../src/program.js";
import { openStore } from "../src/store.js";
import { type Captured, expectOneLineError, leash, scratchDir, testKey } from "./helpers.js";
import { STORE_KINDS, type TestStore, testStore } from "./stores.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());
const A = testKey(scratch.dir, "a.key");
const B = testKey(scratch.dir, "b.key");

const OK_LINE = /^OK: (\d+) entries verified, head ([0-9a-f]{64})\n$/;

const json = (r: Captured) => {
  expect(r.stderr).toBe("");
  return JSON.parse(r.stdout);
};

/** The raw Ed25519 public key (hex) as a node:crypto key, to check ledger signatures independently. */
function nodeKey(hex: string) {
  return createPublicKey({
    key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(hex, "hex").toString("base64url") },
    format: "jwk",
  });
}

describe("leash keygen", () => {
  it("writes the private key with mode 0600 and both public forms, and prints the public key and id", async () => {
    const out = join(scratch.dir, "gen.key");
    const r = await leash(["keygen", "--out", out]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const [, hex] = /public key ([0-9a-f]{64})\n/.exec(r.stdout)!;
    const [, id] = /key id ([0-9a-f]{16})\n/.exec(r.stdout)!;
    expect(statSync(out).mode & 0o777).toBe(0o600);
    // The library's naming scheme: gen.key → gen.pub.hex and gen.pub.pem.
    const paths = keyFilePathsFor(out);
    expect(paths.publicKeyHexPath).toBe(join(scratch.dir, "gen.pub.hex"));
    expect(r.stdout).toContain(paths.publicKeyHexPath);
    expect(readFileSync(paths.publicKeyHexPath, "utf8")).toBe(`${hex}\n`);
    expect(readFileSync(paths.publicKeyPath, "utf8")).toMatch(/^-----BEGIN PUBLIC KEY-----/);
    expect(readFileSync(out, "utf8")).toMatch(/^-----BEGIN PRIVATE KEY-----/);
    expect(id).toHaveLength(16);
  });

  it("refuses to overwrite without --force, and replaces the key with it", async () => {
    const out = join(scratch.dir, "keep.key");
    expect((await leash(["keygen", "--out", out])).code).toBe(0);
    const before = readFileSync(out, "utf8");
    const again = await leash(["keygen", "--out", out]);
    expect(again.code).toBe(2);
    expect(again.stdout).toBe("");
    expectOneLineError(again.stderr);
    expect(again.stderr).toContain("--force");
    expect(readFileSync(out, "utf8")).toBe(before);

    const forced = await leash(["keygen", "--out", out, "--force"]);
    expect(forced.code).toBe(0);
    expect(readFileSync(out, "utf8")).not.toBe(before);
    expect(statSync(out).mode & 0o777).toBe(0o600);
    const hex = /public key ([0-9a-f]{64})/.exec(forced.stdout)![1];
    expect(readFileSync(keyFilePathsFor(out).publicKeyHexPath, "utf8").trim()).toBe(hex);
  });
});

describe.each(STORE_KINDS)("the signed audit chain on %s", (kind) => {
  let store: TestStore;
  beforeEach(async () => {
    store = await testStore(kind);
  });
  afterEach(async () => {
    await store.cleanup();
  });

  /** `leash …` against this test's store. */
  const L = (argv: string[], stdin = "", env: Record<string, string> = {}) =>
    leash([...argv, "--store", store.url], stdin, env);
  /** The same, signing with key `key`. */
  const S = (argv: string[], key = A) => L([...argv, "--key-file", key.file]);

  const createSession = async (key = A, ...flags: string[]): Promise<string> => {
    const r = await S(["session", "create", "--agent", "bot", ...flags], key);
    expect(r.code).toBe(0);
    return json(r).session_id;
  };
  const evaluate = (session: string, nonce: string, key = A) =>
    S(["evaluate", "--session", session, "--tool", "search", "--nonce", nonce, "--estimate", "0.01"], key);
  const verify = (...flags: string[]) => L(["verify", ...flags]);

  it("a store command without a signing key exits 2 with the keygen hint and writes nothing", async () => {
    for (const argv of [
      ["session", "create", "--agent", "bot"],
      ["session", "reset", "s", "--operator", "ops"],
      ["session", "resume", "s", "--decision", "approve", "--operator", "ops"],
      ["evaluate", "--session", "s", "--tool", "t"],
      ["post-exec", "--session", "s", "--call", "1", "--actual", "0"],
      ["expire"],
      ["guard", "create", "g", "--limit", "1"],
      ["key", "rotate", "--next-key-file", B.file, "--operator", "ops"],
    ]) {
      const r = await L(argv);
      expect(r.code, argv.join(" ")).toBe(2);
      expect(r.stdout).toBe("");
      expectOneLineError(r.stderr);
      expect(r.stderr).toMatch(
        /^leash: error: no signing key: pass --key-file PATH or set LEASH_SIGNING_KEY/,
      );
      expect(r.stderr).toContain("leash keygen --out PATH");
    }
    // Not even the schema was created.
    const none = await verify("--pubkey", A.pubHex);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/no store at|holds no Leash store/);
    if (kind === "sqlite") expect(existsSync(join(store.dir, "leash.db"))).toBe(false);
  });

  it("refuses a missing key file, a key readable by others, and --key-file with --ephemeral-key", async () => {
    const missing = await L([
      "session",
      "create",
      "--agent",
      "bot",
      "--key-file",
      join(store.dir, "nope.key"),
    ]);
    expect(missing.code).toBe(2);
    expectOneLineError(missing.stderr);
    expect(missing.stderr).toContain("no key file at");
    expect(missing.stderr).toContain("leash keygen");

    const loose = join(store.dir, "loose.key");
    writeFileSync(loose, A.pem);
    chmodSync(loose, 0o644);
    const r = await L(["session", "create", "--agent", "bot", "--key-file", loose]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain(`chmod 600 ${loose}`);

    const both = await L(["session", "create", "--agent", "bot", "--key-file", A.file, "--ephemeral-key"]);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("not both");
  });

  it("--ephemeral-key signs, warns with the public key, and that key alone verifies the chain", async () => {
    const r = await L(["session", "create", "--agent", "bot", "--ephemeral-key"]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ agent_id: "bot" });
    expectOneLineError(r.stderr);
    expect(r.stderr).toMatch(/^leash: warning: --ephemeral-key: .*cannot be verified/);
    const publicKey = /([0-9a-f]{64})\n$/.exec(r.stderr)![1]!;
    const ok = await verify("--pubkey", publicKey);
    expect(ok.stdout).toMatch(OK_LINE);
    expect(ok.code).toBe(0);
    // Another throwaway key cannot extend that chain: its entries could never verify.
    const second = await L(["session", "create", "--agent", "bot", "--ephemeral-key"]);
    expect(second.code).toBe(2);
    expect(second.stderr.split("\n")[1]).toContain("is not the key the audit chain");
  });

  it("evaluate's receipt verifies with the .pub.hex file, and not with another key or one changed character", async () => {
    const s = await createSession();
    const r = await evaluate(s, "1");
    expect(r.code).toBe(0);
    const result = json(r);
    expect(result).toMatchObject({ verdict: "ALLOW", entry_seq: 1 });
    expect(result.entry_hash).toMatch(/^[0-9a-f]{64}$/);
    const receipt: string = result.receipt;
    expect(receipt.split(".")).toHaveLength(3);

    const ok = await leash(["receipt", "verify", receipt, "--pubkey", A.pubHex]);
    expect(ok.stderr).toBe("");
    expect(ok.stdout).toMatch(
      new RegExp(`^OK seq 1 ALLOW within_thresholds session ${s} call 1 key ${A.keyId} chain \\S+\\n$`),
    );
    expect(ok.code).toBe(0);

    const otherKey = await leash(["receipt", "verify", receipt, "--pubkey", B.pubHex]);
    expect(otherKey.code).toBe(1);
    expect(otherKey.stdout).toMatch(/^INVALID: kid_mismatch: /);

    const [header, payload, signature] = receipt.split(".") as [string, string, string];
    const i = 20;
    const flippedChar = signature[i] === "A" ? "B" : "A";
    const flipped = `${header}.${payload}.${signature.slice(0, i)}${flippedChar}${signature.slice(i + 1)}`;
    const bad = await leash(["receipt", "verify", flipped, "--pubkey", A.pubHex]);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/^INVALID: bad_signature: /);

    // @file and stdin; the PEM works too; --chain-id pins the chain.
    const file = join(store.dir, "receipt.jws");
    writeFileSync(file, `${receipt}\n`);
    expect((await leash(["receipt", "verify", `@${file}`, "--pubkey", A.pubPem])).code).toBe(0);
    expect((await leash(["receipt", "verify", "-", "--pubkey", A.publicKeyHex], receipt)).code).toBe(0);
    const chainId = /chain (\S+)\n$/.exec(ok.stdout)![1]!;
    expect(
      (await leash(["receipt", "verify", receipt, "--pubkey", A.pubHex, "--chain-id", chainId])).code,
    ).toBe(0);
    const elsewhere = await leash([
      "receipt",
      "verify",
      receipt,
      "--pubkey",
      A.pubHex,
      "--chain-id",
      "other",
    ]);
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stdout).toMatch(/^INVALID: chain_mismatch: /);
  });

  it("verify accepts a chain built by several commands, with either verifier, and writes a checkpoint", async () => {
    expect((await S(["guard", "create", "team", "--limit", "5"])).code).toBe(0);
    const s = await createSession(A, "--budget", "1", "--parent-guard", "team");
    expect((await evaluate(s, "1")).code).toBe(0);
    expect((await evaluate(s, "2")).code).toBe(0);
    expect((await evaluate(s, "2")).code).toBe(3);
    expect((await S(["post-exec", "--session", s, "--call", "1", "--actual", "0.005"])).code).toBe(0);
    expect((await S(["session", "reset", s, "--operator", "ops"])).code).toBe(0);
    expect((await S(["expire"])).code).toBe(0);

    const exported = await L(["export", "--format", "jsonl"]);
    const count = exported.stdout.trimEnd().split("\n").length;
    expect(count).toBeGreaterThanOrEqual(6);

    const checkpoint = join(store.dir, "checkpoint.json");
    const node = await verify("--pubkey", A.pubHex, "--write-checkpoint", checkpoint);
    expect(node.stderr).toBe("");
    expect(node.code).toBe(0);
    const [, verified, head] = OK_LINE.exec(node.stdout)!;
    expect(Number(verified)).toBe(count);
    expect(JSON.parse(readFileSync(checkpoint, "utf8"))).toEqual({ count, head_hash: head });

    const noble = await verify("--pubkey", A.pubPem, "--verifier", "noble", "--checkpoint", checkpoint);
    expect(noble.stdout).toBe(node.stdout);
    expect(noble.code).toBe(0);
    // A key that never signed this chain trusts nothing in it.
    const wrong = await verify("--pubkey", B.pubHex);
    expect(wrong.code).toBe(1);
    expect(wrong.stdout).toMatch(/^FAILED at entry 0 \(seq 0\): unknown_key: /);
  });

  it("reads the chain in pages of short transactions, in seq order", async () => {
    const s = await createSession();
    for (const n of ["1", "2", "3", "4"]) expect((await evaluate(s, n)).code).toBe(0);
    const substrate = await openStore(store.url);
    try {
      const seqs: number[] = [];
      for await (const e of storeEntries(substrate, 2)) seqs.push(e.seq);
      expect(seqs).toEqual([0, 1, 2, 3, 4]);
    } finally {
      await substrate.close();
    }
  });

  it("finds an entry edited in the store: FAILED at seq 2, edited, exit 1", async () => {
    const s = await createSession();
    for (const n of ["1", "2", "3"]) expect((await evaluate(s, n)).code).toBe(0);
    expect((await verify("--pubkey", A.pubHex)).code).toBe(0);

    await store.exec("UPDATE leash_chain SET body = replace(body, 'ALLOW', 'DENY') WHERE seq = 2");
    const r = await verify("--pubkey", A.pubHex);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(/^FAILED at entry 2 \(seq 2\): edited: .+\n$/);
    expect(r.stdout.trimEnd().split("\n")).toHaveLength(1);
  });

  it("finds a deleted last entry only against a checkpoint: truncated, exit 1", async () => {
    const s = await createSession();
    for (const n of ["1", "2"]) expect((await evaluate(s, n)).code).toBe(0);
    const checkpoint = join(store.dir, "cp.json");
    const before = await verify("--pubkey", A.pubHex, "--write-checkpoint", checkpoint);
    expect(before.stdout).toMatch(/^OK: 3 entries verified/);

    await store.exec("DELETE FROM leash_chain WHERE seq = (SELECT max(seq) FROM leash_chain)");
    // Without a checkpoint a shorter chain is all there is to see.
    expect((await verify("--pubkey", A.pubHex)).stdout).toMatch(/^OK: 2 entries verified/);
    const r = await verify("--pubkey", A.pubHex, "--checkpoint", checkpoint);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^FAILED at entry 2 \(seq 2\): truncated: the checkpoint counts 3 entries/);
  });

  it("exports JSON Lines that verify offline, to stdout or --out, and fail once edited", async () => {
    const s = await createSession();
    for (const n of ["1", "2"]) expect((await evaluate(s, n)).code).toBe(0);
    const out = join(store.dir, "chain.jsonl");
    const toFile = await L(["export", "--format", "jsonl", "--out", out]);
    expect(toFile.code).toBe(0);
    expect(toFile.stdout).toBe("");
    const toStdout = await L(["export", "--format", "jsonl"]);
    expect(toStdout.code).toBe(0);
    expect(readFileSync(out, "utf8")).toBe(toStdout.stdout);
    const lines = toStdout.stdout.trimEnd().split("\n");
    expect(lines.map((l) => JSON.parse(l).seq)).toEqual([0, 1, 2]);
    // Nanoseconds past 2^53 as exact digits: the body's own timestamp, not a rounded JSON number.
    for (const line of lines) {
      const value = JSON.parse(line);
      expect(value.created_ns).toBe(value.body.timestamp_ns);
      expect(value.created_ns).toMatch(/^\d{19}$/);
    }

    const fromStore = await verify("--pubkey", A.pubHex);
    const fromFile = await leash(["verify", "--file", out, "--pubkey", A.pubHex]);
    expect(fromFile.code).toBe(0);
    expect(fromFile.stdout).toBe(fromStore.stdout);
    expect((await leash(["verify", "--file", "-", "--pubkey", A.pubHex], toStdout.stdout)).code).toBe(0);
    // A file in the older form, created_ns a JSON number, still verifies.
    const older = lines.map((l) => l.replace(/"created_ns":"(\d+)"/, '"created_ns":$1')).join("\n");
    expect(older).not.toBe(lines.join("\n"));
    const fromOlder = await leash(["verify", "--file", "-", "--pubkey", A.pubHex], older);
    expect(fromOlder.stdout).toBe(fromStore.stdout);

    const edited = join(store.dir, "edited.jsonl");
    writeFileSync(edited, toStdout.stdout.replace(/"verdict":"ALLOW"/, '"verdict":"DENY"'));
    const r = await leash(["verify", "--file", edited, "--pubkey", A.pubHex]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^FAILED at entry 1 \(seq 1\): edited: /);

    const garbled = join(store.dir, "garbled.jsonl");
    writeFileSync(garbled, [lines[0], "{not json", lines[2]].join("\n"));
    const g = await leash(["verify", "--file", garbled, "--pubkey", A.pubHex]);
    expect(g.code).toBe(1);
    expect(g.stdout).toBe(
      `FAILED at entry 1 (seq unknown): edited: line 2 of ${garbled} is not a chain entry\n`,
    );
  });

  it("exports the SHACKLE ledger: linked records, each signed over record_hash with verify_key", async () => {
    const s = await createSession();
    for (const n of ["1", "2"]) expect((await evaluate(s, n)).code).toBe(0);
    const keyless = await L(["export", "--format", "shackle-ledger", "--pubkey", A.pubHex]);
    expect(keyless.code).toBe(2);
    expect(keyless.stderr).toContain("leash keygen");
    // The chain is verified first, so the trusted key is needed, as for `leash verify`.
    const untrusted = await S(["export", "--format", "shackle-ledger"]);
    expect(untrusted.code).toBe(2);
    expect(untrusted.stdout).toBe("");
    expectOneLineError(untrusted.stderr);
    expect(untrusted.stderr).toContain("--pubkey");

    const r = await S(["export", "--format", "shackle-ledger", "--pubkey", A.pubHex]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const records = r.stdout
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(records).toHaveLength(3);
    let prev = "0".repeat(64);
    for (const record of records) {
      for (const field of ["prev_hash", "record_hash", "signature", "verify_key"]) {
        expect(record[field], field).toEqual(expect.any(String));
      }
      expect(record.prev_hash).toBe(prev);
      expect(record.verify_key).toBe(A.publicKeyHex);
      const signed = verifySignature(
        null,
        Buffer.from(record.record_hash, "latin1"),
        nodeKey(record.verify_key),
        Buffer.from(record.signature, "hex"),
      );
      expect(signed).toBe(true);
      prev = record.record_hash;
    }
    expect(records.map((x) => x.event_type)).toEqual(["session_registered", "decision", "decision"]);

    // A body that is no entry cannot go into a signed ledger; --out is left unwritten.
    await store.exec("UPDATE leash_chain SET body = 'not json' WHERE seq = 1");
    const out = join(store.dir, "ledger.jsonl");
    const broken = await S(["export", "--format", "shackle-ledger", "--pubkey", A.pubHex, "--out", out]);
    expect(broken.code).toBe(1);
    expectOneLineError(broken.stderr);
    expect(broken.stderr).toContain("FAILED at entry 1 (seq 1): edited");
    expect(existsSync(out)).toBe(false);
  });

  it("the ledger export refuses a tampered chain and a signing key not in force; the honest export verifies", async () => {
    const s = await createSession();
    for (const n of ["1", "2", "3"]) expect((await evaluate(s, n)).code).toBe(0);
    const out = join(store.dir, "ledger.jsonl");
    const ledger = (...argv: string[]) => ["export", "--format", "shackle-ledger", "--out", out, ...argv];

    // A stranger's key over an honest chain: refused before anything is published.
    const stranger = await S(ledger("--pubkey", A.pubHex), B);
    expect(stranger.code).toBe(2);
    expect(stranger.stdout).toBe("");
    expectOneLineError(stranger.stderr);
    expect(stranger.stderr).toBe(
      `leash: error: export refused: signing key ${B.keyId} is not the chain's signing key: key ${A.keyId} is in force at its head (seq 3)\n`,
    );
    expect(existsSync(out)).toBe(false);
    const toStdout = await S(["export", "--format", "shackle-ledger", "--pubkey", A.pubHex], B);
    expect(toStdout.code).toBe(2);
    expect(toStdout.stdout).toBe("");

    // The honest case: the chain's own key, verified against the trusted key.
    const honest = await S(ledger("--pubkey", A.pubHex, "--verifier", "noble"));
    expect(honest.stderr).toBe("");
    expect(honest.code).toBe(0);
    const records = readFileSync(out, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(records).toHaveLength(4);
    for (const record of records) {
      expect(record.verify_key).toBe(A.publicKeyHex);
      const signed = verifySignature(
        null,
        Buffer.from(record.record_hash, "latin1"),
        nodeKey(record.verify_key),
        Buffer.from(record.signature, "hex"),
      );
      expect(signed).toBe(true);
    }
    const checkpoint = join(store.dir, "cp.json");
    expect((await verify("--pubkey", A.pubHex, "--write-checkpoint", checkpoint)).code).toBe(0);

    // A DENY edited into an ALLOW, exported with the forger's own key and even their own --pubkey.
    const before = readFileSync(out, "utf8");
    await store.exec("UPDATE leash_chain SET body = replace(body, 'ALLOW', 'DENY') WHERE seq = 2");
    for (const [key, pub] of [
      [A, A.pubHex],
      [B, A.pubHex],
      [B, B.pubHex],
    ] as const) {
      const forged = await S(ledger("--pubkey", pub, "--checkpoint", checkpoint), key);
      expect(forged.code).toBe(1);
      expect(forged.stdout).toBe("");
      expectOneLineError(forged.stderr);
      expect(forged.stderr).toMatch(
        /^leash: error: export refused: the chain does not verify against the trusted key \(FAILED at entry \d \(seq \d\): (edited|unknown_key): .+\); run `leash verify`\n$/,
      );
      expect(forged.stderr).toContain(pub === A.pubHex ? "FAILED at entry 2 (seq 2): edited" : "unknown_key");
      // The earlier export is untouched; no temporary file is left behind.
      expect(readFileSync(out, "utf8")).toBe(before);
    }
    expect(readdirSync(store.dir).filter((f) => f.includes(".tmp-"))).toEqual([]);
  });

  it("key rotate hands over to the next key; the chain still verifies with only the old public key", async () => {
    const s = await createSession(A);
    expect((await evaluate(s, "1", A)).code).toBe(0);

    const same = await L([
      "key",
      "rotate",
      "--key-file",
      A.file,
      "--next-key-file",
      A.file,
      "--operator",
      "ops",
    ]);
    expect(same.code).toBe(2);
    expect(same.stderr).toContain("holds the key in use");
    const wrongCurrent = await L([
      "key",
      "rotate",
      "--key-file",
      B.file,
      "--next-key-file",
      A.file,
      "--operator",
      "ops",
    ]);
    expect(wrongCurrent.code).toBe(2);
    expect(wrongCurrent.stderr).toContain(`is not the key the audit chain in ${store.url} is signed with`);

    const rotated = await L([
      "key",
      "rotate",
      "--key-file",
      A.file,
      "--next-key-file",
      B.file,
      "--operator",
      "ops",
    ]);
    expect(json(rotated)).toEqual({
      rotated: true,
      previous_key_id: A.keyId,
      key_id: B.keyId,
      public_key: B.publicKeyHex,
      operator_id: "ops",
    });
    expect(rotated.code).toBe(0);

    // The old key no longer signs; the new one does, and its receipts verify with its public key.
    const old = await evaluate(s, "2", A);
    expect(old.code).toBe(2);
    expectOneLineError(old.stderr);
    expect(old.stderr).toContain(`key id ${B.keyId}`);
    const next = await evaluate(s, "2", B);
    expect(next.code, next.stdout + next.stderr).toBe(0);
    const receipt = json(next).receipt;
    expect((await leash(["receipt", "verify", receipt, "--pubkey", B.pubHex])).code).toBe(0);
    const both = await leash(["receipt", "verify", receipt, "--pubkey", A.pubHex, "--pubkey", B.pubHex]);
    expect(both.stdout).toMatch(/^OK seq 3 ALLOW /);

    const r = await verify("--pubkey", A.pubHex);
    expect(r.stdout).toMatch(/^OK: 4 entries verified/);
    expect(r.code).toBe(0);
    const newOnly = await verify("--pubkey", B.pubHex);
    expect(newOnly.code).toBe(1);
    expect(newOnly.stdout).toMatch(/^FAILED at entry 0 \(seq 0\): unknown_key/);

    // The ledger is signed by the key in force at the head, which is the new one; the old one is refused.
    const retired = await S(["export", "--format", "shackle-ledger", "--pubkey", A.pubHex], A);
    expect(retired.code).toBe(2);
    expect(retired.stderr).toContain(`key ${B.keyId} is in force at its head (seq 3)`);
    const current = await S(["export", "--format", "shackle-ledger", "--pubkey", A.pubHex], B);
    expect(current.code).toBe(0);
    expect(
      current.stdout
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l).verify_key),
    ).toEqual(Array(4).fill(B.publicKeyHex));
  });
});

describe("leash verify input", () => {
  it.each([
    [["verify", "--store", "memory:"], "--pubkey"],
    [["verify", "--store", "memory:", "--pubkey", "abcd"], "--pubkey"],
    [["verify", "--store", "memory:", "--pubkey", A.file], "private key"],
    [["verify", "--store", "memory:", "--file", "x.jsonl", "--pubkey", A.pubHex], "not both"],
    [["verify", "--file", "/nonexistent/chain.jsonl", "--pubkey", A.pubHex], "no such file"],
    [
      ["verify", "--store", "memory:", "--pubkey", A.pubHex, "--verifier", "rust"],
      "Allowed choices are node, noble",
    ],
    [["receipt", "verify", "x.y.z"], "--pubkey"],
    [["receipt", "verify", "@/nonexistent/receipt", "--pubkey", A.pubHex], "no such file"],
    [["export", "--store", "memory:"], "--format"],
  ])("%j exits 2 in one line", async (argv, message) => {
    const r = await leash(argv);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain(message);
  });

  it("refuses a bad checkpoint file and a store that does not exist, creating nothing", async () => {
    const cp = scratch.write("bad-cp.json", JSON.stringify({ count: -1, head_hash: "x" }));
    const bad = await leash(["verify", "--store", "memory:", "--pubkey", A.pubHex, "--checkpoint", cp]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("not a checkpoint");
    const path = join(scratch.dir, "absent.db");
    const absent = await leash(["verify", "--store", `sqlite:${path}`, "--pubkey", A.pubHex]);
    expect(absent.code).toBe(2);
    expect(absent.stderr).toContain("no store at");
    expect(existsSync(path)).toBe(false);
  });

  it("draws a progress bar on a terminal's stderr and clears it", async () => {
    const db = join(scratch.dir, "progress.db");
    const created = await leash([
      "session",
      "create",
      "--agent",
      "bot",
      "--store",
      `sqlite:${db}`,
      "--key-file",
      A.file,
    ]);
    expect(created.code).toBe(0);
    let stdout = "";
    let stderr = "";
    const code = await run(["verify", "--store", `sqlite:${db}`, "--pubkey", A.pubHex], {
      stdout: (t) => {
        stdout += t;
      },
      stderr: (t) => {
        stderr += t;
      },
      readStdin: async () => "",
      stderrIsTTY: true,
      stdinIsTTY: false,
      env: {},
    });
    expect(code).toBe(0);
    expect(stdout).toMatch(/^OK: 1 entries verified/);
    expect(stderr).toContain("leash verify: [##############################] 1/1 (100 %)");
    expect(stderr.endsWith("\r\x1b[K")).toBe(true);
  });
});
