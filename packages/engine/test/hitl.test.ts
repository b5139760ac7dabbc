// The HITL queue on every real store: what a pending request records, answers through answerHitl,
// expiry (recorded, then DENY hitl_timeout), waiting (in-process and across handles) and guard()'s wait.
import { generateKeyPair, verifyChain } from "@leash/chain";
import { canonicalHash, canonicalJson, type Substrate } from "@leash/core";
import { manualClock } from "@leash/test-stores";
import { afterEach, describe, expect, it } from "vitest";
import {
  createEngine,
  type Engine,
  guard,
  type HitlEvent,
  LeashAlreadyDecided,
  LeashDenied,
  type LeashError,
  LeashHitlExpired,
} from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();
const PAY = { to: "acct-9", amount: "120.00", memo: "invoice 7 · ünï" };
const CONFIG = {
  hitl_mode: "always" as const,
  hitl_timeout_s: 60,
  budget_usd: 5,
  default_estimate_usd: "0.5",
};

async function chainOf(substrate: Substrate) {
  const entries = await substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
  return { entries, data: entries.map((e) => ({ kind: e.kind, data: JSON.parse(e.body).data })) };
}

describe.each(KINDS)("hitl queue on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });
  const setup = async () => {
    store = await openStore(kind);
    const clock = manualClock();
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, clock, hitlPollMs: 20 });
    return { engine, clock };
  };
  /** A session paused on pay(PAY) with nonce 42; returns its id and the request's id. */
  const paused = async (engine: Engine, config: object = CONFIG) => {
    const s = await engine.register({ agent_id: "bot", config });
    const h = await engine.evaluate({ session_id: s.session_id, tool_name: "pay", params: PAY, nonce: 42 });
    expect([h.verdict, h.reason]).toEqual(["HITL", "hitl_all_calls"]);
    expect(typeof h.hitl_request_id).toBe("string");
    return { sessionId: s.session_id, requestId: h.hitl_request_id!, result: h };
  };

  it("a pending request records the params, digest, budget, policy and expiry; a hitl_request entry announces it without the params", async () => {
    const { engine, clock } = await setup();
    const openedAt = clock.nowNs();
    const { sessionId, requestId } = await paused(engine);
    const view = await engine.getHitl(requestId);
    expect(view).toMatchObject({
      request_id: requestId,
      session_id: sessionId,
      call_number: 1,
      tool_name: "pay",
      nonce: 42,
      status: "pending",
      reason: "hitl_all_calls",
      params: PAY,
      params_json: canonicalJson(PAY),
      args_digest: canonicalHash(PAY),
      budget: { spent_usd: "0", limit_usd: "5", remaining_usd: "5" },
      policy_id: canonicalHash((await engine.getSession(sessionId)).config),
      created_ns: openedAt,
      expires_ns: openedAt + 60e9,
      decision: null,
      operator_id: null,
      successor: null,
    });
    expect(await engine.listHitl({ sessionId })).toEqual([view]);
    expect(await engine.listHitl({ sessionId, status: "decided" })).toEqual([]);
    expect((await engine.listHitl({ status: "pending" })).map((r) => r.request_id)).toEqual([requestId]);

    const { entries, data } = await chainOf(store!.substrate);
    expect(data.map((e) => e.kind)).toEqual(["session_registered", "decision", "hitl_request"]);
    expect(data[2]!.data).toMatchObject({
      request_id: requestId,
      tool_name: "pay",
      args_digest: canonicalHash(PAY),
      reason: "hitl_all_calls",
      budget_remaining_usd: "5",
    });
    // The chain (and so the relay) carries the digest only: the params stay in the store.
    expect(entries[2]!.body).not.toContain("acct-9");
    expect((await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] })).ok).toBe(true);
  });

  it("approve through answerHitl: the exact call ALLOWs once, a second dispatch is duplicate_resume_no_effect, a second answer is refused", async () => {
    const { engine } = await setup();
    const { sessionId, requestId } = await paused(engine);
    const answered = await engine.answerHitl(requestId, {
      decision: "approve",
      operatorId: "alice",
      comment: "known payee",
    });
    expect(answered).toMatchObject({
      status: "decided",
      decision: "approve",
      operator_id: "alice",
      comment: "known payee",
    });
    const before = await chainOf(store!.substrate);
    const again = await engine
      .answerHitl(requestId, { decision: "reject", operatorId: "bob" })
      .catch((e: unknown) => e);
    expect(again).toBeInstanceOf(LeashAlreadyDecided);
    expect((again as LeashError).message).toMatch(/already decided: approve by "alice"/);
    expect((await chainOf(store!.substrate)).entries).toHaveLength(before.entries.length);

    const call = { session_id: sessionId, tool_name: "pay", params: PAY, nonce: 42 };
    const ok = await engine.evaluate(call);
    expect([ok.verdict, ok.reason]).toEqual(["ALLOW", "hitl_transition:approve"]);
    expect((await engine.getHitl(requestId)).status).toBe("consumed");
    const twice = await engine.evaluate(call);
    expect([twice.verdict, twice.reason]).toEqual(["DENY", "policy_violation:duplicate_resume_no_effect"]);

    const { data } = await chainOf(store!.substrate);
    const decision = data.find((e) => e.kind === "hitl_decision")!.data;
    expect(decision).toMatchObject({
      request_id: requestId,
      decision: "approve",
      operator_id: "alice",
      comment: "known payee",
    });
  });

  it("an approval does not release other params (digest_mismatch) or another tool (tool_mismatch)", async () => {
    const { engine } = await setup();
    const { sessionId, requestId } = await paused(engine);
    await engine.answerHitl(requestId, { decision: "approve", operatorId: "alice" });
    const wire = await engine.evaluate({ session_id: sessionId, tool_name: "wire", params: PAY, nonce: 42 });
    expect([wire.verdict, wire.reason]).toEqual(["DENY", "hitl_transition:tool_mismatch"]);
    const more = await engine.evaluate({
      session_id: sessionId,
      tool_name: "pay",
      params: { ...PAY, amount: "1200.00" },
      nonce: 42,
    });
    expect([more.verdict, more.reason]).toEqual(["DENY", "hitl_transition:digest_mismatch"]);
  });

  it("modify: the engine names the successor, which runs once with the operator's params; the original is superseded", async () => {
    const { engine } = await setup();
    const edited = { ...PAY, amount: "60.00" };
    const modified = async () => {
      const { sessionId, requestId } = await paused(engine);
      const answered = await engine.answerHitl(requestId, {
        decision: "modify",
        operatorId: "alice",
        params: edited,
      });
      expect(answered.successor).toMatchObject({ args_digest: canonicalHash(edited), params: edited });
      expect(answered.successor!.nonce).not.toBe(42);
      return { sessionId, successor: answered.successor!.nonce };
    };

    const a = await modified();
    const run = await engine.evaluate({
      session_id: a.sessionId,
      tool_name: "pay",
      params: edited,
      nonce: a.successor,
    });
    expect([run.verdict, run.reason]).toEqual(["ALLOW", "hitl_transition:modify_successor"]);
    const rerun = await engine.evaluate({
      session_id: a.sessionId,
      tool_name: "pay",
      params: edited,
      nonce: a.successor,
    });
    expect([rerun.verdict, rerun.reason]).toEqual(["DENY", "policy_violation:duplicate_resume_no_effect"]);

    const b = await modified();
    const original = await engine.evaluate({
      session_id: b.sessionId,
      tool_name: "pay",
      params: PAY,
      nonce: 42,
    });
    expect([original.verdict, original.reason]).toEqual(["DENY", "hitl_transition:superseded_original"]);
    // The successor with the original's params is not the operator's call either.
    const c = await modified();
    const swapped = await engine.evaluate({
      session_id: c.sessionId,
      tool_name: "pay",
      params: PAY,
      nonce: c.successor,
    });
    expect([swapped.verdict, swapped.reason]).toEqual(["DENY", "hitl_transition:digest_mismatch"]);
  });

  it("expiry: recorded by system:timeout, the next attempt is DENY hitl_timeout, a late answer is refused and changes nothing", async () => {
    const { engine, clock } = await setup();
    const { sessionId, requestId } = await paused(engine);
    clock.advanceMs(59_999);
    expect(await engine.expireHitl()).toBe(0);
    clock.advanceMs(1);
    const late = await engine
      .answerHitl(requestId, { decision: "approve", operatorId: "alice" })
      .catch((e: unknown) => e);
    expect(late).toBeInstanceOf(LeashHitlExpired);
    expect((late as LeashError).code).toBe("hitl_expired");
    const view = await engine.getHitl(requestId);
    expect(view).toMatchObject({ status: "expired", operator_id: "system:timeout", decision: null });
    const afterLate = await chainOf(store!.substrate);
    expect(afterLate.data.map((e) => e.kind)).toEqual([
      "session_registered",
      "decision",
      "hitl_request",
      "hitl_expired",
    ]);
    expect(afterLate.data[3]!.data).toMatchObject({ request_id: requestId, operator_id: "system:timeout" });
    // resume() is refused the same way, and records nothing either.
    await expect(
      engine.resume({ session_id: sessionId, decision: "approve", operator_id: "bob" }),
    ).rejects.toBeInstanceOf(LeashHitlExpired);

    const told = await engine.evaluate({ session_id: sessionId, tool_name: "pay", params: PAY, nonce: 42 });
    expect([told.verdict, told.reason]).toEqual(["DENY", "hitl_timeout"]);
    const { data } = await chainOf(store!.substrate);
    expect(data.at(-1)).toMatchObject({
      kind: "decision",
      data: { verdict: "DENY", reason: "hitl_timeout" },
    });
    expect(data.filter((e) => e.kind === "hitl_decision")).toEqual([]);
    // Told once: the session no longer waits on that request.
    expect((await engine.getSession(sessionId)).state.pending_request).toBeNull();
  });

  it("expiry is applied lazily by the session's next evaluate and by listHitl", async () => {
    const { engine, clock } = await setup();
    const first = await paused(engine);
    const second = await paused(engine);
    clock.advanceMs(61_000);
    const told = await engine.evaluate({
      session_id: first.sessionId,
      tool_name: "pay",
      params: PAY,
      nonce: 7,
    });
    expect([told.verdict, told.reason]).toEqual(["DENY", "hitl_timeout"]);
    expect((await engine.getHitl(first.requestId)).status).toBe("expired");
    expect((await engine.getHitl(second.requestId)).status).toBe("pending"); // nobody looked yet
    expect((await engine.listHitl({ status: "expired" })).map((r) => r.request_id).sort()).toEqual(
      [first.requestId, second.requestId].sort(),
    );
    expect(await engine.listHitl({ status: "pending" })).toEqual([]);
  });

  it("waitForHitl resolves at once on an in-process answer, and sees an answer from another handle by polling", async () => {
    const { engine, clock } = await setup();
    const seen: HitlEvent["type"][] = [];
    const off = engine.onHitlEvent((e) => seen.push(e.type));
    const a = await paused(engine);
    const waiting = engine.waitForHitl(a.requestId);
    await engine.answerHitl(a.requestId, { decision: "reject", operatorId: "alice" });
    expect(await waiting).toMatchObject({ status: "decided", decision: "reject" });

    const b = await paused(engine);
    const other = createEngine({ substrate: await store!.another(), signer: KEY.signer, clock });
    const remote = engine.waitForHitl(b.requestId);
    await other.answerHitl(b.requestId, { decision: "approve", operatorId: "carol" });
    expect(await remote).toMatchObject({ status: "decided", decision: "approve", operator_id: "carol" });
    // The other engine's answer is not this engine's event: only what happened here is.
    expect(seen).toEqual(["hitl_request", "hitl_decided", "hitl_request"]);
    off();

    const c = await paused(engine);
    expect((await engine.waitForHitl(c.requestId, { timeoutMs: 30 })).status).toBe("pending");
    const aborted = new AbortController();
    const cut = engine.waitForHitl(c.requestId, { signal: aborted.signal });
    aborted.abort(new Error("operator went home"));
    await expect(cut).rejects.toThrow("operator went home");
    expect(seen).toHaveLength(3); // unsubscribed
  });

  it("waitForHitl records the expiry when the time is up", async () => {
    const { engine, clock } = await setup();
    const { requestId } = await paused(engine);
    const waiting = engine.waitForHitl(requestId);
    clock.advanceMs(60_000);
    expect(await waiting).toMatchObject({ status: "expired", operator_id: "system:timeout" });
  });

  it("bad answers are one-line errors that record nothing", async () => {
    const { engine } = await setup();
    const { requestId } = await paused(engine);
    const before = await chainOf(store!.substrate);
    const cases: [unknown, unknown, RegExp][] = [
      [requestId, { decision: "allow", operatorId: "a" }, /decision must be one of/],
      [requestId, { decision: "approve", operatorId: "" }, /operatorId must be a non-empty string/],
      [requestId, { decision: "modify", operatorId: "a" }, /modify needs the params/],
      [requestId, { decision: "approve", operatorId: "a", params: { x: 1 } }, /params apply only to modify/],
      [requestId, { decision: "modify", operatorId: "a", params: { x: Number.NaN } }, /not canonical JSON/],
      ["", { decision: "approve", operatorId: "a" }, /request id must be a non-empty string/],
    ];
    for (const [id, answer, message] of cases) {
      const error = await engine.answerHitl(id as string, answer as never).catch((e: unknown) => e);
      expect((error as LeashError).code).toBe("invalid_argument");
      expect((error as Error).message).toMatch(message);
      expect((error as Error).message).not.toContain("\n");
    }
    const unknown = await engine
      .answerHitl("no-such-request", { decision: "approve", operatorId: "a" })
      .catch((e: unknown) => e);
    expect((unknown as LeashError).code).toBe("hitl_not_found");
    await expect(engine.listHitl({ status: "open" as never })).rejects.toThrow(/status must be one of/);
    expect((await chainOf(store!.substrate)).entries).toHaveLength(before.entries.length);
    expect((await engine.getHitl(requestId)).status).toBe("pending");
  });

  it("guard() waits: approve runs the tool once; modify runs it with the operator's params; reject and expiry throw LeashDenied", async () => {
    const { engine, clock } = await setup();
    const ran: unknown[] = [];
    const payTool = (sessionId: string, answer: (id: string) => void) =>
      guard(
        engine,
        { session_id: sessionId, tool_name: "pay", onHitl: (request) => answer(request.request_id) },
        async (args: typeof PAY) => {
          ran.push(args);
          return `paid ${args.amount}`;
        },
      );
    const session = async () => (await engine.register({ agent_id: "bot", config: CONFIG })).session_id;

    const approve = payTool(await session(), (id) => {
      void engine.answerHitl(id, { decision: "approve", operatorId: "alice" });
    });
    expect(await approve(PAY)).toBe("paid 120.00");
    expect(ran).toEqual([PAY]);

    const edited = { ...PAY, amount: "60.00" };
    const modify = payTool(await session(), (id) => {
      void engine.answerHitl(id, { decision: "modify", operatorId: "alice", params: edited });
    });
    expect(await modify(PAY)).toBe("paid 60.00");
    expect(ran).toEqual([PAY, edited]);

    const reject = payTool(await session(), (id) => {
      void engine.answerHitl(id, { decision: "reject", operatorId: "alice" });
    });
    const rejected = await reject(PAY).catch((e: unknown) => e);
    expect(rejected).toBeInstanceOf(LeashDenied);
    expect((rejected as LeashDenied).reason).toBe("hitl_transition:reject");

    const defer = payTool(await session(), (id) => {
      void engine.answerHitl(id, { decision: "defer", operatorId: "alice" });
    });
    expect(((await defer(PAY).catch((e: unknown) => e)) as LeashDenied).reason).toBe(
      "hitl_transition:defer_escalate",
    );

    const timeout = payTool(await session(), () => clock.advanceMs(60_000));
    const expired = await timeout(PAY).catch((e: unknown) => e);
    expect(expired).toBeInstanceOf(LeashDenied);
    expect((expired as LeashDenied).reason).toBe("hitl_timeout");
    expect(ran).toEqual([PAY, edited]);
  });
});
