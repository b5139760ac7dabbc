// Every entry kind written through the real writers (an engine on a SQLite file, recovery's repair)
// matches its kind's current JSON Schema: an undocumented, dropped or retyped field fails here.

import {
  type ChainEventKind,
  checkEventData,
  EVENT_SCHEMAS,
  eventVersionOf,
  generateKeyPair,
  type PolicyJudgement,
  type Signer,
  WRITTEN_KINDS,
} from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { canonicalHash } from "@leash/core";
import { createEngine } from "@leash/engine";
import { loadPolicy } from "@leash/policy";
import { afterEach, describe, expect, it } from "vitest";
import {
  compareSnapshots,
  recordRollbackAccepted,
  repairSnapshots,
  replayChain,
  storedParams,
} from "../src/index.js";
import { manualClock, openStore, type TestStore } from "./support.js";

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

const readChain = (substrate: Substrate): Promise<ChainEntryRecord[]> =>
  substrate.transaction((tx) => tx.chain.range(0, 1_000_000));

/** A rule of each kind a decision's `policy` records: deny, hitl, a rate limit, a monitor. */
const POLICY = `
version: 1
name: ops
rules:
  - name: no-drop
    match: { tool: db.drop }
    action: deny
    message: Dropping tables is not allowed.
  - name: big-payments
    match: { tool: payments.send }
    when: "has(args.amount_usd) && args.amount_usd > 500"
    action: hitl
  - name: search-rate
    match: { tool: search }
    action: { rate: { limit: 2, window_s: 60, per: agent } }
  - name: shadow-delete
    match: { tool: fs.delete }
    action: deny
    message: would refuse deletes
    mode: monitor
`;

/** An engine with a policy: its policy_published entry, and decisions with every `policy` field. */
async function judgedByPolicy(substrate: Substrate, signer: Signer, clock: ReturnType<typeof manualClock>) {
  const engine = createEngine({ substrate, signer, clock, policy: loadPolicy(POLICY) });
  await engine.register({ agent_id: "bot", session_id: "p", config: { budget_usd: 5 } });
  const call = (
    tool_name: string,
    params: Record<string, unknown>,
    nonce: number,
    estimated_cost_usd = 0.1,
  ) => engine.evaluate({ session_id: "p", tool_name, params, nonce, estimated_cost_usd });
  expect((await call("db.drop", { t: 1 }, 1)).reason).toBe("policy_violation:rule:no-drop");
  const paused = await call("payments.send", { amount_usd: 900 }, 2);
  expect(paused.reason).toBe("policy_hitl:rule:big-payments");
  await engine.answerHitl(paused.hitl_request_id!, { decision: "approve", operatorId: "alice" });
  expect((await call("payments.send", { amount_usd: 900 }, 2)).verdict).toBe("ALLOW");
  const searches = [];
  for (const n of [3, 4, 5]) searches.push((await call("search", { q: n }, n)).verdict);
  expect(searches).toEqual(["ALLOW", "ALLOW", "DENY"]);
  expect((await call("fs.delete", { p: "/x" }, 6)).verdict).toBe("ALLOW");
  // Refused before the policy ran (over budget): `policy` is null.
  expect((await call("search", { q: 7 }, 7, 100)).reason).toBe("budget_overrun");
  await engine.close();
}

