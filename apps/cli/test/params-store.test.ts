// Params stored once by digest, from the command line: `leash verify --replay` on the store and on a JSONL export
// re-derives every verdict from them; params altered in the store are found; the export replays on its own.
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { leash, scratchDir, testKey } from "./helpers.js";
import { STORE_KINDS, type TestStore, testStore } from "./stores.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());
const A = testKey(scratch.dir, "a.key");
/** Params of 5 KB: stored by digest (PARAMS_INLINE_MAX is 1024 code units). */
const BIG = JSON.stringify({ doc: "p".repeat(5000) });

describe.each(STORE_KINDS)("params stored by digest through the CLI on %s", (kind) => {
  let store: TestStore;
  beforeEach(async () => {
    store = await testStore(kind);
  });
  afterEach(async () => {
    await store.cleanup();
  });

  const L = (argv: string[]) => leash([...argv, "--store", store.url, "--key-file", A.file]);
  const verify = (...flags: string[]) =>
    leash(["verify", "--store", store.url, "--pubkey", A.pubHex, ...flags]);

  it("verify checks the stored params and --replay re-derives the verdicts from them, on the store and on its export", async () => {
    const created = await L(["session", "create", "--agent", "bot", "--max-repeat", "2"]);
    expect(created.code).toBe(0);
    const session = JSON.parse(created.stdout).session_id as string;
    for (const nonce of ["1", "2", "3"]) {
      const r = await L(["evaluate", "--session", session, "--tool", "t", "--nonce", nonce, "--params", BIG]);
      expect(r.stderr).toBe("");
    }
    const onStore = await verify("--replay");
    expect(onStore.code).toBe(0);
    expect(onStore.stdout).toMatch(
      /\nREPLAY OK: \d+ entries replayed, 3 decisions, every verdict re-derived\n$/,
    );

    const out = join(store.dir, "chain.jsonl");
    expect((await leash(["export", "--format", "jsonl", "--out", out, "--store", store.url])).code).toBe(0);
    const onFile = await leash(["verify", "--file", out, "--pubkey", A.pubHex, "--replay"]);
    expect(onFile.stdout).toBe(onStore.stdout);
    expect(onFile.code).toBe(0);

    // The stored text altered behind Leash's back: the signatures still verify, the replay does not.
    await store.exec(`UPDATE leash_params SET text = '{"doc":"forged"}'`);
    const altered = await verify();
    expect(altered.code).toBe(1);
    expect(altered.stdout).toMatch(
      /^FAILED at entry \d+ \(seq \d+\): params: the params of digest [0-9a-f]{64} do not hash to it \(altered\)\n$/,
    );
    // The export leaves them out; the file then fails the same check.
    const out2 = join(store.dir, "altered.jsonl");
    expect((await leash(["export", "--format", "jsonl", "--out", out2, "--store", store.url])).code).toBe(0);
    const file = await leash(["verify", "--file", out2, "--pubkey", A.pubHex]);
    expect(file.code).toBe(1);
    expect(file.stdout).toContain("are not stored beside the chain");
    await store.exec("DELETE FROM leash_params");
    expect((await verify()).stdout).toContain("are not stored beside the chain");
  }, 60_000);
});
