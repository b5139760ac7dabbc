// The snapshot check on real substrates: a spent_usd, circuit flag, counter, hold or nonce edited in the
// store itself is caught by recover() (fail closed), and --repair rebuilds it from the chain with an entry.
import { buildEntry, chainIdOf, generateKeyPair, parseEntryBody } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { createEngine } from "@leash/engine";
import { afterEach, describe, expect, it } from "vitest";
import { assertRecovered, RecoveryError, recover, replayChain } from "../src/index.js";
import {
  deleteTail,
  KINDS,
  type Kind,
  manualClock,
  openStore,
  param,
  SQL_KINDS,
  type TestStore,
} from "./support.js";

const KEY = generateKeyPair();

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

const readChain = (substrate: Substrate): Promise<ChainEntryRecord[]> =>
  substrate.transaction((tx) => tx.chain.range(0, 1_000_000));

/** A budgeted session with settled and open holds, nonces, and a tripped circuit. */
async function seeded(kind: Kind) {
  store = await openStore(kind);
  const clock = manualClock();
  const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, clock });
  const session = await engine.register({ agent_id: "bot", config: { budget_usd: 10, max_repeat_calls: 2 } });
  const id = session.session_id;
  for (let i = 0; i < 4; i++) {
    clock.advanceMs(10);
    const r = await engine.evaluate({
      session_id: id,
      tool_name: `t${i % 2}`,
      params: { i },
      nonce: `n${i}`,
      estimated_cost_usd: 0.5,
    });
    expect(r.verdict).toBe("ALLOW");
    if (i < 2) await engine.postExec({ session_id: id, call_number: r.call_number, actual_cost_usd: "0.25" });
  }
  // The same call three times trips the circuit (max_repeat_calls 2).
  for (let i = 0; i < 3; i++) {
    await engine.evaluate({
      session_id: id,
      tool_name: "same",
      params: {},
      nonce: `r${i}`,
      estimated_cost_usd: 0.1,
    });
  }
  expect((await engine.getSession(id)).state.circuit_tripped).toBe(true);
  return { store, clock, id, account: `session:${id}`, hold: `${id}#3` };
}

type Edit = "spent_usd" | "circuit" | "counter" | "reservation" | "nonce";

/** The edit an attacker (or a broken tool) makes in the store, behind the engine's back. */
async function edit(
  s: TestStore,
  what: Edit,
  ids: { id: string; account: string; hold: string },
): Promise<void> {
  if (s.kind === "memory") {
    await s.substrate.transaction(async (tx) => {
      const session = (await tx.sessions.get(ids.id))!;
      if (what === "spent_usd") {
        const account = (await tx.budgets.getAccount(ids.account))!;
        await tx.budgets.updateAccount({ ...account, spent_usd: "0" });
      } else if (what === "circuit") {
        await tx.sessions.update({ ...session, state: { ...session.state, circuit_tripped: false } });
      } else if (what === "counter") {
        await tx.sessions.update({ ...session, call_count: session.call_count - 1 });
      } else if (what === "reservation") {
        const hold = (await tx.budgets.getReservation(ids.hold))!;
        await tx.budgets.updateReservation({ ...hold, amount_usd: "0.000001" });
      } else {
        // The memory store's columns are reachable through the port only: a properly signed entry
        // whose nonce column says it spent a nonce its body never names.
        const head = (await tx.chain.head())!;
        const [genesis] = await tx.chain.range(0, 1);
        const [last] = await tx.chain.range(head.seq, 1);
        const forged = buildEntry({
          head,
          chainId: chainIdOf(genesis!),
          kind: "note",
          data: { session_id: ids.id },
          signer: KEY.signer,
          nowNs: last!.created_ns + 1,
        });
        await tx.chain.append({ ...forged, session_id: ids.id, nonce: "never-seen" });
      }
    });
    return;
  }
  const p = (n: number) => param(s, n);
  switch (what) {
    case "spent_usd":
      return s.sql(`UPDATE leash_budget_accounts SET spent_usd = '0' WHERE account_id = ${p(1)}`, [
        ids.account,
      ]);
    case "circuit":
      return s.sql(
        s.kind === "sqlite"
          ? `UPDATE leash_sessions SET state = json_set(state, '$.circuit_tripped', json('false')) WHERE session_id = ?`
          : `UPDATE leash_sessions SET state = jsonb_set(state, '{circuit_tripped}', 'false') WHERE session_id = $1`,
        [ids.id],
      );
    case "counter":
      return s.sql(`UPDATE leash_sessions SET call_count = call_count - 1 WHERE session_id = ${p(1)}`, [
        ids.id,
      ]);
    case "reservation":
      return s.sql(`UPDATE leash_reservations SET amount_usd = '0.000001' WHERE reservation_id = ${p(1)}`, [
        ids.hold,
      ]);
    case "nonce":
      // The column the index of spent nonces is built on, cleared behind the engine's back.
      return s.sql(`UPDATE leash_chain SET nonce = NULL WHERE session_id = ${p(1)}`, [ids.id]);
  }
}

