// recover() on real substrates: a clean start, tampering and torn writes (fail closed), a deleted tail
// caught by the checkpoint, outbox repair and requeue, lease release, reservation expiry and stale sessions.
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { appendEntry, generateKeyPair, verifyChain } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { createEngine } from "@leash/engine";
import { ackBatch, claimBatch, failItem } from "@leash/outbox";
import { afterEach, describe, expect, it } from "vitest";
import {
  assertRecovered,
  fileCheckpointStore,
  formatReport,
  type RecoverOptions,
  RecoveryError,
  recover,
} from "../src/index.js";
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
const PUB = [KEY.publicKeyHex];

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

async function open(kind: Kind): Promise<TestStore> {
  store = await openStore(kind);
  return store;
}

const readChain = (substrate: Substrate): Promise<ChainEntryRecord[]> =>
  substrate.transaction((tx) => tx.chain.range(0, 1_000_000));

/** A store with one session and `calls` ALLOWed calls, settled by postExec unless `settle` is false. */
async function seeded(kind: Kind, calls = 6, opts: { reservationTtlMs?: number; settle?: boolean } = {}) {
  const s = await open(kind);
  const clock = manualClock();
  const { settle = true, ...engineOptions } = opts;
  const engine = createEngine({ substrate: s.substrate, signer: KEY.signer, clock, ...engineOptions });
  const session = await engine.register({ agent_id: "bot", config: { budget_usd: 10 } });
  for (let i = 0; i < calls; i++) {
    const r = await engine.evaluate({
      session_id: session.session_id,
      tool_name: "t",
      params: { i },
      nonce: `n${i}`,
      estimated_cost_usd: 0.5,
    });
    expect(r.verdict).toBe("ALLOW");
    if (settle)
      await engine.postExec({
        session_id: session.session_id,
        call_number: r.call_number,
        actual_cost_usd: 0.25,
      });
  }
  return { store: s, engine, clock, sessionId: session.session_id };
}

function options(s: TestStore, extra: Partial<RecoverOptions> = {}): RecoverOptions {
  return {
    publicKeys: PUB,
    checkpointStore: fileCheckpointStore(join(s.dir, "checkpoint.json")),
    storeUrl: s.url ?? "memory:",
    ...extra,
  };
}

