// The engine on a store written at schema version 5 (before the snapshot stamps), migrated forward: every
// row reads back as written, the chain verifies, and the engine decides on the sessions it finds there.
import { generateKeyPair, verifyChain } from "@leash/chain";
import type { BudgetAccount, Substrate } from "@leash/core";
import { freshLocation, manualClock, type StoreLocation, storeAtVersion, withPg } from "@leash/test-stores";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine } from "../src/index.js";
import { type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();
/** The schema version before the snapshot stamps: what stores written by the previous build are at. */
const VERSION_5 = 5;
const SQL_KINDS = ["sqlite", "postgres"] as const;

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const done of cleanup.splice(0).reverse()) await done();
});

/** Version 5 recorded a spent nonce as a row of leash_nonces (the entry has no column for it). */
async function recordSpentNonces(into: StoreLocation, from: OpenedStore): Promise<void> {
  if (into.path !== null) {
    const db = new Database(into.path);
    db.prepare("ATTACH DATABASE ? AS source").run(from.path);
    db.exec(
      "INSERT INTO main.leash_nonces (session_id, nonce, recorded_ns) SELECT session_id, nonce, created_ns FROM source.leash_chain WHERE nonce IS NOT NULL",
    );
    db.exec("DETACH DATABASE source");
    db.close();
    return;
  }
  await withPg((client) =>
    client.query(
      `INSERT INTO "${into.schema}".leash_nonces (session_id, nonce_json, recorded_ns)
       SELECT session_id, nonce, created_ns FROM "${from.schema}".leash_chain WHERE nonce IS NOT NULL`,
    ),
  );
}

/** Every row a test can read back through the port (nonces by the ones the workload used). */
async function everything(
  substrate: Substrate,
  accountIds: readonly string[],
  nonces: Array<[string, string]>,
) {
  return substrate.transaction(async (tx) => ({
    sessions: await tx.sessions.list(),
    accounts: await Promise.all(accountIds.map((id) => tx.budgets.getAccount(id))),
    reservations: await tx.budgets.listReservations({}),
    hitl: await tx.hitl.list({}),
    nonces: await Promise.all(nonces.map(([session, nonce]) => tx.nonces.has(session, nonce))),
    chain: await tx.chain.range(0, 1_000_000),
    outbox: await tx.outbox.list({}),
  }));
}

describe.each(SQL_KINDS)("a %s store written at schema version 5, migrated", (kind) => {
  it("keeps every row, verifies, and the engine decides on its sessions", async () => {
    // The workload, written by the engine into a current store, then copied into a version-5 layout.
    const source = await openStore(kind);
    cleanup.push(() => source.close());
    const clock = manualClock(1_750_000_000_000_000_000);
    const writer = createEngine({ substrate: source.substrate, signer: KEY.signer, clock });
    const budgeted = await writer.register({ agent_id: "bot", config: { budget_usd: 10 } });
    const paused = await writer.register({ agent_id: "reviewer", config: { hitl_mode: "always" } });
    const nonces: Array<[string, string]> = [];
    for (let i = 0; i < 3; i++) {
      clock.advanceMs(10);
      const nonce = `n${i}`;
      nonces.push([budgeted.session_id, nonce]);
      const r = await writer.evaluate({
        session_id: budgeted.session_id,
        tool_name: `t${i}`,
        params: { i },
        nonce,
        estimated_cost_usd: 0.5,
      });
      expect(r.verdict).toBe("ALLOW");
      if (i === 0)
        await writer.postExec({ session_id: budgeted.session_id, call_number: 1, actual_cost_usd: 0.25 });
    }
    nonces.push([paused.session_id, "h0"]);
    const held = await writer.evaluate({
      session_id: paused.session_id,
      tool_name: "wire",
      params: { amount: 10 },
      nonce: "h0",
    });
    expect(held.verdict).toBe("HITL");
    await writer.heartbeat(budgeted.session_id);
    const written = await everything(source.substrate, [`session:${budgeted.session_id}`], nonces);
    expect(written.reservations.map((r) => r.status).sort()).toEqual(["PENDING", "PENDING", "SETTLED"]);
    expect(written.hitl).toHaveLength(1);
    expect(written.accounts[0]).not.toBeNull();

    const location = freshLocation(kind, { label: "enginemigrate" });
    let substrate: Substrate | undefined;
    cleanup.push(async () => {
      await substrate?.close();
      await location.remove();
    });
    await storeAtVersion(location, VERSION_5, source);
    await recordSpentNonces(location, source);
    substrate = await location.open();
    await substrate.migrate();

    const migrated = await everything(substrate, [`session:${budgeted.session_id}`], nonces);
    // Stamps did not exist before: null on every migrated session and account (absent on holds and
    // HITL requests), all else as written;
    // the nonces entries spent are rows of the old nonce table there, not entry columns.
    const unstamped = {
      ...written,
      chain: written.chain.map(({ nonce: _spent, ...entry }) => entry),
      sessions: written.sessions.map((s) => ({ ...s, at_seq: null })),
      accounts: written.accounts.map((a) => (a === null ? null : ({ ...a, at_seq: null } as BudgetAccount))),
      // Holds and HITL requests had no stamp column before version 13: read back without one.
      reservations: written.reservations.map(({ at_seq: _stamp, ...r }) => r),
      hitl: written.hitl.map(({ at_seq: _stamp, ...h }) => h),
    };
    expect(migrated).toEqual(unstamped);
    // The ALLOWed calls' nonces (a paused call's nonce is not consumed until it is approved).
    expect(migrated.nonces.slice(0, 3)).toEqual([true, true, true]);
    for (const s of migrated.sessions) expect(s.at_seq).toBeNull();
    expect(migrated.accounts[0]?.at_seq).toBeNull();
    expect((await verifyChain(migrated.chain, { publicKeys: [KEY.signer.publicKeyHex] })).ok).toBe(true);

    // A new engine opens the migrated store (checking its chain first) and decides on an existing session.
    const engine = createEngine({ substrate, signer: KEY.signer, clock });
    clock.advanceMs(10);
    const next = await engine.evaluate({
      session_id: budgeted.session_id,
      tool_name: "after",
      params: {},
      nonce: "after-migration",
      estimated_cost_usd: 0.5,
    });
    expect(next.verdict).toBe("ALLOW");
    expect(next.call_number).toBe(4);
    // A nonce recorded before the migration is still refused.
    const replayed = await engine.evaluate({
      session_id: budgeted.session_id,
      tool_name: "t0",
      params: { i: 0 },
      nonce: "n0",
      estimated_cost_usd: 0.5,
    });
    expect(replayed.verdict).toBe("DENY");
    await engine.heartbeat(paused.session_id);
    const chain = await substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
    expect(chain.length).toBeGreaterThan(migrated.chain.length);
    expect((await verifyChain(chain, { publicKeys: [KEY.signer.publicKeyHex] })).ok).toBe(true);
  });
});
