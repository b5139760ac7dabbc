// `leash recover` against real SQLite files and PostgreSQL schemas: a clean store, a tampered chain, a lost
// outbox row, checkpoints and keys. Tampering is plain SQL on the store, behind Leash's back.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { type Captured, expectOneLineError, leash, scratchDir, testKey } from "./helpers.js";
import { STORE_KINDS, type TestStore, testStore } from "./stores.js";

const keys = scratchDir();
afterAll(() => keys.cleanup());
const A = testKey(keys.dir, "a.key");
const B = testKey(keys.dir, "b.key");

describe.each(STORE_KINDS)("leash recover on %s", (kind) => {
  let store: TestStore;
  beforeEach(async () => {
    store = await testStore(kind);
  });
  afterEach(async () => {
    await store.cleanup();
  });

  /** `leash …` against this test's store; no key unless the arguments give one. */
  const L = (argv: string[], env: Record<string, string> = {}) =>
    leash([...argv, "--store", store.url], "", env);
  const recoverCmd = (...flags: string[]) => L(["recover", "--pubkey", A.pubHex, ...flags]);

  /** A session and `calls` evaluations, signed with A: 1 + calls chain entries. */
  const fill = async (calls = 3, ...sessionFlags: string[]): Promise<string> => {
    const created = await L(["session", "create", "--agent", "bot", "--key-file", A.file, ...sessionFlags]);
    expect(created.code).toBe(0);
    const session = JSON.parse(created.stdout).session_id;
    for (let n = 1; n <= calls; n++) {
      const r = await L([
        "evaluate",
        "--session",
        session,
        "--tool",
        "search",
        "--nonce",
        String(n),
        "--key-file",
        A.file,
      ]);
      expect(r.code).toBe(0);
    }
    return session;
  };
  const exportedIds = async () =>
    (await L(["export", "--format", "jsonl"])).stdout
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l).entry_id as string);
  const fileIds = (path: string) =>
    readFileSync(path, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l).entry_id as string);

  const expectFailed = (r: Captured, status: number) => {
    expect(r.code).toBe(status);
    expectOneLineError(r.stderr);
  };

  it("a clean store: the report says OK and counts the chain and the outbox, exit 0", async () => {
    await fill(3);
    const r = await recoverCmd();
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^recovery OK in \d+ ms$/);
    expect(r.stdout).toMatch(/\n {2}chain: 4 entries verified, head [0-9a-f]{64}\n/);
    expect(r.stdout).toContain("outbox: 4 pending, 0 delivered, 0 dead");
    // Recovery without a key changes nothing: the chain is as it was.
    expect((await L(["verify", "--pubkey", A.pubHex])).stdout).toMatch(/^OK: 4 entries verified/);
  });

  it("an edited chain row: exit 1, one line naming the seq and the `leash verify` to inspect it with", async () => {
    await fill(3);
    await store.exec("UPDATE leash_chain SET body = replace(body, 'ALLOW', 'DENY') WHERE seq = 2");
    const r = await recoverCmd("--repair");
    expectFailed(r, 1);
    expect(r.stderr).toMatch(
      /^leash: error: the audit chain fails verification at entry 2 \(seq 2\): edited: .+; inspect with `leash verify --store .+ --pubkey [0-9a-f]{64} --checkpoint \S+`\n$/,
    );
    expect(r.stdout).toMatch(/^recovery FAILED in \d+ ms: do not serve from this store\n/);
    expect(r.stdout).toContain("ERROR chain_unverifiable");
    // Nothing was written on top of the damaged chain, not even with --repair and a key.
    const withKey = await recoverCmd("--repair", "--key-file", A.file);
    expect(withKey.code).toBe(1);
    expect(withKey.stdout).not.toContain("done:");
  });

  it("--repair re-enqueues a chain entry whose outbox row was deleted, and the relay then ships it", async () => {
    await fill(3);
    await store.exec("DELETE FROM leash_outbox WHERE seq = 1");
    const out = join(store.dir, "audit.ndjson");
    expect((await L(["relay", "--sink", `file:${out}`, "--once"])).code).toBe(0);
    const ids = await exportedIds();
    expect(fileIds(out)).toEqual(ids.filter((_, seq) => seq !== 1));

    const found = await recoverCmd();
    expectFailed(found, 1);
    expect(found.stderr).toBe(
      "leash: error: 1 chain entry is missing from the outbox and would never be relayed (first seq 1): run `leash recover --repair` to queue them again\n",
    );
    expect(found.stdout).toMatch(/^recovery OK/);

    const repaired = await recoverCmd("--repair");
    expect(repaired.stderr).toBe("");
    expect(repaired.code).toBe(0);
    expect(repaired.stdout).toContain("done: re-enqueued 1 chain entries missing from the outbox");
    expect((await recoverCmd()).code).toBe(0);

    const shipped = await L(["relay", "--sink", `file:${out}`, "--once"]);
    expect(shipped.stderr).toBe("leash relay: delivered 1, failed 0, dead 0, pending 0\n");
    expect([...fileIds(out)].sort()).toEqual([...ids].sort());
  });

  it("--repair --requeue-dead moves DEAD outbox items back to PENDING, and the relay then ships them", async () => {
    await fill(2);
    const ids = await exportedIds();
    // What a relay leaves after a sink refused every entry for good.
    await store.exec(
      "UPDATE leash_outbox SET status = 'DEAD', attempts = 20, claimed_by = 'old-relay', last_error = 'HTTP 401 Unauthorized: bad signature'",
    );
    const found = await recoverCmd();
    expect(found.code).toBe(0);
    expect(found.stdout).toContain("outbox: 0 pending, 0 delivered, 3 dead");
    expect(found.stdout).toContain(
      "warning outbox_dead: 3 outbox item(s) are DEAD and will not be relayed (first seq 0: HTTP 401 Unauthorized: bad signature); once the sink is fixed, requeue them with repair and requeueDead",
    );

    // Requeueing is a repair; alone the flag is refused before the store is touched.
    const alone = await recoverCmd("--requeue-dead");
    expectFailed(alone, 2);
    expect(alone.stderr).toBe("leash: error: --requeue-dead is a repair: give --repair too\n");
    expect(alone.stdout).toBe("");

    const requeued = await recoverCmd("--repair", "--requeue-dead");
    expect(requeued.stderr).toBe("");
    expect(requeued.code).toBe(0);
    expect(requeued.stdout).toContain(
      "done: requeued 3 DEAD outbox items for the relay (attempts reset, last_error kept)",
    );
    expect(requeued.stdout).not.toContain("outbox_dead");
    const after = await recoverCmd();
    expect(after.stdout).toContain("outbox: 3 pending, 0 delivered, 0 dead");

    const out = join(store.dir, "audit.ndjson");
    const shipped = await L(["relay", "--sink", `file:${out}`, "--once"]);
    expect(shipped.stderr).toBe("leash relay: delivered 3, failed 0, dead 0, pending 0\n");
    expect(shipped.code).toBe(0);
    expect(fileIds(out)).toEqual(ids);
    const again = await recoverCmd("--repair", "--requeue-dead");
    expect(again.code).toBe(0);
    expect(again.stdout).not.toContain("done:");
  });

  it("--checkpoint is written once the store passes, and then catches a deleted tail", async () => {
    await fill(2);
    const checkpoint = join(store.dir, "checkpoint.json");
    const first = await recoverCmd("--checkpoint", checkpoint);
    expect(first.code).toBe(0);
    expect(first.stdout).toContain(`checkpoint ${checkpoint}: was none, now 3 entries`);
    const written = JSON.parse(readFileSync(checkpoint, "utf8"));
    expect(written).toEqual({ count: 3, head_hash: expect.stringMatching(/^[0-9a-f]{64}$/) });
    // The same file `leash verify --checkpoint` reads.
    expect((await L(["verify", "--pubkey", A.pubHex, "--checkpoint", checkpoint])).code).toBe(0);

    await store.exec("DELETE FROM leash_chain WHERE seq = (SELECT max(seq) FROM leash_chain)");
    const r = await recoverCmd("--checkpoint", checkpoint);
    expectFailed(r, 1);
    // A deleted tail looks like a restored older copy: behind the checkpoint, both heads named.
    expect(r.stderr).toContain(
      "the store's chain is behind the last head checkpointed outside it: the store has no entry 2 (its head is entry",
    );
    expect(r.stderr).toContain(`the checkpoint's head (${checkpoint}) is entry 2 (${written.head_hash})`);
    expect(r.stdout).toContain("ERROR chain_rolled_back");
    expect(r.stderr).toContain(`--checkpoint ${checkpoint}\``);
    // A failed store never moves the checkpoint.
    expect(JSON.parse(readFileSync(checkpoint, "utf8"))).toEqual(written);
  });

  it("with the chain's key it charges budget holds past their TTL at their estimate, with a signed entry each", async () => {
    const config = join(store.dir, "short-ttl.json");
    writeFileSync(config, JSON.stringify({ reservation_ttl_s: 0.001 }));
    const s = await fill(0, "--budget", "1");
    const held = await L([
      "evaluate",
      ...["--session", s, "--tool", "t", "--nonce", "1", "--estimate", "0.5"],
      ...["--config", config, "--key-file", A.file],
    ]);
    expect(held.code).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 20));

    const counted = await recoverCmd();
    expect(counted.code).toBe(0);
    expect(counted.stdout).toContain("reservations: 1 past their TTL, 0 charged at their estimate");
    const released = await recoverCmd("--key-file", A.file);
    expect(released.stderr).toBe("");
    expect(released.code).toBe(0);
    expect(released.stdout).toContain("reservations: 1 past their TTL, 1 charged at their estimate");
    const session = await L(["session", "show", s]);
    // The ALLOWed call may have run: its estimate stays spent.
    expect(JSON.parse(session.stdout).budget_remaining_usd).toBe("0.5");
    expect((await L(["verify", "--pubkey", A.pubHex])).stdout).toMatch(/^OK: 3 entries verified/);
  });

  it("a hand-edited reserved_usd: exit 1 naming it; --repair with the key rebuilds it from the chain", async () => {
    const s = await fill(0, "--budget", "1");
    for (const n of ["1", "2"]) {
      const r = await L([
        "evaluate",
        ...["--session", s, "--tool", "t", "--nonce", n, "--estimate", "0.25", "--key-file", A.file],
      ]);
      expect(r.code).toBe(0);
    }
    await store.exec(`UPDATE leash_budget_accounts SET reserved_usd = '0' WHERE account_id = 'session:${s}'`);
    const refused = await recoverCmd();
    expectFailed(refused, 1);
    expect(refused.stderr).toContain("the state tables disagree with the replayed chain");
    expect(refused.stdout).toContain(`budget_accounts session:${s} reserved_usd: store "0", chain "0.5"`);
    const repaired = await recoverCmd("--repair", "--key-file", A.file);
    expect(repaired.stderr).toBe("");
    expect(repaired.code).toBe(0);
    // The edit shows twice, as the field and as the row's digest (which its entry signed): both rewritten.
    expect(repaired.stdout).toContain("rewrote 2 snapshot value(s) from the replayed chain");
    expect(JSON.parse((await L(["session", "show", s])).stdout).budget_remaining_usd).toBe("0.5");
    const verified = await L(["verify", "--replay", "--pubkey", A.pubHex]);
    expect(verified.code).toBe(0);
    expect(verified.stdout).toMatch(
      /^OK: 4 entries verified.*\nREPLAY OK: 4 entries replayed, 2 decisions, every verdict re-derived\n$/s,
    );
  });

  it("refuses a signing key that is not the chain's key in force: exit 2, nothing written", async () => {
    await fill(1);
    const r = await recoverCmd("--key-file", B.file);
    expectFailed(r, 2);
    expect(r.stderr).toContain(`the signing key ${B.keyId} is not the key in force`);
    expect(r.stdout).toMatch(/^recovery FAILED/);
    expect((await L(["verify", "--pubkey", A.pubHex])).stdout).toMatch(/^OK: 2 entries verified/);
  });
});