describe.each(KINDS)("recover on %s", (kind) => {
  it("passes a clean store, writes the checkpoint atomically, and verifies against it next time", async () => {
    const { store: s, clock } = await seeded(kind);
    const count = (await readChain(s.substrate)).length;
    const first = await recover(s.substrate, options(s, { signer: KEY.signer, clock }));
    expect(first.ok).toBe(true);
    expect(first.problems).toEqual([]);
    expect(first.warnings.map((w) => w.code)).toEqual(["checkpoint_missing"]);
    expect(first.chain).toMatchObject({ verified: true, count, key_in_force: KEY.keyId });
    expect(first.chain.checkpoint.written).toEqual({ count, head_hash: first.chain.head_hash });
    expect(first.outbox).toMatchObject({ missing: [], orphans: [], counts: { PENDING: count } });
    expect(assertRecovered(first)).toBe(first);
    // Same format as `leash verify --write-checkpoint`, and no temporary file left behind.
    const file = join(s.dir, "checkpoint.json");
    expect(JSON.parse(readFileSync(file, "utf8"))).toEqual(first.chain.checkpoint.written);
    expect(readdirSync(s.dir).filter((f) => f.includes(".tmp-"))).toEqual([]);

    const second = await recover(s.substrate, options(s, { signer: KEY.signer, clock }));
    expect(second.ok).toBe(true);
    expect(second.warnings).toEqual([]);
    expect(second.chain.checkpoint.previous).toEqual(first.chain.checkpoint.written);
    expect(formatReport(second)).toMatch(
      /^recovery OK in \d+ ms\n {2}chain: \d+ entries verified, head [0-9a-f]{64}\n/,
    );
  });

  it("leaves a chain entry missing from the outbox reported without repair, and re-enqueues it with repair", async () => {
    const { store: s, clock } = await seeded(kind, 2);
    // An entry committed without its outbox item: what a writer that skipped the outbox leaves.
    const lost = await s.substrate.transaction((tx) =>
      appendEntry(tx, {
        kind: "note",
        data: { session_id: null, text: "x" },
        signer: KEY.signer,
        nowNs: clock.nowNs(),
      }),
    );
    const before = await recover(s.substrate, options(s, { clock }));
    expect(before.ok).toBe(true);
    expect(before.outbox.missing).toEqual([lost.seq]);
    expect(before.outbox.reenqueued).toEqual([]);
    expect(before.warnings.map((w) => w.code)).toContain("outbox_missing");
    expect(await s.substrate.transaction((tx) => tx.outbox.list({}))).toHaveLength(lost.seq);

    const repaired = await recover(s.substrate, options(s, { clock, repair: true }));
    expect(repaired.ok).toBe(true);
    expect(repaired.outbox.reenqueued).toEqual([lost.seq]);
    expect(repaired.actions).toEqual(["re-enqueued 1 chain entries missing from the outbox"]);
    const items = await s.substrate.transaction((tx) => tx.outbox.list({}));
    expect(items.find((i) => i.seq === lost.seq)).toMatchObject({
      entry_id: lost.entry_id,
      status: "PENDING",
      created_ns: lost.created_ns,
    });
    // The entry itself was not touched.
    expect((await readChain(s.substrate))[lost.seq]).toEqual(lost);
    const after = await recover(s.substrate, options(s, { clock }));
    expect(after.outbox.missing).toEqual([]);
    expect(after.warnings).toEqual([]);
  });

  it("charges a budget hold past its TTL at its estimate through the engine, with a settled_by_expiry entry", async () => {
    const s = await open(kind);
    const clock = manualClock();
    const engine = createEngine({
      substrate: s.substrate,
      signer: KEY.signer,
      clock,
      reservationTtlMs: 1000,
    });
    const { session_id } = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const r = await engine.evaluate({ session_id, tool_name: "t", nonce: 1, estimated_cost_usd: 0.4 });
    expect(r.budget_remaining_usd).toBe("0.6");
    clock.advanceMs(999);
    const early = await recover(s.substrate, options(s, { signer: KEY.signer, clock }));
    expect(early.reservations).toEqual({ overdue: 0, expired: 0 });

    clock.advanceMs(1);
    // Without a signer nothing can be recorded, so nothing is charged: counted only.
    const counted = await recover(s.substrate, options(s, { clock }));
    expect(counted.ok).toBe(true);
    expect(counted.reservations).toEqual({ overdue: 1, expired: 0 });
    expect(counted.warnings.map((w) => w.code)).toContain("reservations_overdue");

    const charged = await recover(s.substrate, options(s, { signer: KEY.signer, clock }));
    expect(charged.reservations).toEqual({ overdue: 1, expired: 1 });
    // The ALLOWed call may have run: its estimate stays spent.
    expect((await engine.getSession(session_id)).budget_remaining_usd).toBe("0.6");
    const [reservation] = await s.substrate.transaction((tx) =>
      tx.budgets.listReservations({ sessionId: session_id }),
    );
    expect(reservation!.status).toBe("EXPIRED");
    const chain = await readChain(s.substrate);
    const last = chain[chain.length - 1]!;
    expect(last.kind).toBe("settled_by_expiry");
    expect(JSON.parse(last.body).data).toMatchObject({
      session_id,
      call_number: 1,
      charged_usd: "0.4",
      budget_after_usd: "0.6",
    });
    expect((await verifyChain(chain, { publicKeys: PUB })).ok).toBe(true);
    const again = await recover(s.substrate, options(s, { signer: KEY.signer, clock }));
    expect(again.reservations).toEqual({ overdue: 0, expired: 0 });
    expect(again.outbox.missing).toEqual([]);
  });

  it("marks a session STALE after 3 missed heartbeats with a session_stale entry; a live one stays", async () => {
    const s = await open(kind);
    const clock = manualClock();
    const engine = createEngine({ substrate: s.substrate, signer: KEY.signer, clock });
    const quiet = (await engine.register({ agent_id: "quiet", config: {} })).session_id;
    const lively = (await engine.register({ agent_id: "lively", config: {} })).session_id;
    clock.advanceMs(60_000);
    await engine.heartbeat(lively);
    clock.advanceMs(30_000); // quiet: exactly 3 × 30 s, not yet older than that
    const onTheLine = await recover(s.substrate, options(s, { signer: KEY.signer, clock }));
    expect(onTheLine.sessions).toEqual({ overdue: [], markedStale: [] });

    clock.advanceMs(1);
    const report = await recover(s.substrate, options(s, { signer: KEY.signer, clock }));
    expect(report.ok).toBe(true);
    expect(report.sessions).toEqual({ overdue: [quiet], markedStale: [quiet] });
    expect((await engine.getSession(quiet)).status).toBe("STALE");
    expect((await engine.getSession(lively)).status).toBe("ACTIVE");
    const chain = await readChain(s.substrate);
    const entry = chain[chain.length - 1]!;
    expect(entry).toMatchObject({ kind: "session_stale", session_id: quiet });
    expect(JSON.parse(entry.body).data).toMatchObject({
      session_id: quiet,
      previous_status: "ACTIVE",
      reason: "heartbeat_timeout",
      heartbeat_interval_ms: 30_000,
      missed_heartbeats: 3,
    });
    expect((await verifyChain(chain, { publicKeys: PUB })).ok).toBe(true);
    const items = await s.substrate.transaction((tx) => tx.outbox.list({}));
    expect(items[items.length - 1]).toMatchObject({ seq: entry.seq, entry_id: entry.entry_id });

    // Marked once: a second run finds nothing; a heartbeat revives the session (the engine's job).
    const again = await recover(s.substrate, options(s, { signer: KEY.signer, clock }));
    expect(again.sessions).toEqual({ overdue: [], markedStale: [] });
    await engine.heartbeat(quiet);
    expect((await engine.getSession(quiet)).status).toBe("ACTIVE");
  });

  it("without a signer counts stale sessions and writes nothing to the chain", async () => {
    const s = await open(kind);
    const clock = manualClock();
    const engine = createEngine({ substrate: s.substrate, signer: KEY.signer, clock });
    const { session_id } = await engine.register({ agent_id: "quiet", config: {} });
    clock.advanceMs(10_000);
    const count = (await readChain(s.substrate)).length;
    const report = await recover(
      s.substrate,
      options(s, { clock, heartbeatIntervalMs: 1000, staleAfterMissed: 5 }),
    );
    expect(report.sessions).toEqual({ overdue: [session_id], markedStale: [] });
    expect(report.warnings.map((w) => w.code)).toContain("sessions_overdue");
    expect(await readChain(s.substrate)).toHaveLength(count);
    expect((await engine.getSession(session_id)).status).toBe("ACTIVE");
  });

  it("frees the leases of a restarted relay (leaseOwner) and counts expired and live ones", async () => {
    const { store: s, clock } = await seeded(kind, 3);
    const count = (await readChain(s.substrate)).length;
    // Raw port claims: claimBatch would give back items queued behind another relay's (same session).
    const claim = (relayId: string, leaseMs: number) =>
      s.substrate.transaction((tx) =>
        tx.outbox.claim({ relayId, limit: 2, nowNs: clock.nowNs(), leaseNs: leaseMs * 1e6 }),
      );
    await claim("relay-a", 60_000);
    await claim("relay-b", 1_000);
    await claim("relay-c", 60_000);
    clock.advanceMs(1_000);
    const report = await recover(s.substrate, options(s, { clock, leaseOwner: "relay-a" }));
    expect(report.outbox).toMatchObject({
      expiredLeases: 2,
      liveLeases: { "relay-a": 2, "relay-c": 2 },
      releasedLeases: 2,
    });
    // relay-a's two are free at once; relay-b's had expired anyway; relay-c's are still held.
    const next = await s.substrate.transaction((tx) =>
      tx.outbox.claim({ relayId: "relay-d", limit: 100, nowNs: clock.nowNs(), leaseNs: 60e9 }),
    );
    expect(next.map((i) => i.seq)).toEqual(
      Array.from({ length: count }, (_, i) => i).filter((seq) => seq !== 4 && seq !== 5),
    );
  });

  it("reports DEAD items; with repair and requeueDead moves them back to PENDING for the relay", async () => {
    const { store: s, clock } = await seeded(kind, 1);
    const count = (await readChain(s.substrate)).length;
    const all = Array.from({ length: count }, (_, i) => i);
    // Every entry refused for good, as a webhook with a wrong secret does (401).
    await s.substrate.transaction(async (tx) => {
      await tx.outbox.claim({ relayId: "r", limit: count, nowNs: clock.nowNs(), leaseNs: 60e9 });
      for (const seq of all) await tx.outbox.fail("r", seq, "HTTP 401 Unauthorized: bad signature", true);
    });
    const deadItems = () => s.substrate.transaction((tx) => tx.outbox.list({ status: "DEAD" }));

    const plain = await recover(s.substrate, options(s, { clock }));
    expect(plain.ok).toBe(true);
    expect(plain.outbox.dead.map((d) => d.seq)).toEqual(all);
    expect(plain.outbox.dead[0]).toMatchObject({
      attempts: 1,
      last_error: "HTTP 401 Unauthorized: bad signature",
    });
    expect(plain.outbox.requeued).toBe(0);
    const warning = plain.warnings.find((w) => w.code === "outbox_dead");
    expect(warning?.message).toContain(`${count} outbox item(s) are DEAD`);
    expect(warning?.message).toContain("requeue them with repair and requeueDead");
    // requeueDead alone is not repair: nothing moves, and the warning says what is missing.
    const alone = await recover(s.substrate, options(s, { clock, requeueDead: true }));
    expect(alone.outbox.requeued).toBe(0);
    expect(alone.warnings.find((w) => w.code === "outbox_dead")?.message).toContain(
      "requeueDead needs repair",
    );
    // Nor does repair alone.
    expect((await recover(s.substrate, options(s, { clock, repair: true }))).outbox.requeued).toBe(0);
    expect(await deadItems()).toHaveLength(count);

    clock.advanceMs(5);
    const asked = await recover(s.substrate, options(s, { clock, repair: true, requeueDead: true }));
    expect(asked.ok).toBe(true);
    expect(asked.outbox.dead.map((d) => d.seq)).toEqual(all);
    expect(asked.outbox.requeued).toBe(count);
    expect(asked.warnings.map((w) => w.code)).not.toContain("outbox_dead");
    expect(asked.actions).toContain(
      `requeued ${count} DEAD outbox items for the relay (attempts reset, last_error kept)`,
    );
    expect(formatReport(asked)).toContain(`done: requeued ${count} DEAD outbox items`);
    const items = await s.substrate.transaction((tx) => tx.outbox.list({}));
    for (const item of items) {
      expect(item).toMatchObject({
        status: "PENDING",
        attempts: 0,
        claimed_by: null,
        lease_until_ns: null,
        last_error: `requeued at ${BigInt(clock.nowNs())}: HTTP 401 Unauthorized: bad signature`,
      });
    }

    // Nothing is DEAD any more; a relay takes them all, in order, and delivers each once.
    const again = await recover(s.substrate, options(s, { clock, repair: true, requeueDead: true }));
    expect([again.outbox.dead, again.outbox.requeued, again.actions]).toEqual([[], 0, []]);
    const batch = await claimBatch(s.substrate, { relayId: "r2", limit: 1000, leaseMs: 60_000, clock });
    expect(batch.items.map((i) => i.seq)).toEqual(all);
    expect(await ackBatch(s.substrate, "r2", all)).toBe(count);
    expect(await s.substrate.transaction((tx) => tx.outbox.counts())).toEqual({
      PENDING: 0,
      DELIVERED: count,
      DEAD: 0,
    });
  });

  it("requeues nothing when the store fails recovery, even with repair and requeueDead", async () => {
    const { store: s, clock } = await seeded(kind, 1);
    await claimBatch(s.substrate, { relayId: "r", limit: 1, leaseMs: 60_000, clock });
    await failItem(s.substrate, "r", 0, { error: "HTTP 422", dead: true });
    const stranger = generateKeyPair();
    const refused = await recover(
      s.substrate,
      options(s, { clock, signer: stranger.signer, repair: true, requeueDead: true }),
    );
    expect(refused.ok).toBe(false);
    expect(refused.outbox.requeued).toBe(0);
    expect(refused.warnings.map((w) => w.code)).toContain("outbox_dead");
    const [dead] = await s.substrate.transaction((tx) => tx.outbox.list({ status: "DEAD" }));
    expect(dead).toMatchObject({ seq: 0, last_error: "HTTP 422" });
  });

  it("refuses a signer that is not the key in force, and follows a key rotation", async () => {
    const { store: s, clock, engine } = await seeded(kind, 1, { reservationTtlMs: 1 });
    clock.advanceMs(10);
    const stranger = generateKeyPair();
    const count = (await readChain(s.substrate)).length;
    const refused = await recover(s.substrate, options(s, { clock, signer: stranger.signer }));
    expect(refused.ok).toBe(false);
    expect(refused.problems.map((p) => p.code)).toEqual(["signer_mismatch"]);
    // Fail closed: no expiry entries, no checkpoint.
    expect(refused.reservations.expired).toBe(0);
    expect(await readChain(s.substrate)).toHaveLength(count);
    expect(existsSync(join(s.dir, "checkpoint.json"))).toBe(false);
    expect(() => assertRecovered(refused)).toThrow(RecoveryError);

    const next = generateKeyPair();
    await engine.rotateKey(next.signer, "ops");
    expect((await recover(s.substrate, options(s, { clock, signer: KEY.signer }))).problems[0]?.code).toBe(
      "signer_mismatch",
    );
    const rotated = await recover(s.substrate, options(s, { clock, signer: next.signer }));
    expect(rotated.ok).toBe(true);
    expect(rotated.chain.key_in_force).toBe(next.keyId);
    expect(rotated.reservations.expired).toBe(0); // settled by postExec
  });

  it("fails closed on a damaged checkpoint file", async () => {
    const { store: s, clock } = await seeded(kind, 1);
    writeFileSync(join(s.dir, "checkpoint.json"), '{"count": 3, "head_');
    const report = await recover(s.substrate, options(s, { clock, signer: KEY.signer }));
    expect(report.ok).toBe(false);
    expect(report.problems.map((p) => p.code)).toEqual(["checkpoint_unreadable"]);
    const error = (() => {
      try {
        assertRecovered(report);
      } catch (e) {
        return e;
      }
    })();
    expect(RecoveryError.isInstance(error) && error.code).toBe("checkpoint_unreadable");
  });
});

