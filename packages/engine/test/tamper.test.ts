// A tampered store is refused, not extended: real SQLite files and PostgreSQL schemas edited behind the
// engine's back (the memory store through its port), then opened. Every evaluate must fail closed.
import {
  buildEntry,
  type ChainFailureKind,
  type Checkpoint,
  generateKeyPair,
  verifyChain,
} from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { sqlInSchema } from "@leash/test-stores";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { type CheckpointStore, createEngine, type Engine } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();
const FORGER = generateKeyPair();
const SQL_KINDS = KINDS.filter((k) => k !== "memory");

let store: OpenedStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

async function readChain(substrate: Substrate): Promise<ChainEntryRecord[]> {
  return substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
}

/** Raw SQL on the store's tables, the way someone with file or database access would edit them. */
async function sql(s: OpenedStore, text: string): Promise<void> {
  if (s.path !== null) {
    const db = new Database(s.path);
    try {
      db.pragma("busy_timeout = 5000");
      db.exec(text);
    } finally {
      db.close();
    }
  } else if (s.schema !== null) {
    await sqlInSchema(s.schema, text);
  } else {
    throw new Error("the memory store has no SQL");
  }
}

const quote = (text: string) => `'${text.replaceAll("'", "''")}'`;

/** INSERT of a whole chain row. */
function insertRow(e: ChainEntryRecord): string {
  return `INSERT INTO leash_chain (seq, entry_id, entry_hash, prev_hash, body, signature, key_id, kind, session_id, created_ns)
    VALUES (${e.seq}, ${quote(e.entry_id)}, ${quote(e.entry_hash)}, ${quote(e.prev_hash)}, ${quote(e.body)},
    ${quote(e.signature)}, ${quote(e.key_id)}, ${quote(e.kind)}, ${e.session_id === null ? "NULL" : quote(e.session_id)}, ${e.created_ns})`;
}

/** A well-formed entry linked after `prev`, signed by a key the chain never trusted. */
function forgeAfter(prev: ChainEntryRecord, chainId: string): ChainEntryRecord {
  return buildEntry({
    head: { seq: prev.seq, entry_hash: prev.entry_hash },
    chainId,
    kind: "decision",
    data: { session_id: "s", verdict: "ALLOW", reason: "within_thresholds", tool_name: "wire_money" },
    signer: FORGER.signer,
    nowNs: prev.created_ns + 1,
  });
}

/** An engine's history: a session, two ALLOWs, a DENY (replayed nonce), one more call: 5 entries. */
async function history(engine: Engine): Promise<ChainEntryRecord[]> {
  await engine.register({ agent_id: "bot", session_id: "s", config: {} });
  expect((await engine.evaluate({ session_id: "s", tool_name: "read", nonce: 1 })).verdict).toBe("ALLOW");
  expect((await engine.evaluate({ session_id: "s", tool_name: "read", nonce: 2 })).verdict).toBe("ALLOW");
  expect((await engine.evaluate({ session_id: "s", tool_name: "read", nonce: 2 })).verdict).toBe("DENY");
  await engine.evaluate({ session_id: "s", tool_name: "read", nonce: 3 });
  return readChain(store!.substrate);
}

/** Every call of an engine on the tampered store fails closed, and the chain is left as it was. */
async function expectRefused(
  substrate: Substrate,
  engine: Engine,
  where: { index: number; kind: ChainFailureKind },
): Promise<void> {
  const before = await readChain(substrate);
  // evaluate first: it opens the store itself (open() only reports what it found).
  for (const nonce of [10, 11]) {
    const r = await engine.evaluate({ session_id: "s", tool_name: "read", nonce });
    expect(r).toMatchObject({
      verdict: "DENY",
      reason: "fail_closed:chain_unverified",
      entry_seq: null,
      receipt: null,
      chain_failure: where,
    });
    expect(r.error).toContain(`at entry ${where.index} `);
    expect(r.error).toContain(`: ${where.kind}: `);
  }
  expect(await engine.open()).toMatchObject({ verified: false, failure: where });
  await expect(engine.register({ agent_id: "bot", config: {} })).rejects.toMatchObject({
    code: "chain_unverified",
  });
  await expect(
    engine.postExec({ session_id: "s", call_number: 1, actual_cost_usd: 0 }),
  ).rejects.toMatchObject({ code: "chain_unverified" });
  expect(await readChain(substrate)).toEqual(before);
}

