// `leash serve` refuses a store restored from an older copy (its state directory holds the last head it
// signed), naming both heads, and serves it again once `leash recover --accept-rollback` has recorded the
// restore in a signed entry. Real SQLite files (copied) and PostgreSQL schemas (pg_dump, psql).
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { leashCli, serve } from "@leash/test-stores";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { leash, scratchDir, testKey } from "./helpers.js";
import { PG_URL, STORE_KINDS, type TestStore, testStore } from "./stores.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());
const A = testKey(scratch.dir, "a.key");
const hmac = scratch.write("acme.hmac", randomBytes(32).toString("hex"));
const config = scratch.write(
  "daemon.json",
  JSON.stringify({ organizations: { acme: { hmac_keys: { k1: { file: hmac } } } } }),
);

describe.each(STORE_KINDS)("a restored older copy of a %s store", (kind) => {
  let store: TestStore;
  let stateDir: string;
  beforeEach(async () => {
    store = await testStore(kind);
    stateDir = join(store.dir, "state");
  });
  afterEach(async () => {
    await store.cleanup();
  });

  const L = (argv: string[]) => leash([...argv, "--store", store.url, "--key-file", A.file]);
  const serveArgs = () => [
    "--config",
    config,
    "--store",
    store.url,
    "--key-file",
    A.file,
    "--socket",
    join(store.dir, "leash.sock"),
    "--state-dir",
    stateDir,
  ];
  const evaluate = async (session: string, nonce: number) =>
    expect((await L(["evaluate", "--session", session, "--tool", "t", "--nonce", String(nonce)])).code).toBe(
      0,
    );
  const head = async () => {
    const exported = await leash(["export", "--format", "jsonl", "--store", store.url]);
    const lines = exported.stdout.trimEnd().split("\n");
    const last = JSON.parse(lines[lines.length - 1]!) as { seq: number; entry_hash: string; kind: string };
    return last;
  };

  /** Copies the store's data; the returned function puts the copy back. */
  const backup = (): (() => void) => {
    if (kind === "sqlite") {
      const path = store.url.slice("sqlite:".length);
      copyFileSync(path, `${path}.backup`);
      return () => {
        for (const suffix of ["-wal", "-shm"]) rmSync(`${path}${suffix}`, { force: true });
        copyFileSync(`${path}.backup`, path);
      };
    }
    const schema = new URL(store.url).searchParams.get("schema")!;
    const dump = join(store.dir, "schema.sql");
    execFileSync("pg_dump", ["--dbname", PG_URL, "--schema", schema, "--file", dump]);
    return () => {
      const psql = (...args: string[]) =>
        execFileSync("psql", ["--dbname", PG_URL, "-q", "-v", "ON_ERROR_STOP=1", ...args]);
      psql("-c", `DROP SCHEMA "${schema}" CASCADE`);
      psql("--file", dump);
    };
  };

  it("serve refuses it naming both heads (exit 1); recover --accept-rollback records it, then serve starts", async () => {
    const created = await L(["session", "create", "--agent", "bot"]);
    const session = JSON.parse(created.stdout).session_id as string;
    await evaluate(session, 1);
    const restore = backup();
    const backedUp = await head();
    await evaluate(session, 2);
    await evaluate(session, 3);
    // The daemon checkpoints the head it finds (and signs) in its state directory.
    const first = await serve(serveArgs());
    await first.stop();
    const signed = await head();

    restore();
    const refused = await leashCli(["serve", ...serveArgs()]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      `the store's chain is behind the last head checkpointed outside it: the store has no entry ${signed.seq} (its head is entry ${backedUp.seq} (${backedUp.entry_hash})), the checkpoint's head (${stateDir}/checkpoint-`,
    );
    expect(refused.stderr).toContain(`is entry ${signed.seq} (${signed.entry_hash})`);

    // verify and recover read the same checkpoint: refused until the restore is accepted.
    const verify = () =>
      leash(["verify", "--store", store.url, "--pubkey", A.pubHex, "--state-dir", stateDir]);
    const failed = await verify();
    expect(failed.code).toBe(1);
    expect(failed.stdout).toContain(
      `FAILED at entry ${signed.seq} (seq ${signed.seq}): truncated: the store's chain is behind the last head checkpointed outside it`,
    );
    const recover = (...flags: string[]) =>
      leash(["recover", "--store", store.url, "--pubkey", A.pubHex, "--state-dir", stateDir, ...flags]);
    const plain = await recover();
    expect(plain.code).toBe(1);
    expect(plain.stdout).toContain("ERROR chain_rolled_back");
    expect((await recover("--accept-rollback")).stderr).toContain(
      "--accept-rollback records a signed entry: give the signing key",
    );
    const accepted = await recover("--accept-rollback", "--key-file", A.file, "--operator", "ops");
    expect(accepted.code).toBe(0);
    expect(accepted.stdout).toContain(
      `rollback: the store (head entry ${backedUp.seq}) is behind the checkpoint (entry ${signed.seq} ${signed.entry_hash}): accepted (rollback_accepted entry ${backedUp.seq + 1})`,
    );
    expect(await head()).toMatchObject({ seq: backedUp.seq + 1, kind: "rollback_accepted" });
    expect((await verify()).stdout).toMatch(/^OK: /);

    const again = await serve(serveArgs());
    await again.stop();
  }, 120_000);
});