/** The difference each edit must show up as (table and field). */
const SEEN_AS: Record<Edit, { table: string; field: string }> = {
  spent_usd: { table: "budget_accounts", field: "spent_usd" },
  circuit: { table: "sessions", field: "state.circuit_tripped" },
  counter: { table: "sessions", field: "call_count" },
  reservation: { table: "reservations", field: "amount_usd" },
  nonce: { table: "chain", field: "nonce" },
};

describe.each(KINDS)("the snapshot check on %s", (kind: Kind) => {
  it("passes the tables of an untouched store", async () => {
    const { store: s } = await seeded(kind);
    const report = await recover(await s.another(), { publicKeys: [KEY.publicKeyHex] });
    expect(report.problems).toEqual([]);
    expect(report.snapshots).toMatchObject({ checked: true, differences: [], replay_mismatch: null });
    expect(report.snapshots.replayed).toBe((await readChain(s.substrate)).length);
  });

  it("reports an edited nonce column entry by entry, as the store holds it and as the body gives it; never repaired", async () => {
    const { store: s, clock, ...ids } = await seeded(kind);
    await edit(s, "nonce", ids);
    const substrate = await s.another();
    const report = await recover(substrate, { publicKeys: [KEY.publicKeyHex], clock });
    const chain = report.snapshots.differences.filter((d) => d.table === "chain");
    expect(chain.length).toBeGreaterThan(0);
    for (const d of report.snapshots.differences) expect(d.repairable).toBe(false);
    const entries = await readChain(substrate);
    for (const d of chain) {
      expect(d.field).toBe("nonce");
      const entry = entries[Number(d.id)]!;
      const data = (parseEntryBody(entry.body) as { data: { nonce?: unknown; verdict?: unknown } }).data;
      if (kind === "memory") {
        // The forged entry: a nonce in the column, none in its body.
        expect([d.snapshot, d.replayed, entry.kind]).toEqual(["never-seen", null, "note"]);
      } else {
        // Each ALLOW decision's nonce, cleared from the column.
        expect([d.snapshot, d.replayed, data.verdict]).toEqual([null, data.nonce, "ALLOW"]);
      }
    }
    // The seven calls of seeded(): four ALLOWs with nonces n0…n3, then r0, r1 and the DENY r2.
    if (kind !== "memory") expect(chain.map((d) => d.replayed)).toEqual(["n0", "n1", "n2", "n3", "r0", "r1"]);
    const repaired = await recover(substrate, {
      publicKeys: [KEY.publicKeyHex],
      clock,
      signer: KEY.signer,
      repair: true,
    });
    expect(repaired.problems.map((p) => p.code)).toEqual(["snapshot_mismatch"]);
    expect(repaired.snapshots.repaired).toBe(0);
  });

  const edits: Edit[] = ["spent_usd", "circuit", "counter", "reservation", "nonce"];
  it.each(edits)(
    "catches an edited %s, refuses to serve, and repairs it from the chain",
    async (what) => {
      const { store: s, clock, ...ids } = await seeded(kind);
      await edit(s, what, ids);
      const substrate = await s.another(); // a fresh handle: no row cached from before the edit
      const report = await recover(substrate, { publicKeys: [KEY.publicKeyHex], clock });
      expect(report.ok).toBe(false);
      expect(report.problems.map((p) => p.code)).toEqual(["snapshot_mismatch"]);
      const seen = report.snapshots.differences[0]!;
      expect(seen.table).toBe(SEEN_AS[what].table);
      if (SEEN_AS[what].field !== "") expect(seen.field).toBe(SEEN_AS[what].field);
      expect(seen.snapshot).not.toEqual(seen.replayed);
      expect(() => assertRecovered(report)).toThrow(RecoveryError);
      // Nothing was written while the store was refused.
      const before = await readChain(substrate);
      expect(before.at(-1)!.kind).not.toBe("snapshot_repaired");

      const repaired = await recover(substrate, {
        publicKeys: [KEY.publicKeyHex],
        clock,
        signer: KEY.signer,
        repair: true,
      });
      const repairable = report.snapshots.differences.every((d) => d.repairable);
      if (!repairable) {
        // A row the chain never wrote cannot be deleted through the port: still refused, and said so.
        expect(repaired.ok).toBe(false);
        expect(repaired.problems.map((p) => p.code)).toEqual(["snapshot_mismatch"]);
        return;
      }
      expect(repaired.problems).toEqual([]);
      expect(repaired.snapshots.repaired).toBe(report.snapshots.differences.length);
      const chain = await readChain(substrate);
      const entry = chain[repaired.snapshots.repair_entry_seq!]!;
      expect(entry.kind).toBe("snapshot_repaired");
      const body = parseEntryBody(entry.body) as { data: { repaired: string[] } };
      expect(body.data.repaired[0]).toContain(SEEN_AS[what].table);

      const again = await recover(await s.another(), { publicKeys: [KEY.publicKeyHex] });
      expect(again.ok).toBe(true);
      expect(again.snapshots.differences).toEqual([]);
      expect((await replayChain(chain)).ok).toBe(true);
      // The engine serves on the repaired tables: the circuit is tripped again, so the next call is denied.
      const engine = createEngine({ substrate, signer: KEY.signer, clock });
      const next = await engine.evaluate({
        session_id: ids.id,
        tool_name: "x",
        params: {},
        nonce: "after",
        estimated_cost_usd: 0.1,
      });
      expect(next.reason).toBe("circuit_open");
    },
    30_000,
  );
});