describe.each(SQL_KINDS)("%s: a store edited behind the engine's back", (kind) => {
  const tampering: [
    string,
    (chain: ChainEntryRecord[]) => string,
    { index: number; kind: ChainFailureKind },
  ][] = [
    [
      "a DENY edited to ALLOW",
      () =>
        `UPDATE leash_chain SET body = replace(body, '"verdict":"DENY"', '"verdict":"ALLOW"') WHERE seq = 3`,
      { index: 3, kind: "edited" },
    ],
    ["a middle entry deleted", () => "DELETE FROM leash_chain WHERE seq = 2", { index: 2, kind: "removed" }],
    [
      "two entries reordered (seq column swapped)",
      () =>
        "UPDATE leash_chain SET seq = -1 WHERE seq = 1; UPDATE leash_chain SET seq = 1 WHERE seq = 3; UPDATE leash_chain SET seq = 3 WHERE seq = -1",
      { index: 1, kind: "reordered" },
    ],
    [
      "a forged entry inserted (later rows renumbered up)",
      (chain) =>
        "UPDATE leash_chain SET seq = -(seq + 1) WHERE seq >= 2; UPDATE leash_chain SET seq = -seq WHERE seq < 0; " +
        insertRow({ ...forgeAfter(chain[1]!, chain[0]!.entry_id), seq: 2 }),
      { index: 2, kind: "inserted" },
    ],
    [
      "a signature swapped",
      () =>
        "UPDATE leash_chain SET signature = (SELECT signature FROM leash_chain WHERE seq = 1) WHERE seq = 2",
      { index: 2, kind: "bad_signature" },
    ],
  ];

  it.each(tampering)("%s: every call fails closed and nothing is appended", async (_name, edit, where) => {
    store = await openStore(kind);
    const chain = await history(createEngine({ substrate: store.substrate, signer: KEY.signer }));
    expect(chain).toHaveLength(5);
    await sql(store, edit(chain));
    const substrate = await store.another();
    await expectRefused(substrate, createEngine({ substrate, signer: KEY.signer }), where);
  });

  it("an engine already running refuses once its own last entry is deleted", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    await history(engine);
    await sql(store, "DELETE FROM leash_chain WHERE seq = 4");
    if (kind === "postgres") {
      await sql(
        store,
        "UPDATE leash_chain_head SET seq = c.seq, entry_hash = c.entry_hash FROM leash_chain c WHERE c.seq = 3",
      );
    }
    const r = await engine.evaluate({ session_id: "s", tool_name: "read", nonce: 20 });
    expect(r).toMatchObject({
      verdict: "DENY",
      reason: "fail_closed:chain_unverified",
      chain_failure: { index: 3, kind: "truncated" },
    });
    expect(await readChain(store.substrate)).toHaveLength(4);
  });

  const headEdits: [string, string][] = [
    [
      "the body (the hash column left alone)",
      `UPDATE leash_chain SET body = replace(body, '"tool_name":"read"', '"tool_name":"wire"') WHERE seq = 4`,
    ],
    ["the session_id column", "UPDATE leash_chain SET session_id = 'other' WHERE seq = 4"],
  ];
  it.each(headEdits)(
    "an engine already running refuses at the next append once %s of its own last entry is edited",
    async (_what, edit) => {
      store = await openStore(kind);
      const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
      const chain = await history(engine);
      await sql(store, edit);
      const edited = await readChain(store.substrate);
      expect(edited[4]).not.toEqual(chain[4]);
      const r = await engine.evaluate({ session_id: "s", tool_name: "read", nonce: 20 });
      expect(r).toMatchObject({
        verdict: "DENY",
        reason: "fail_closed:chain_unverified",
        entry_seq: null,
        chain_failure: { index: 4, kind: "edited" },
      });
      // Not extended, and refused for good (not until a restart verifies it).
      expect(await readChain(store.substrate)).toEqual(edited);
      await expect(engine.register({ agent_id: "bot", config: {} })).rejects.toMatchObject({
        code: "chain_unverified",
      });
    },
  );
});