/** A chain with every kind a writer writes today, and the optional fields they can carry. */
async function everyKind(): Promise<ChainEntryRecord[]> {
  store = await openStore("sqlite");
  const clock = manualClock();
  const key = generateKeyPair();
  const engine = createEngine({
    substrate: store.substrate,
    signer: key.signer,
    clock,
    reservationTtlMs: 1000,
    rng: () => 0.99,
  });
  const config = { budget_usd: 5, default_estimate_usd: "0.5" };
  const { session_id: sid } = await engine.register({ agent_id: "bot", config });
  const params = { q: "x" };
  await engine.evaluate({
    session_id: sid,
    tool_name: "search",
    params,
    nonce: 1,
    expected_params_hash: canonicalHash(params),
    previous_error: "timeout",
  });
  await engine.postExec({ session_id: sid, call_number: 1, actual_cost_usd: 0.25 });
  const failed = await engine.evaluate({
    session_id: sid,
    tool_name: "search",
    params: { q: "z" },
    nonce: 3,
  });
  await engine.postExec({
    session_id: sid,
    call_number: failed.call_number,
    actual_cost_usd: 0.1,
    success: false,
    error_message: "boom",
  });
  const expired = await engine.evaluate({
    session_id: sid,
    tool_name: "search",
    params: { q: "w" },
    nonce: 4,
  });
  clock.advanceMs(2000);
  await engine.expireReservations();
  await engine.postExec({ session_id: sid, call_number: expired.call_number, actual_cost_usd: 0.2 });
  await engine.evaluate({ session_id: sid, tool_name: 7 as never, nonce: 5 });
  await engine.evaluate({
    session_id: sid,
    tool_name: "search",
    params: { q: "y" },
    nonce: 2,
    estimated_cost_usd: 100,
  });
  // Params of 1,024 characters or more are stored by digest (params_blob); over the cap, by size alone.
  const big = { text: "x".repeat(2000) };
  await engine.evaluate({ session_id: sid, tool_name: "search", params: big, nonce: 6 });
  const capped = await engine.register({ agent_id: "bot", config: { max_params_bytes: 100 } });
  await engine.evaluate({ session_id: capped.session_id, tool_name: "search", params: big, nonce: 1 });
  await engine.reset(sid, "alice");

  // Below a fifth of its budget, probabilistic denial draws a random number: the entry records it.
  const low = await engine.register({
    agent_id: "bot",
    config: { budget_usd: 1, probabilistic_deny: true, deny_jitter_ratio: 0.5 },
  });
  await engine.evaluate({ session_id: low.session_id, tool_name: "t", nonce: 1, estimated_cost_usd: 0.9 });
  await engine.evaluate({ session_id: low.session_id, tool_name: "t", nonce: 2, estimated_cost_usd: 0.01 });

  const hitlConfig = { hitl_mode: "always" as const, hitl_timeout_s: 60 };
  const answered = await engine.register({ agent_id: "bot", config: hitlConfig });
  const h1 = await engine.evaluate({
    session_id: answered.session_id,
    tool_name: "pay",
    params: { to: "a" },
    nonce: 1,
  });
  await engine.answerHitl(h1.hitl_request_id!, { decision: "approve", operatorId: "alice", comment: "ok" });
  // A modify answer names its successor call: the entry's `successor` object.
  const modified = await engine.register({ agent_id: "bot", config: hitlConfig });
  const h2 = await engine.evaluate({
    session_id: modified.session_id,
    tool_name: "pay",
    params: { to: "c" },
    nonce: 1,
  });
  await engine.answerHitl(h2.hitl_request_id!, {
    decision: "modify",
    operatorId: "bob",
    params: { to: "d" },
  });
  const unanswered = await engine.register({ agent_id: "bot", config: hitlConfig });
  await engine.evaluate({
    session_id: unanswered.session_id,
    tool_name: "pay",
    params: { to: "b" },
    nonce: 1,
  });
  clock.advanceMs(61_000);
  await engine.expireHitl();

  clock.advanceMs(120_000);
  await engine.markStale(sid, { staleAfterNs: 1, heartbeatIntervalMs: 1000, missedHeartbeats: 3 });
  await engine.heartbeat(sid);
  await engine.createGuard({ guard_id: "team", limit_usd: 10 });
  const next = generateKeyPair();
  await engine.rotateKey(next.signer, "alice");
  await engine.close();
  await judgedByPolicy(store.substrate, next.signer, clock);

  const replay = await replayChain(await readChain(store.substrate), {
    params: storedParams(store.substrate),
  });
  await store.sql("UPDATE leash_sessions SET call_count = 99 WHERE session_id = ?", [sid]);
  const differences = await compareSnapshots(store.substrate, replay.projection);
  await repairSnapshots(store.substrate, replay, differences, next.signer, clock.nowNs());
  // An operator accepting a store behind its last checkpoint (a restored backup).
  const head = await store.substrate.transaction((tx) => tx.chain.head());
  await recordRollbackAccepted(
    store.substrate,
    {
      kind: "behind",
      store_head: head,
      checkpoint: { count: head!.seq + 5, head_hash: "ab".repeat(32) },
      store_hash_at_checkpoint: null,
    },
    { signer: next.signer, operatorId: "alice", nowNs: clock.nowNs() },
  );
  return readChain(store.substrate);
}

