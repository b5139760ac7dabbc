// replayChain() on chains real engines wrote: every verdict re-derived, and a signed entry that lies
// (a verdict, a budget figure or a state that does not follow) is found at its index.
import { appendEntry, generateKeyPair, parseEntryBody } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { compareSnapshots, replayChain } from "../src/index.js";
import { KINDS, type Kind, manualClock, openStore, type TestStore } from "./support.js";
import { runWorkload, seededRandom, workloadEngine } from "./workload.js";

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

const readChain = (substrate: Substrate): Promise<ChainEntryRecord[]> =>
  substrate.transaction((tx) => tx.chain.range(0, 1_000_000));

describe.each(KINDS)("replayChain on %s", (kind: Kind) => {
  it("re-derives every verdict, budget and state of a varied workload", async () => {
    store = await openStore(kind);
    const clock = manualClock();
    const key = generateKeyPair();
    const engine = workloadEngine(store.substrate, clock, key.signer);
    await runWorkload(engine, clock, seededRandom(1), 300);
    const next = generateKeyPair();
    await engine.rotateKey(next.signer, "op");
    await runWorkload(engine, clock, seededRandom(2), 40);
    const entries = await readChain(store.substrate);
    const result = await replayChain(entries);
    expect(result.mismatch).toBeNull();
    expect(result.ok).toBe(true);
    expect(result.count).toBe(entries.length);
    expect(result.proved_from).toBe(0);
    expect(result.verdicts_checked).toBe(entries.filter((e) => e.kind === "decision").length);
    // The workload reached the kinds replay must fold, and verdicts of every sort.
    for (const k of [
      "session_registered",
      "decision",
      "post_exec",
      "hitl_decision",
      "hitl_request",
      "hitl_expired",
      "circuit_reset",
      "settled_by_expiry",
      "session_stale",
      "session_revived",
      "guard_created",
      "key_rotation",
    ]) {
      expect(result.kinds[k] ?? 0, k).toBeGreaterThan(0);
    }
    const verdicts = new Set(
      entries
        .filter((e) => e.kind === "decision")
        .map((e) => (parseEntryBody(e.body) as { data: { verdict: string } }).data.verdict),
    );
    expect([...verdicts].sort()).toEqual(["ALLOW", "DENY", "HITL"]);
    // The engine's own HITL outcomes were re-derived too: an expired request's next attempt, and a
    // used approval's re-dispatch (shown to decide() as consumed).
    const reasons = new Set(
      entries
        .filter((e) => e.kind === "decision")
        .map((e) => (parseEntryBody(e.body) as { data: { reason: string } }).data.reason),
    );
    expect(reasons).toContain("hitl_timeout");
  }, 30_000);
});

describe.each(KINDS)("replayChain over a human's answers on %s", (kind: Kind) => {
  it("re-derives approve, a used approval's re-dispatch, modify and an expiry, and the tables agree", async () => {
    store = await openStore(kind);
    const clock = manualClock();
    const engine = workloadEngine(store.substrate, clock);
    const { session_id } = await engine.register({
      agent_id: "reviewed",
      config: { hitl_mode: "always", hitl_timeout_s: 60 },
    });
    const call = (nonce: string, params: Record<string, unknown> = { q: "a" }) =>
      engine.evaluate({ session_id, tool_name: "pay", params, nonce });
    const reasons: string[] = [];
    const paused = await call("1");
    await engine.answerHitl(paused.hitl_request_id!, { decision: "approve", operatorId: "op" });
    reasons.push((await call("1")).reason, (await call("1")).reason);
    await engine.reset(session_id, "op"); // the duplicate's DENY tripped the circuit
    const second = await call("2", { q: "b" });
    const modified = await engine.answerHitl(second.hitl_request_id!, {
      decision: "modify",
      operatorId: "op",
      params: { q: "c" },
    });
    reasons.push((await call(String(modified.successor?.nonce), { q: "c" })).reason);
    await call("3", { q: "d" });
    clock.advanceMs(61_000);
    reasons.push((await call("3", { q: "d" })).reason);
    expect(reasons).toEqual([
      "hitl_transition:approve",
      "policy_violation:duplicate_resume_no_effect",
      "hitl_transition:modify_successor",
      "hitl_timeout",
    ]);
    const entries = await readChain(store.substrate);
    const result = await replayChain(entries);
    expect(result.mismatch).toBeNull();
    expect(result.verdicts_checked).toBe(entries.filter((e) => e.kind === "decision").length);
    expect(result.kinds.hitl_expired).toBe(1);
    expect(await compareSnapshots(store.substrate, (await replayChain(entries)).projection)).toEqual([]);
  }, 30_000);
});