describe.each(KINDS)("%s: entries another writer appended", (kind) => {
  it("are verified before the engine links onto them: a forged one is refused", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    const chain = await history(engine);
    // Someone with write access to the store, but not the key, appends through the store's own port.
    const forged = forgeAfter(chain[4]!, chain[0]!.entry_id);
    const other = await store.another();
    await other.transaction((tx) => tx.chain.append(forged));
    const r = await engine.evaluate({ session_id: "s", tool_name: "read", nonce: 30 });
    expect(r).toMatchObject({
      verdict: "DENY",
      reason: "fail_closed:chain_unverified",
      chain_failure: { index: 5, kind: "unknown_key" },
    });
    expect((await readChain(store.substrate)).map((e) => e.entry_hash)).toEqual([
      ...chain.map((e) => e.entry_hash),
      forged.entry_hash,
    ]);
    // A new engine on the store refuses it as well, from the open.
    await expectRefused(other, createEngine({ substrate: other, signer: KEY.signer }), {
      index: 5,
      kind: "unknown_key",
    });
  });

  it("are verified, then linked onto, when genuine (a second engine with the key)", async () => {
    store = await openStore(kind);
    const first = createEngine({ substrate: store.substrate, signer: KEY.signer });
    await history(first);
    const second = createEngine({ substrate: await store.another(), signer: KEY.signer });
    await second.register({ agent_id: "bot", session_id: "t", config: {} });
    expect((await second.evaluate({ session_id: "t", tool_name: "read", nonce: 40 })).verdict).toBe("ALLOW");
    expect((await first.evaluate({ session_id: "t", tool_name: "read", nonce: 41 })).verdict).toBe("ALLOW");
    expect((await second.evaluate({ session_id: "t", tool_name: "read", nonce: 42 })).verdict).toBe("ALLOW");
    const entries = await readChain(store.substrate);
    expect(entries).toHaveLength(9);
    expect(await verifyChain(entries, { publicKeys: [KEY.publicKeyHex] })).toMatchObject({ ok: true });
  });
});

/** A checkpoint kept in a variable: the tests are about where the engine starts, not about files. */
function heldCheckpoint(): CheckpointStore & { value: Checkpoint | null } {
  const held = {
    location: "test",
    value: null as Checkpoint | null,
    read: async () => held.value,
    write: async (checkpoint: Checkpoint) => {
      held.value = checkpoint;
    },
  };
  return held;
}

describe.each(KINDS)("%s: opening from the last trusted checkpoint", (kind) => {
  it("verifies only from the checkpoint's head on; close() writes the next checkpoint", async () => {
    store = await openStore(kind);
    const checkpoints = heldCheckpoint();
    const first = createEngine({
      substrate: store.substrate,
      signer: KEY.signer,
      checkpointStore: checkpoints,
    });
    const chain = await history(first);
    expect(await first.close()).toEqual({ count: 5, head_hash: chain[4]!.entry_hash });
    expect(checkpoints.value).toEqual({ count: 5, head_hash: chain[4]!.entry_hash });

    const second = createEngine({
      substrate: store.substrate,
      signer: KEY.signer,
      checkpointStore: checkpoints,
      checkpointIntervalMs: 3_600_000,
    });
    expect(await second.open()).toMatchObject({
      verified: true,
      trusted_from: "checkpoint",
      from_seq: 4,
      entries_read: 1,
      count: 5,
    });
    await second.evaluate({ session_id: "s", tool_name: "read", nonce: 50 });
    await second.evaluate({ session_id: "s", tool_name: "read", nonce: 51 });

    // The checkpoint was not moved (no close, and its interval has not passed): the next engine reads
    // its head and the two after it.
    const third = createEngine({
      substrate: store.substrate,
      signer: KEY.signer,
      checkpointStore: checkpoints,
    });
    expect(await third.open()).toMatchObject({ verified: true, from_seq: 4, entries_read: 3, count: 7 });
    // Without a checkpoint, the whole chain is read.
    const fourth = createEngine({ substrate: store.substrate, signer: KEY.signer });
    expect(await fourth.open()).toMatchObject({ trusted_from: "genesis", from_seq: 0, entries_read: 7 });
  });

  it("refuses a chain shorter than its checkpoint", async () => {
    store = await openStore(kind);
    const checkpoints = heldCheckpoint();
    const chain = await history(createEngine({ substrate: store.substrate, signer: KEY.signer }));
    checkpoints.value = { count: 9, head_hash: chain[4]!.entry_hash };
    await expectRefused(
      store.substrate,
      createEngine({ substrate: store.substrate, signer: KEY.signer, checkpointStore: checkpoints }),
      { index: 8, kind: "truncated" },
    );
  });
});