describe.each(SQL_KINDS)("recover on %s, damaged by hand", (kind) => {
  it("an edited entry fails closed with its seq, writes nothing, and says how to inspect", async () => {
    const { store: s, clock } = await seeded(kind, 4, { reservationTtlMs: 1, settle: false });
    const chain = await readChain(s.substrate);
    const target = chain.find((e) => e.kind === "decision" && e.seq > 2)!;
    await s.sql(
      `UPDATE leash_chain SET body = replace(body, '"verdict":"ALLOW"', '"verdict":"DENY"') WHERE seq = ${param(s, 1)}`,
      [target.seq],
    );
    clock.advanceMs(10);
    const report = await recover(s.substrate, options(s, { clock, signer: KEY.signer, repair: true }));
    expect(report.ok).toBe(false);
    expect(report.chain.verified).toBe(false);
    expect(report.chain.failure).toMatchObject({ index: target.seq, seq: target.seq, kind: "edited" });
    expect(report.problems.map((p) => p.code)).toEqual(["chain_unverifiable"]);
    expect(report.reservations).toEqual({ overdue: 4, expired: 0 });
    expect(report.chain.checkpoint.written).toBeNull();
    expect(await readChain(s.substrate)).toHaveLength(chain.length);

    let thrown: unknown;
    try {
      assertRecovered(report);
    } catch (e) {
      thrown = e;
    }
    expect(RecoveryError.isInstance(thrown)).toBe(true);
    const error = thrown as RecoveryError;
    expect(error.code).toBe("chain_unverifiable");
    expect(error.message).toContain(`at entry ${target.seq} (seq ${target.seq}): edited`);
    expect(error.message).toContain(
      `leash verify --store ${s.url} --pubkey ${KEY.publicKeyHex} --checkpoint `,
    );
    expect(formatReport(report)).toContain("recovery FAILED");
  });

  it("a torn write (an entry gone from the middle) fails as removed", async () => {
    const { store: s, clock } = await seeded(kind, 3);
    await s.sql(`DELETE FROM leash_chain WHERE seq = ${param(s, 1)}`, [4]);
    const report = await recover(s.substrate, options(s, { clock }));
    expect(report.ok).toBe(false);
    expect(report.chain.failure).toMatchObject({ index: 4, seq: 5, kind: "removed" });
    expect(report.chain.failure!.message).toContain("entry 4 is missing");
  });

  it("a deleted tail is caught by the checkpoint (and without one, by the outbox it left behind)", async () => {
    const { store: s, clock } = await seeded(kind, 4);
    const first = await recover(s.substrate, options(s, { clock }));
    expect(first.ok).toBe(true);
    const count = first.chain.count;
    await deleteTail(s, count - 3);

    const report = await recover(s.substrate, options(s, { clock, signer: KEY.signer }));
    expect(report.ok).toBe(false);
    // Shorter than its checkpoint: behind it, as a restored older copy would be, both heads named.
    expect(report.chain.rollback).toMatchObject({
      kind: "behind",
      checkpoint: { count },
      accepted_seq: null,
    });
    expect(report.problems[0]).toMatchObject({ code: "chain_rolled_back" });
    expect(report.problems[0]!.message).toContain(
      `the store's chain is behind the last head checkpointed outside it: the store has no entry ${count - 1}`,
    );
    // The checkpoint still says what it said: a failed run never lowers it.
    expect(JSON.parse(readFileSync(join(s.dir, "checkpoint.json"), "utf8")).count).toBe(count);

    // Without a checkpoint the shorter chain verifies, but the outbox items of the lost entries
    // (deleted here from the chain only) still name them.
    await s.sql(`DELETE FROM leash_chain WHERE seq >= ${param(s, 1)}`, [count - 5]);
    const blind = await recover(s.substrate, { publicKeys: PUB, clock });
    expect(blind.chain.verified).toBe(true);
    expect(blind.ok).toBe(false);
    // The state tables still hold what the lost entries did: the replayed chain says otherwise.
    expect(blind.problems.map((p) => p.code)).toEqual(["outbox_mismatch", "snapshot_mismatch"]);
    expect(blind.outbox.orphans.map((o) => o.seq)).toEqual([count - 5, count - 4]);
  });
});