describe("the writers' entries against the chain event schemas", () => {
  it("every kind is written, and every entry matches its kind's current version", async () => {
    const entries = await everyKind();
    const kinds = new Set(entries.map((e) => e.kind));
    expect([...kinds].sort()).toEqual([...WRITTEN_KINDS].sort());
    for (const entry of entries) {
      const { kind, data } = JSON.parse(entry.body) as {
        kind: ChainEventKind;
        data: Record<string, unknown>;
      };
      expect({ seq: entry.seq, kind, problem: checkEventData(kind, data) }).toEqual({
        seq: entry.seq,
        kind,
        problem: null,
      });
      expect({ seq: entry.seq, kind, version: eventVersionOf(kind, data) }).toEqual({
        seq: entry.seq,
        kind,
        version: EVENT_SCHEMAS[kind][0].version,
      });
    }
    // The optional fields were written too, so their schema entries are checked, not just allowed.
    const fields = new Set(
      entries.flatMap((e) => {
        const data = JSON.parse(e.body).data as Record<string, unknown>;
        const nested = (f: string) => {
          const v = data[f];
          return typeof v === "object" && v !== null ? Object.keys(v).map((g) => `${f}.${g}`) : [];
        };
        return Object.keys(data)
          .flatMap((f) => [f, ...nested(f)])
          .map((f) => `${e.kind}.${f}`);
      }),
    );
    for (const field of [
      "decision.rng",
      "decision.previous_error",
      "decision.expected_params_hash",
      "decision.input_problem",
      "decision.hitl_request_id",
      "decision.hold_ttl_ns",
      "decision.params_blob",
      "decision.params_bytes",
      "post_exec.error_message",
      "hitl_decision.comment",
      "hitl_decision.successor.nonce",
      "key_rotation.operator_id",
      "decision.policy_hash",
      "decision.policy.rule",
      "decision.policy.monitor",
      "decision.policy.counted",
      "decision.policy.approved",
    ]) {
      expect(fields).toContain(field);
    }
    // Each shape of the policy record was written: refused before the policy (null), a rule's DENY and
    // HITL, a human's approval standing, a monitor's would-be verdict, a rate limit's counter update.
    const judged = entries
      .filter((e) => e.kind === "decision")
      .map((e) => JSON.parse(e.body).data.policy as PolicyJudgement | null | undefined)
      .filter((p) => p !== undefined);
    expect(judged).toContain(null);
    const records = judged.filter((p) => p !== null);
    // A record without a verdict is a default ALLOW that only counted.
    expect(new Set(records.map((p) => p.verdict ?? "ALLOW"))).toEqual(new Set(["ALLOW", "DENY", "HITL"]));
    expect(records.some((p) => p.approved === true)).toBe(true);
    expect(records.some((p) => (p.monitor?.length ?? 0) > 0)).toBe(true);
    expect(records.some((p) => (p.counted?.length ?? 0) > 0 && p.verdict === undefined)).toBe(true);
    // Closed, and both fields or neither: an extra field in the record, or the record alone, is refused.
    const decision = entries
      .map((e) => JSON.parse(e.body) as { kind: string; data: Record<string, unknown> })
      .find((b) => b.kind === "decision" && b.data.policy !== undefined && b.data.policy !== null)!.data;
    const extra = { ...decision, policy: { ...(decision.policy as object), note: "x" } };
    expect(checkEventData("decision", extra)).toMatchObject({ version: 3, pointer: "/data/policy/note" });
    const { policy_hash: _, ...unnamed } = decision;
    expect(checkEventData("decision", unnamed)).toMatchObject({ pointer: "/data/policy_hash" });
  });

  it("an entry with an extra, a missing or a retyped field is refused, naming the field", () => {
    const data = {
      session_id: "s",
      call_number: 1,
      reservation_id: "s#1",
      charged_usd: "0.5",
      budget_after_usd: "4.5",
    };
    expect(checkEventData("settled_by_expiry", data)).toBeNull();
    expect(checkEventData("settled_by_expiry", { ...data, note: "x" })).toMatchObject({
      version: 1,
      pointer: "/data/note",
    });
    const { charged_usd: _, ...missing } = data;
    expect(checkEventData("settled_by_expiry", missing)).toMatchObject({ pointer: "/data/charged_usd" });
    expect(checkEventData("settled_by_expiry", { ...data, charged_usd: 0.5 })).toMatchObject({
      pointer: "/data/charged_usd",
    });
    expect(checkEventData("a_note", {})).toMatchObject({ version: null, pointer: "/kind" });
  });

  it("older shapes match their kind's earlier version; a current decision with an extra field does not", () => {
    // replay_inputs 1: a copy of the state, rng and operator_id null (before replay inputs version 2).
    const v1 = {
      session_id: "s",
      agent_id: "bot",
      call_number: 1,
      tool_name: "t",
      verdict: "ALLOW",
      reason: "within_thresholds",
      rng: null,
      operator_id: null,
      state: { call_count: 0 },
      replay_inputs: 1,
    };
    expect(eventVersionOf("decision", v1)).toBe(1);
    expect(eventVersionOf("decision", { ...v1, replay_inputs: undefined })).toBe(1);
    expect(checkEventData("decision", { ...v1, verdict: "MAYBE" })).toMatchObject({
      version: 1,
      pointer: "/data/verdict",
    });
    expect(checkEventData("decision", { ...v1, replay_inputs: 2 })).toMatchObject({ version: 2 });
    // A post_exec from before the settlement fields (late, hold_status, over_limit_usd, idempotency_key).
    const postExec = {
      session_id: "s",
      call_number: 1,
      reservation_id: "s#1",
      estimated_usd: "0.5",
      actual_usd: "0.25",
      overrun_usd: "0",
      success: true,
      budget_after_usd: "4.75",
    };
    expect(eventVersionOf("post_exec", postExec)).toBe(1);
    expect(checkEventData("post_exec", { ...postExec, actual_usd: 0.25 })).toMatchObject({
      pointer: "/data/actual_usd",
    });
    expect(eventVersionOf("reservation_expired", { reservation_id: "s#1", released_usd: "0.4" })).toBe(1);
  });
});