/** Stamps the session's row and its account with `atSeq`, as the engine would (through the port). */
async function stamp(substrate: Substrate, ids: { id: string; account: string }, atSeq: number) {
  await substrate.transaction(async (tx) => {
    const session = (await tx.sessions.get(ids.id))!;
    await tx.sessions.update({ ...session, at_seq: atSeq });
    const account = (await tx.budgets.getAccount(ids.account))!;
    await tx.budgets.updateAccount({ ...account, at_seq: atSeq });
  });
}

const stamps = (substrate: Substrate, ids: { id: string; account: string }) =>
  substrate.transaction(async (tx) => [
    (await tx.sessions.get(ids.id))?.at_seq,
    (await tx.budgets.getAccount(ids.account))?.at_seq,
  ]);

describe.each(KINDS)("snapshot stamps (at_seq) on %s", (kind: Kind) => {
  it("passes each row's own stamp, and catches one moved to an entry that did not sign the row (row_digest)", async () => {
    const { store: s, clock, ...ids } = await seeded(kind);
    const untouched = await recover(await s.another(), { publicKeys: [KEY.publicKeyHex] });
    expect(untouched.snapshots.differences).toEqual([]);
    // Entry 0 registered the session: it signed the session's first row, not the one stored now.
    await stamp(s.substrate, ids, 0);
    const report = await recover(await s.another(), { publicKeys: [KEY.publicKeyHex], clock });
    expect(report.problems.map((p) => p.code)).toEqual(["snapshot_mismatch"]);
    expect(report.snapshots.differences.map((d) => [d.table, d.id, d.field])).toEqual([
      ["sessions", ids.id, "row_digest"],
      ["budget_accounts", ids.account, "row_digest"],
    ]);
    const repaired = await recover(await s.another(), {
      publicKeys: [KEY.publicKeyHex],
      clock,
      signer: KEY.signer,
      repair: true,
    });
    expect(repaired.problems).toEqual([]);
    expect((await recover(await s.another(), { publicKeys: [KEY.publicKeyHex] })).ok).toBe(true);
  });

  it("catches a session and an account stamped beyond the chain's head, and --repair stamps them with its own entry", async () => {
    const { store: s, clock, ...ids } = await seeded(kind);
    const head = (await readChain(s.substrate)).at(-1)!.seq;
    await stamp(s.substrate, ids, head + 3);
    const substrate = await s.another();
    const report = await recover(substrate, { publicKeys: [KEY.publicKeyHex], clock });
    expect(report.ok).toBe(false);
    expect(report.problems.map((p) => p.code)).toEqual(["snapshot_mismatch"]);
    expect(report.problems[0]!.message).toContain(`at_seq is ${head + 3} in the store`);
    expect(report.snapshots.differences).toEqual([
      {
        table: "sessions",
        id: ids.id,
        field: "at_seq",
        snapshot: head + 3,
        replayed: head,
        repairable: true,
      },
      {
        table: "budget_accounts",
        id: ids.account,
        field: "at_seq",
        snapshot: head + 3,
        replayed: head,
        repairable: true,
      },
    ]);
    expect(() => assertRecovered(report)).toThrow(RecoveryError);

    const repaired = await recover(substrate, {
      publicKeys: [KEY.publicKeyHex],
      clock,
      signer: KEY.signer,
      repair: true,
    });
    expect(repaired.problems).toEqual([]);
    expect(repaired.snapshots.repaired).toBe(2);
    expect(repaired.snapshots.repair_entry_seq).toBe(head + 1);
    // Rewritten from the replay, stamped with the repair entry, which signs their digests.
    expect(await stamps(substrate, ids)).toEqual([head + 1, head + 1]);
    const again = await recover(await s.another(), { publicKeys: [KEY.publicKeyHex] });
    expect(again.ok).toBe(true);
  });
});

