// writeBatch contract, the rows: reads later in the transaction see the batch, the heartbeat stays, at_seq
// stamps round-trip, and the caller's records are copied. What a batch writes and refuses are other sections.

import type { SubstrateTx } from "@leash/core";
import { expect, it } from "vitest";
import { makeAccount, makeSession, T0, WORLD } from "./fixtures.js";
import { useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";
import { STAMPS } from "./stamps.js";
import {
  batchIn,
  bumpAccount,
  bumpSession,
  EMPTY,
  headOf,
  queuedFor,
  S1,
  S2,
  seeded,
} from "./write-batch-fixtures.js";

/** Registers the writeBatch tests of how written rows read back, inside the caller's `describe`. */
export function writeBatchRowsContract(opts: SubstrateContractOptions): void {
  it("reads that follow in the same transaction see the whole batch, rows read before it included", async () => {
    const sub = await seeded(opts);
    const seen = await sub.transaction(async (tx) => {
      // Read first, as the engine does: a store may answer later reads from what it holds.
      const batch = await batchIn(
        tx,
        [
          { session: S1, nonce: "n-in" },
          { session: S2, nonce: "n-in" },
        ],
        "in",
      );
      await tx.sessions.get(S2);
      await tx.budgets.getReservation("r-in");
      const s2 = bumpSession((await tx.sessions.get(S2))!, 3);
      const org = bumpAccount((await tx.budgets.getAccount(WORLD.orgAccount))!, 3);
      const written = { ...batch, sessions: [...batch.sessions, s2], accounts: [...batch.accounts, org] };
      await tx.writeBatch(written);
      return {
        written,
        head: await tx.chain.head(),
        count: await tx.chain.count(),
        chain: await tx.chain.range(2, 10),
        outbox: (await tx.outbox.list({})).map((i) => i.seq),
        hold: await tx.budgets.getReservation("r-in"),
        sessions: [await tx.sessions.get(S1), await tx.sessions.get(S2)],
        accounts: [
          await tx.budgets.getAccount(WORLD.sessionAccount),
          await tx.budgets.getAccount(WORLD.orgAccount),
        ],
        spent: [await tx.nonces.has(S1, "n-in"), await tx.nonces.has(S2, "n-in")],
        nonces: [await tx.nonces.count(S1), await tx.nonces.count(S2)],
      };
    });
    const { written } = seen;
    expect(seen).toEqual({
      written,
      head: headOf(written.entries[1]!),
      count: 4,
      chain: written.entries,
      outbox: [0, 1, 2, 3],
      hold: written.reservations[0],
      sessions: written.sessions,
      accounts: written.accounts,
      spent: [true, true],
      nonces: [2, 1],
    });
    // And the commit keeps what the transaction saw.
    const after = await sub.transaction(async (tx) => ({
      sessions: [await tx.sessions.get(S1), await tx.sessions.get(S2)],
      accounts: [
        await tx.budgets.getAccount(WORLD.sessionAccount),
        await tx.budgets.getAccount(WORLD.orgAccount),
      ],
    }));
    expect(after).toEqual({ sessions: written.sessions, accounts: written.accounts });
  });

  it("a batch's session rows leave the stored heartbeat as it is, as update does", async () => {
    const sub = await seeded(opts);
    await sub.transaction((tx) => tx.sessions.touch(S1, T0 + 9));
    const written = await sub.transaction(async (tx) => {
      const batch = await batchIn(tx, [{ session: S1 }], "beat");
      const row = { ...batch.sessions[0]!, last_heartbeat_ns: T0 + 1_000 };
      await tx.writeBatch({ ...batch, sessions: [row] });
      expect((await tx.sessions.get(S1))?.last_heartbeat_ns).toBe(T0 + 9);
      return row;
    });
    expect(await sub.transaction((tx) => tx.sessions.get(S1))).toEqual({
      ...written,
      last_heartbeat_ns: T0 + 9,
    });
  });

  it("at_seq stamps written through a batch's session and account rows come back as written (null and large)", async () => {
    const sub = await (await useHarness(opts)).openMigrated();
    const sessions = STAMPS.map((at_seq, i) => makeSession(`s${i}`, { at_seq }));
    const accounts = STAMPS.map((at_seq, i) => makeAccount(`a${i}`, { at_seq }));
    await sub.transaction(async (tx) => {
      for (const s of sessions) await tx.sessions.insert(s);
      for (const a of accounts) await tx.budgets.insertAccount(a);
    });
    // Each stamp moves to the next one, the last back to null.
    const next = <T extends { at_seq: number | null }>(rows: T[]) =>
      rows.map((row, i) => ({ ...row, updated_ns: T0 + 5, at_seq: STAMPS[(i + 1) % STAMPS.length]! }));
    const movedSessions = next(sessions);
    const movedAccounts = next(accounts);
    const read = (tx: SubstrateTx) =>
      Promise.all([
        Promise.all(sessions.map((s) => tx.sessions.get(s.session_id))),
        Promise.all(accounts.map((a) => tx.budgets.getAccount(a.account_id))),
      ]);
    const inTx = await sub.transaction(async (tx) => {
      await read(tx);
      await tx.writeBatch({ ...EMPTY, sessions: movedSessions, accounts: movedAccounts });
      return read(tx);
    });
    expect(inTx).toEqual([movedSessions, movedAccounts]);
    const after = await sub.transaction(read);
    expect(after).toEqual([movedSessions, movedAccounts]);
    expect(after[0].map((s) => s?.at_seq)).toEqual([...STAMPS.slice(1), STAMPS[0]]);
    expect(after[1].map((a) => a?.at_seq)).toEqual([...STAMPS.slice(1), STAMPS[0]]);
  });

  it("mutating a batch's records after writeBatch changes nothing stored", async () => {
    const sub = await seeded(opts);
    const written = await sub.transaction(async (tx) => {
      const batch = await batchIn(tx, [{ session: S1, nonce: "n-m" }], "mutable");
      const kept = structuredClone(batch);
      await tx.writeBatch(batch);
      const entry = batch.entries[0]!;
      entry.body = "mutated";
      entry.nonce = "other";
      batch.reservations[0]!.amount_usd = "99";
      batch.sessions[0]!.call_count = 999;
      batch.accounts[0]!.spent_usd = "99";
      (batch.outbox[0] as { entry_id: string }).entry_id = "mutated";
      return kept;
    });
    const back = await sub.transaction(async (tx) => ({
      chain: await tx.chain.range(2, 10),
      outbox: (await tx.outbox.list({})).at(-1),
      hold: await tx.budgets.getReservation("r-mutable"),
      session: await tx.sessions.get(S1),
      account: await tx.budgets.getAccount(WORLD.sessionAccount),
    }));
    expect(back).toEqual({
      chain: written.entries,
      outbox: queuedFor(written.entries[0]!),
      hold: written.reservations[0],
      session: written.sessions[0],
      account: written.accounts[0],
    });
  });
}