describe("replayChain finds the entry that does not follow", () => {
  async function chainWithLie(mutate: (data: Record<string, unknown>) => void) {
    store = await openStore("memory");
    const clock = manualClock();
    const key = generateKeyPair();
    const engine = workloadEngine(store.substrate, clock, key.signer);
    const s = await engine.register({ agent_id: "a", config: { budget_usd: 1, max_repeat_calls: 2 } });
    for (let i = 0; i < 3; i++) {
      await engine.evaluate({
        session_id: s.session_id,
        tool_name: "t",
        params: { i },
        nonce: `n${i}`,
        estimated_cost_usd: 0.1,
      });
    }
    const honest = await readChain(store.substrate);
    const last = parseEntryBody(honest[honest.length - 1]!.body) as { data: Record<string, unknown> };
    const data = structuredClone(last.data);
    data.call_number = (data.call_number as number) + 1;
    data.nonce = "n9";
    mutate(data);
    // Signed with the key in force: the signature and the links verify, only the content lies.
    await store.substrate.transaction((tx) =>
      appendEntry(tx, {
        kind: "decision",
        data: data as never,
        signer: key.signer,
        nowNs: clock.nowNs() + 1,
      }),
    );
    return { entries: await readChain(store.substrate), index: honest.length, session: s.session_id };
  }

  it("a verdict decide() would not give", async () => {
    const { entries, index, session } = await chainWithLie((d) => {
      d.verdict = "ALLOW";
      d.reason = "within_thresholds";
    });
    const result = await replayChain(entries);
    expect(result.ok).toBe(false);
    // The entry carries no copy of the state (replay inputs 2): what fails is the outcome it claims
    // (here the ALLOW's hold, which the fold places under this call's own number).
    expect(result.mismatch).toMatchObject({ index, session_id: session, field: "reservation_id" });
  });

  it("a state copy (replay inputs 1) that is not the folded state", async () => {
    const { entries, index, session } = await chainWithLie((d) => {
      d.replay_inputs = 1;
      d.state = { circuit_tripped: false, total_calls: 0 };
    });
    const result = await replayChain(entries);
    expect(result.ok).toBe(false);
    expect(result.mismatch).toMatchObject({ index, session_id: session, field: "state" });
  });

  it("a budget figure the ledger does not give", async () => {
    store = await openStore("memory");
    const clock = manualClock();
    const key = generateKeyPair();
    const engine = workloadEngine(store.substrate, clock, key.signer);
    const s = await engine.register({ agent_id: "a", config: { budget_usd: 1 } });
    await engine.evaluate({
      session_id: s.session_id,
      tool_name: "t",
      params: {},
      nonce: "a",
      estimated_cost_usd: 0.1,
    });
    const honest = await readChain(store.substrate);
    const body = parseEntryBody(honest[1]!.body) as { data: Record<string, unknown> };
    const data = {
      ...structuredClone(body.data),
      call_number: 2,
      nonce: "b",
      budget_after_usd: "0.95",
      reservation_id: `${s.session_id}#2`,
    };
    await store.substrate.transaction((tx) =>
      appendEntry(tx, {
        kind: "decision",
        data: data as never,
        signer: key.signer,
        nowNs: clock.nowNs() + 1,
      }),
    );
    const result = await replayChain(await readChain(store.substrate));
    expect(result.ok).toBe(false);
    expect(result.mismatch?.index).toBe(2);
    expect(result.mismatch?.session_id).toBe(s.session_id);
    expect(["budget_before_usd", "budget_after_usd"]).toContain(result.mismatch?.field);
    expect(result.mismatch?.expected).not.toEqual(result.mismatch?.recorded);
  });

  it("a DENY where decide() allows", async () => {
    store = await openStore("memory");
    const clock = manualClock();
    const key = generateKeyPair();
    const engine = workloadEngine(store.substrate, clock, key.signer);
    const s = await engine.register({ agent_id: "a", config: {} });
    await engine.evaluate({ session_id: s.session_id, tool_name: "t", params: { a: 1 }, nonce: "a" });
    const honest = await readChain(store.substrate);
    const tampered = honest.slice(0, 1);
    // Re-sign entry 1 with its verdict flipped: a forger holding the key.
    const body = parseEntryBody(honest[1]!.body) as { data: Record<string, unknown> };
    const mem = await openStore("memory");
    try {
      await mem.substrate.transaction((tx) => tx.chain.append(honest[0]!));
      await mem.substrate.transaction((tx) =>
        appendEntry(tx, {
          kind: "decision",
          data: { ...body.data, verdict: "DENY", reason: "circuit_open" } as never,
          signer: key.signer,
          nowNs: clock.nowNs(),
          chainId: (parseEntryBody(honest[0]!.body) as { chain_id: string }).chain_id,
        }),
      );
      tampered.push(...(await readChain(mem.substrate)).slice(1));
    } finally {
      await mem.close();
    }
    const result = await replayChain(tampered);
    expect(result.mismatch).toMatchObject({
      index: 1,
      field: "verdict",
      expected: "ALLOW",
      recorded: "DENY",
    });
  });
});

