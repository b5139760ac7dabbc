// The engine's behaviour, run identically on the memory, SQLite and PostgreSQL substrates.
import { generateKeyPair, verifyChain } from "@leash/chain";
import { type ChainEntryRecord, canonicalHash, type Substrate } from "@leash/core";
import { verifyReceipt } from "@leash/receipts";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, guard, LeashDenied, LeashError, LeashHitl } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();

async function readChain(substrate: Substrate): Promise<ChainEntryRecord[]> {
  return substrate.transaction(async (tx) => tx.chain.range(0, 1_000_000));
}

function fixedClock(start = 1_700_000_000_000_000_000) {
  let now = start;
  return { nowNs: () => now, advance: (ns: number) => (now += ns) };
}

describe.each(KINDS)("engine on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });
  const setup = async (opts: { reservationTtlMs?: number } = {}) => {
    store = await openStore(kind);
    const clock = fixedClock();
    const engine = createEngine({
      substrate: store.substrate,
      signer: KEY.signer,
      clock,
      rng: () => 0.5,
      ...opts,
    });
    return { engine, clock };
  };

  it("allows, counts and settles a call within budget", async () => {
    const { engine } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const r = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "search",
      params: { q: "x" },
      nonce: "n1",
      estimated_cost_usd: 0.25,
    });
    expect([r.verdict, r.reason, r.call_number, r.budget_remaining_usd]).toEqual([
      "ALLOW",
      "within_thresholds",
      1,
      "0.75",
    ]);
    expect(r.params_hash).toBe(canonicalHash({ q: "x" }));
    // The stored state carries the ledger's remaining too (the number a later decide() is shown).
    expect((await engine.getSession(s.session_id)).state.budget_remaining_usd).toBe(0.75);
    const p = await engine.postExec({ session_id: s.session_id, call_number: 1, actual_cost_usd: 0.1 });
    expect(p.budget_remaining_usd).toBe("0.9");
    const again = await engine.postExec({ session_id: s.session_id, call_number: 1, actual_cost_usd: 0.1 });
    expect(again.replayed).toBe(true);
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe("0.9");
  });

  it("denies a replayed nonce and trips the circuit, changing nothing else", async () => {
    const { engine } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    await engine.evaluate({ session_id: s.session_id, tool_name: "t", nonce: 7, estimated_cost_usd: 0.1 });
    const before = await engine.getSession(s.session_id);
    const r = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "t",
      nonce: 7,
      estimated_cost_usd: 0.1,
    });
    expect(r.reason).toBe("policy_violation:duplicate_nonce");
    const after = await engine.getSession(s.session_id);
    expect(after.budget_remaining_usd).toBe(before.budget_remaining_usd);
    expect(after.state.total_calls).toBe(before.state.total_calls);
    expect(after.state.circuit_tripped).toBe(true);
    expect((await engine.evaluate({ session_id: s.session_id, tool_name: "t", nonce: 8 })).reason).toBe(
      "circuit_open",
    );
    await engine.reset(s.session_id, "ops@example.com");
    expect(
      (await engine.evaluate({ session_id: s.session_id, tool_name: "t", nonce: 9, estimated_cost_usd: 0.1 }))
        .verdict,
    ).toBe("ALLOW");
  });

  it("computes repeat counts itself and stops a retry loop (error amplification)", async () => {
    const { engine } = await setup();
    const s = await engine.register({
      agent_id: "bot",
      config: { max_repeat_calls: 3, error_amplification: true },
    });
    const reasons: string[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await engine.evaluate({
        session_id: s.session_id,
        tool_name: "crm",
        params: { last_error: "401 Unauthorized" },
        nonce: i,
      });
      reasons.push(r.reason);
    }
    expect(reasons).toEqual([
      "within_thresholds",
      "within_thresholds",
      "error_amplified_repeat",
      "circuit_open",
    ]);
  });

  it("amplifies on the error the previous result reported (previous_error) and records it", async () => {
    const { engine } = await setup();
    const s = await engine.register({
      agent_id: "bot",
      config: { max_repeat_calls: 3, error_amplification: true },
    });
    const reasons: string[] = [];
    let previous: string | undefined;
    for (let i = 0; i < 4; i++) {
      const r = await engine.evaluate({
        session_id: s.session_id,
        tool_name: "crm",
        params: { id: 7 }, // the retried arguments carry no signal; the failed result did
        nonce: i,
        ...(previous === undefined ? {} : { previous_error: previous }),
      });
      reasons.push(r.reason);
      if (r.verdict === "ALLOW") {
        await engine.postExec({
          session_id: s.session_id,
          call_number: r.call_number,
          actual_cost_usd: 0,
          success: false,
          error_message: "HTTP 401 Unauthorized",
        });
        previous = "HTTP 401 Unauthorized";
      }
    }
    expect(reasons).toEqual([
      "within_thresholds",
      "within_thresholds",
      "error_amplified_repeat",
      "circuit_open",
    ]);
    const decisions = (await readChain(store!.substrate))
      .map((e) => JSON.parse(e.body) as { kind: string; data: Record<string, unknown> })
      .filter((e) => e.kind === "decision");
    expect(decisions[0]?.data.previous_error).toBeUndefined();
    expect(decisions[2]?.data.previous_error).toBe("HTTP 401 Unauthorized");
  });

  it("records a failed settlement's error message in its post_exec entry", async () => {
    const { engine } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const r = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "t",
      nonce: 1,
      estimated_cost_usd: 0.1,
    });
    await engine.postExec({
      session_id: s.session_id,
      call_number: r.call_number,
      actual_cost_usd: 0.05,
      success: false,
      error_message: "x".repeat(5000),
    });
    const post = (await readChain(store!.substrate))
      .map((e) => JSON.parse(e.body) as { kind: string; data: Record<string, unknown> })
      .find((e) => e.kind === "post_exec");
    expect(post?.data.success).toBe(false);
    expect(post?.data.error_message).toBe("x".repeat(1024));
  });

  it("exhausts $1 exactly at call 1,000 of $0.001", async () => {
    const { engine } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    let allowed = 0;
    let last = "";
    for (let i = 0; i < 1001; i++) {
      const r = await engine.evaluate({
        session_id: s.session_id,
        tool_name: `t${i % 2}`,
        params: { i },
        nonce: i,
        estimated_cost_usd: 0.001,
      });
      if (r.verdict === "ALLOW") {
        allowed++;
        await engine.postExec({
          session_id: s.session_id,
          call_number: r.call_number,
          actual_cost_usd: 0.001,
        });
      }
      last = r.reason;
    }
    expect(allowed).toBe(1000);
    expect(last).toBe("budget_exhausted");
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe("0");
  }, 60_000);

  it("records an actual cost above the estimate truthfully and leaves remaining at zero", async () => {
    const { engine } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const r = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "llm",
      nonce: 1,
      estimated_cost_usd: 0.5,
    });
    const p = await engine.postExec({
      session_id: s.session_id,
      call_number: r.call_number,
      actual_cost_usd: 1.75,
    });
    expect([p.overrun_usd, p.budget_remaining_usd]).toEqual(["1.25", "0"]);
    expect((await engine.evaluate({ session_id: s.session_id, tool_name: "llm", nonce: 2 })).reason).toBe(
      "budget_exhausted",
    );
  });

  it("shares an agent-scoped budget between sessions of one agent", async () => {
    const { engine } = await setup();
    const config = { budget_usd: 1, budget_scope: "agent" as const };
    const a = await engine.register({ agent_id: "bot", config });
    const b = await engine.register({ agent_id: "bot", config });
    expect(
      (
        await engine.evaluate({
          session_id: a.session_id,
          tool_name: "t",
          nonce: 1,
          estimated_cost_usd: 0.75,
        })
      ).verdict,
    ).toBe("ALLOW");
    expect(
      (await engine.evaluate({ session_id: b.session_id, tool_name: "t", nonce: 1, estimated_cost_usd: 0.5 }))
        .reason,
    ).toBe("budget_overrun");
  });

  it("carves a session budget from a parent guard; the child never outspends the parent", async () => {
    const { engine } = await setup();
    await engine.createGuard({ guard_id: "team", limit_usd: 1 });
    const a = await engine.register({ agent_id: "a", config: { budget_usd: 0.8, parent_guard_id: "team" } });
    const b = await engine.register({ agent_id: "b", config: { budget_usd: 0.8, parent_guard_id: "team" } });
    expect(
      (await engine.evaluate({ session_id: a.session_id, tool_name: "t", nonce: 1, estimated_cost_usd: 0.6 }))
        .verdict,
    ).toBe("ALLOW");
    const r = await engine.evaluate({
      session_id: b.session_id,
      tool_name: "t",
      nonce: 1,
      estimated_cost_usd: 0.6,
    });
    expect([r.verdict, r.reason, r.budget_remaining_usd]).toEqual(["DENY", "budget_overrun", "0.4"]);
  });

  it("pauses for a human and releases exactly the approved call once", async () => {
    const { engine } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { hitl_mode: "always" } });
    const params = { amount: 100, to: "acct_1" };
    const h = await engine.evaluate({ session_id: s.session_id, tool_name: "wire", params, nonce: "w1" });
    expect([h.verdict, h.reason]).toEqual(["HITL", "hitl_all_calls"]);
    expect((await engine.getSession(s.session_id)).status).toBe("PAUSED");
    await engine.resume({ session_id: s.session_id, decision: "approve", operator_id: "alice" });
    const evil = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "wire",
      params: { ...params, to: "attacker" },
      nonce: "w1",
    });
    expect(evil.reason).toBe("hitl_transition:digest_mismatch");
  });

  it("an approval is single use", async () => {
    const { engine } = await setup();
    const s = await engine.register({
      agent_id: "bot",
      config: { hitl_mode: "on_threshold", hitl_budget_threshold: 0.5, budget_usd: 10 },
    });
    await engine.evaluate({
      session_id: s.session_id,
      tool_name: "buy",
      nonce: "seed",
      estimated_cost_usd: 6,
    });
    const h = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "buy",
      params: { sku: 1 },
      nonce: "b1",
      estimated_cost_usd: 1,
    });
    expect(h.reason).toBe("budget_threshold");
    await engine.resume({ session_id: s.session_id, decision: "approve", operator_id: "alice" });
    const ok = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "buy",
      params: { sku: 1 },
      nonce: "b1",
      estimated_cost_usd: 1,
    });
    expect([ok.verdict, ok.reason]).toEqual(["ALLOW", "hitl_transition:approve"]);
    const replay = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "buy",
      params: { sku: 1 },
      nonce: "b1",
      estimated_cost_usd: 1,
    });
    // The used approval is shown to decide() as consumed: rule 3 names the replay of a resume (spec §3.6).
    expect(replay.reason).toBe("policy_violation:duplicate_resume_no_effect");
  });

  it("expires a hold whose agent never reported back, keeping its estimate spent", async () => {
    const { engine, clock } = await setup({ reservationTtlMs: 1000 });
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    await engine.evaluate({ session_id: s.session_id, tool_name: "t", nonce: 1, estimated_cost_usd: 0.6 });
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe("0.4");
    expect(await engine.expireReservations()).toBe(0);
    clock.advance(2e9);
    expect(await engine.expireReservations()).toBe(1);
    // The ALLOWed call may have run: silence gives nothing back.
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe("0.4");
  });

  it("guard() runs the tool only on ALLOW and settles its cost", async () => {
    const { engine } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1, max_repeat_calls: 2 } });
    let runs = 0;
    const search = guard(
      engine,
      { session_id: s.session_id, tool_name: "search", estimate: 0.2, cost: () => 0.1 },
      async (args: { q: string }) => {
        runs++;
        return `results for ${args.q}`;
      },
    );
    expect(await search({ q: "a" })).toBe("results for a");
    expect(await search({ q: "a" })).toBe("results for a");
    const err = await search({ q: "a" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LeashDenied);
    expect((err as LeashDenied).reason).toBe("max_repeat_exceeded");
    expect(runs).toBe(2);
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe("0.8");
    const s2 = await engine.register({ agent_id: "bot", config: { hitl_mode: "always" } });
    const pay = guard(
      engine,
      { session_id: s2.session_id, tool_name: "pay", wait: false },
      async () => runs++,
    );
    await expect(pay()).rejects.toBeInstanceOf(LeashHitl);
    expect(runs).toBe(2);
  });

  it("rejects unknown sessions and invalid configs with clear errors", async () => {
    const { engine } = await setup();
    await expect(engine.evaluate({ session_id: "nope", tool_name: "t" })).rejects.toMatchObject({
      code: "session_not_found",
    });
    const bad = await engine
      .register({ agent_id: "bot", config: { budget_usd: "ten" as unknown as number } })
      .catch((e: unknown) => e);
    expect(LeashError.isInstance(bad) && bad.code).toBe("config_invalid");
    expect((bad as Error).message).toContain("/config/budget_usd");
  });

  it("never overspends under 40 concurrent calls from two handles", async () => {
    const { engine } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1, budget_scope: "agent" } });
    const other = createEngine({
      substrate: await store!.another(),
      signer: KEY.signer,
      clock: fixedClock(),
      rng: () => 0.5,
    });
    const s2 = await other.register({ agent_id: "bot", config: { budget_usd: 1, budget_scope: "agent" } });
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        (i % 2 ? other : engine).evaluate({
          session_id: i % 2 ? s2.session_id : s.session_id,
          tool_name: `t${i}`,
          nonce: i,
          estimated_cost_usd: 0.1,
        }),
      ),
    );
    expect(results.filter((r) => r.verdict === "ALLOW")).toHaveLength(10);
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe("0");
  });

  it("signs every state change into one hash chain that verifies, with a receipt per decision", async () => {
    const { engine, clock } = await setup({ reservationTtlMs: 1000 });
    const s = await engine.register({
      agent_id: "bot",
      config: { budget_usd: 1, hitl_mode: "on_threshold", hitl_budget_threshold: 0.5 },
    });
    const a = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "t",
      params: { x: 1 },
      nonce: 1,
      estimated_cost_usd: 0.6,
    });
    await engine.postExec({ session_id: s.session_id, call_number: a.call_number, actual_cost_usd: 0.6 });
    const h = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "t",
      params: { x: 2 },
      nonce: 2,
      estimated_cost_usd: 0.1,
    });
    expect(h.verdict).toBe("HITL");
    await engine.resume({ session_id: s.session_id, decision: "reject", operator_id: "alice" });
    const denied = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "t",
      params: { x: 2 },
      nonce: 2,
      estimated_cost_usd: 0.1,
    });
    expect(denied.reason).toBe("hitl_transition:reject");
    await engine.reset(s.session_id, "bob");
    const after = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "u",
      nonce: 3,
      estimated_cost_usd: 0.1,
    });
    expect(after.reason).toBe("budget_threshold"); // the reset cleared the rejection, not the policy
    const s2 = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const held = await engine.evaluate({
      session_id: s2.session_id,
      tool_name: "u",
      nonce: 3,
      estimated_cost_usd: 0.1,
    });
    clock.advance(2e9);
    expect(await engine.expireReservations()).toBe(1);

    const entries = await readChain(store!.substrate);
    expect(entries.map((e) => e.kind)).toEqual([
      "session_registered",
      "decision",
      "post_exec",
      "decision",
      "hitl_request",
      "hitl_decision",
      "decision",
      "circuit_reset",
      "decision",
      "hitl_request",
      "session_registered",
      "decision",
      "settled_by_expiry",
    ]);
    expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i));
    const verified = await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] });
    expect(verified.ok).toBe(true);
    const noble = await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex], verifier: "noble" });
    expect(noble.ok).toBe(true);

    // The decision entry carries the inputs and the outcome, not a copy of the state decide() saw:
    // replay folds that state from the entries before it.
    const body = JSON.parse(entries[3]!.body);
    expect(body.data).toMatchObject({
      verdict: "HITL",
      reason: "budget_threshold",
      call_number: 2,
      budget_before_usd: "0.4",
      session_id: s.session_id,
    });
    expect(body.data.state).toBeUndefined();
    expect(body.data.replay_inputs).toBe(3);

    // Every decision's receipt verifies offline and names its chain position.
    for (const r of [a, h, denied, after, held]) {
      const v = await verifyReceipt(r.receipt, KEY.signer.publicKeyHex);
      expect(v.ok && [v.seq, v.entry_hash]).toEqual([r.entry_seq, r.entry_hash]);
    }
    const other = generateKeyPair();
    expect((await verifyReceipt(a.receipt, other.signer.publicKeyHex)).ok).toBe(false);

    // Every entry is queued for relay in the transaction that wrote it.
    const outbox = await store!.substrate.transaction((tx) => tx.outbox.list({}));
    expect(outbox.map((o) => o.seq)).toEqual(entries.map((e) => e.seq));
  });

  it("a rolled-back evaluate leaves no chain entry; key rotation is followed by verify", async () => {
    const { engine } = await setup();
    const s = await engine.register({ agent_id: "bot", config: {} });
    await expect(engine.evaluate({ session_id: "missing", tool_name: "t" })).rejects.toMatchObject({
      code: "session_not_found",
    });
    const next = generateKeyPair();
    await engine.rotateKey(next.signer, "ops");
    expect(engine.publicKeyHex).toBe(next.signer.publicKeyHex);
    const r = await engine.evaluate({ session_id: s.session_id, tool_name: "t", nonce: 1 });
    expect((await verifyReceipt(r.receipt, next.signer.publicKeyHex)).ok).toBe(true);
    const entries = await readChain(store!.substrate);
    expect(entries.map((e) => e.kind)).toEqual(["session_registered", "key_rotation", "decision"]);
    expect((await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] })).ok).toBe(true);
    const forged = await verifyChain(entries, { publicKeys: [next.signer.publicKeyHex] });
    expect(forged.ok).toBe(false);
  });

  it("an engine whose key was rotated away by another process refuses to sign", async () => {
    const { engine } = await setup();
    const s = await engine.register({ agent_id: "bot", config: {} });
    const stale = createEngine({
      substrate: await store!.another(),
      signer: KEY.signer,
      clock: fixedClock(),
      rng: () => 0.5,
    });
    expect((await stale.evaluate({ session_id: s.session_id, tool_name: "t", nonce: 1 })).verdict).toBe(
      "ALLOW",
    );
    const next = generateKeyPair();
    await engine.rotateKey(next.signer, "ops");
    await expect(
      stale.evaluate({ session_id: s.session_id, tool_name: "t", nonce: 2 }),
    ).rejects.toMatchObject({ code: "key_not_in_force" });
    expect((await engine.evaluate({ session_id: s.session_id, tool_name: "t", nonce: 2 })).verdict).toBe(
      "ALLOW",
    );
    const entries = await readChain(store!.substrate);
    expect((await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] })).ok).toBe(true);
  });

  it("marks a silent session STALE and a heartbeat revives it, both in the chain", async () => {
    const { engine, clock } = await setup();
    const s = await engine.register({ agent_id: "bot", config: {} });
    const staleAfterNs = 90e9;
    expect(await engine.markStale(s.session_id, { staleAfterNs })).toBeNull();
    clock.advance(91e9);
    const marked = await engine.markStale(s.session_id, {
      staleAfterNs,
      heartbeatIntervalMs: 30_000,
      missedHeartbeats: 3,
    });
    expect(marked?.entry_seq).toBeGreaterThan(0);
    expect((await engine.getSession(s.session_id)).status).toBe("STALE");
    expect(await engine.markStale(s.session_id, { staleAfterNs })).toBeNull();
    await engine.heartbeat(s.session_id);
    expect((await engine.getSession(s.session_id)).status).toBe("ACTIVE");
    const kinds = (await readChain(store!.substrate)).map((e) => e.kind);
    expect(kinds).toEqual(["session_registered", "session_stale", "session_revived"]);
  });
});