describe.each(SQL_KINDS)("%s: history before the checkpoint", (kind) => {
  it("is trusted by the engine's open (documented), while the checkpoint's head and what follows are checked", async () => {
    store = await openStore(kind);
    const checkpoints = heldCheckpoint();
    const engine = createEngine({
      substrate: store.substrate,
      signer: KEY.signer,
      checkpointStore: checkpoints,
    });
    await history(engine);
    await engine.close(); // checkpoint at 5 entries
    await sql(
      store,
      `UPDATE leash_chain SET body = replace(body, '"verdict":"DENY"', '"verdict":"ALLOW"') WHERE seq = 3`,
    );
    // Entry 3 is before the checkpoint's head (entry 4): the open does not read it again…
    const fresh = await store.another();
    const resumed = createEngine({ substrate: fresh, signer: KEY.signer, checkpointStore: checkpoints });
    expect(await resumed.open()).toMatchObject({ verified: true, from_seq: 4 });
    // …but a full verification against the same checkpoint (`leash verify`, `leash recover`) does.
    const full = await verifyChain(await readChain(fresh), {
      publicKeys: [KEY.publicKeyHex],
      checkpoint: checkpoints.value!,
    });
    expect(full).toMatchObject({ ok: false, failure: { index: 3, kind: "edited" } });

    // The checkpoint's head itself is checked: edited, the store is refused.
    await sql(store, `UPDATE leash_chain SET body = replace(body, '"nonce":3', '"nonce":4') WHERE seq = 4`);
    const substrate = await store.another();
    await expectRefused(
      substrate,
      createEngine({ substrate, signer: KEY.signer, checkpointStore: checkpoints }),
      { index: 4, kind: "edited" },
    );
  });
});

describe("a shared COMMIT that fails (group commit) with two engines on one handle", () => {
  it("does not leave an engine trusting the other's rolled-back entry (no false refusal)", async () => {
    store = await openStore("memory");
    const inner = store.substrate;
    // Runs the next two transactions in one inner transaction, as a group commit would, then fails
    // that COMMIT: both roll back, the entry one engine verified of the other's included.
    let batch: Array<{ fn: (tx: never) => Promise<unknown>; settle: (e: unknown) => void }> | null = null;
    const batching = Object.create(inner) as Substrate;
    batching.transaction = (<T>(fn: (tx: never) => Promise<T>): Promise<T> => {
      if (batch === null) return inner.transaction(fn as never);
      const queued = batch;
      return new Promise<T>((_, reject) => {
        queued.push({ fn, settle: reject });
        if (queued.length < 2) return;
        batch = null;
        void inner
          .transaction(async (tx) => {
            for (const job of queued) await job.fn(tx as never);
            throw new Error("COMMIT failed");
          })
          .catch((error: unknown) => {
            for (const job of queued) job.settle(error);
          });
      });
    }) as Substrate["transaction"];
    const a = createEngine({ substrate: batching, signer: KEY.signer });
    const b = createEngine({ substrate: batching, signer: KEY.signer });
    await a.open();
    await b.open();
    batch = [];
    const lost = await Promise.allSettled([
      a.register({ agent_id: "bot", session_id: "a", config: {} }),
      b.register({ agent_id: "bot", session_id: "b", config: {} }),
    ]);
    expect(lost.map((r) => r.status)).toEqual(["rejected", "rejected"]);
    expect(await readChain(inner)).toEqual([]);
    await b.register({ agent_id: "bot", session_id: "b", config: {} });
    expect((await b.evaluate({ session_id: "b", tool_name: "t", nonce: 1 })).verdict).toBe("ALLOW");
    expect((await a.evaluate({ session_id: "b", tool_name: "t", nonce: 2 })).verdict).toBe("ALLOW");
    expect(await verifyChain(await readChain(inner), { publicKeys: [KEY.publicKeyHex] })).toMatchObject({
      ok: true,
      count: 3,
    });
  });
});