describe.each(KINDS)("replayChain over denied_tools on %s", (kind: Kind) => {
  it("re-derives a denied tool's DENY (no circuit trip) and finds an ALLOW of a denied tool", async () => {
    store = await openStore(kind);
    const clock = manualClock();
    const key = generateKeyPair();
    const engine = workloadEngine(store.substrate, clock, key.signer);
    const { session_id } = await engine.register({
      agent_id: "a",
      config: { max_repeat_calls: 3, denied_tools: ["rm"] },
    });
    const reasons: string[] = [];
    for (const [tool, nonce] of [
      ["rm", "1"],
      ["ls", "2"],
      ["rm", "3"],
      ["ls", "4"],
    ] as const) {
      reasons.push((await engine.evaluate({ session_id, tool_name: tool, params: { p: 1 }, nonce })).reason);
    }
    expect(reasons).toEqual([
      "policy_violation:tool_denied",
      "within_thresholds",
      "policy_violation:tool_denied",
      "within_thresholds",
    ]);
    const honest = await readChain(store.substrate);
    const result = await replayChain(honest);
    expect(result.mismatch).toBeNull();
    expect(result.verdicts_checked).toBe(4);
    expect(await compareSnapshots(store.substrate, result.projection)).toEqual([]);

    // Entry 1 (the first rm) re-signed as an ALLOW: replay derives the denial and names the entry.
    const body = parseEntryBody(honest[1]!.body) as { data: Record<string, unknown> };
    const mem = await openStore("memory");
    const tampered = honest.slice(0, 1);
    try {
      await mem.substrate.transaction((tx) => tx.chain.append(honest[0]!));
      await mem.substrate.transaction((tx) =>
        appendEntry(tx, {
          kind: "decision",
          data: { ...body.data, verdict: "ALLOW", reason: "within_thresholds" } as never,
          signer: key.signer,
          nowNs: clock.nowNs(),
          chainId: (parseEntryBody(honest[0]!.body) as { chain_id: string }).chain_id,
        }),
      );
      tampered.push(...(await readChain(mem.substrate)).slice(1));
    } finally {
      await mem.close();
    }
    expect((await replayChain(tampered)).mismatch).toMatchObject({
      index: 1,
      field: "verdict",
      expected: "DENY",
      recorded: "ALLOW",
    });
  }, 30_000);
});