describe("a shared COMMIT that fails (group commit)", () => {
  it("does not leave the engine naming the chain of a genesis that was rolled back", async () => {
    const store = await openStore("memory");
    try {
      const inner = store.substrate;
      // Runs the next two transactions in one inner transaction, as a group commit would, then
      // fails that COMMIT: both are rolled back, the genesis the first one wrote included.
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
      const engine = createEngine({ substrate: batching, signer: KEY.signer });
      await engine.open(); // its reads of the (empty) chain are not part of the batch
      batch = [];
      const lost = await Promise.allSettled([
        engine.register({ agent_id: "bot", session_id: "a", config: {} }),
        engine.register({ agent_id: "bot", session_id: "b", config: {} }),
      ]);
      expect(lost.map((r) => r.status)).toEqual(["rejected", "rejected"]);
      expect(await readChain(inner)).toEqual([]);

      await engine.register({ agent_id: "bot", session_id: "c", config: {} });
      await engine.register({ agent_id: "bot", session_id: "d", config: {} });
      await engine.evaluate({ session_id: "d", tool_name: "t", nonce: 1 });
      const entries = await readChain(inner);
      expect(entries).toHaveLength(3);
      expect(await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] })).toMatchObject({
        ok: true,
      });
    } finally {
      await store.close();
    }
  });
});