describe("leash recover input", () => {
  const scratch = scratchDir();
  afterAll(() => scratch.cleanup());
  const garbage = scratch.write("garbage.json", "{not a checkpoint");

  it.each([
    [["recover", "--store", "memory:"], "--pubkey"],
    [["recover", "--store", "memory:", "--pubkey", "abcd"], "--pubkey"],
    [["recover", "--store", `sqlite:${join(scratch.dir, "none.db")}`, "--pubkey", A.pubHex], "no store at"],
    [
      ["recover", "--store", "memory:", "--pubkey", A.pubHex, "--checkpoint", "/nonexistent-dir/cp.json"],
      "no such directory /nonexistent-dir",
    ],
    [
      ["recover", "--store", "memory:", "--pubkey", A.pubHex, "--checkpoint", garbage],
      "is damaged (not JSON)",
    ],
    [
      ["recover", "--store", "memory:", "--pubkey", A.pubHex, "--key-file", A.file, "--ephemeral-key"],
      "not both",
    ],
  ])("%j exits 2 in one line", async (argv, message) => {
    const r = await leash(argv);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain(message);
  });

  it("documents what it checks and the exit statuses in --help", async () => {
    const r = await leash(["recover", "--help"]);
    expect(r.code).toBe(0);
    for (const text of ["--repair", "--requeue-dead", "--checkpoint", "leash verify", "Exit status"]) {
      expect(r.stdout).toContain(text);
    }
  });
});