// Raw SQL cuts the chain back; the memory store has none (its stamps are checked above).
describe.each(SQL_KINDS)("snapshot stamps (at_seq) after a lost chain tail on %s", (kind: Kind) => {
  it("catches snapshots that reflect entries a chain restored from an older backup no longer has", async () => {
    const { store: s, clock, ...ids } = await seeded(kind);
    const chain = await readChain(s.substrate);
    const head = chain.at(-1)!.seq;
    await stamp(s.substrate, ids, head);
    // The chain loses its last two entries (an older backup of the chain tables, or a lost tail).
    await deleteTail(s, chain.length - 2);
    const report = await recover(await s.another(), { publicKeys: [KEY.publicKeyHex], clock });
    expect(report.ok).toBe(false);
    expect(report.problems.map((p) => p.code)).toContain("snapshot_mismatch");
    const stampDifferences = report.snapshots.differences.filter((d) => d.field === "at_seq");
    expect(stampDifferences).toEqual([
      {
        table: "sessions",
        id: ids.id,
        field: "at_seq",
        snapshot: head,
        replayed: head - 2,
        repairable: true,
      },
      {
        table: "budget_accounts",
        id: ids.account,
        field: "at_seq",
        snapshot: head,
        replayed: head - 2,
        repairable: true,
      },
    ]);
  }, 30_000);
});
