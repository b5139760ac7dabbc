// Human approvals on every real store: bound to the paused call (tool included), answered exactly once.
// Two operators race through one engine and through two engines on one store; nothing is mocked.
import { generateKeyPair, verifyChain } from "@leash/chain";
import { canonicalHash, type HitlRequest, type Substrate } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type Engine, LeashError } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();
const EMAIL = { to: "bob@example.com" };

function fixedClock(start = 1_700_000_000_000_000_000) {
  let now = start;
  return { nowNs: () => now, advance: (ns: number) => (now += ns) };
}

async function chainOf(substrate: Substrate) {
  const entries = await substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
  const data = entries.map((e) => ({ kind: e.kind, data: JSON.parse(e.body).data }));
  return { entries, data };
}

const hitlRows = (substrate: Substrate, sessionId: string): Promise<HitlRequest[]> =>
  substrate.transaction((tx) => tx.hitl.list({ sessionId }));

/** Settles a promise into its outcome, so a test can say which of two racers won. */
const outcome = <T>(p: Promise<T>) =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );

describe.each(KINDS)("approvals on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });
  const setup = async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, clock: fixedClock() });
    return engine;
  };
  /** A session paused on send_email {"to":"bob@example.com"} with nonce 42. */
  const paused = async (engine: Engine) => {
    const s = await engine.register({ agent_id: "bot", config: { hitl_mode: "always" } });
    const h = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "send_email",
      params: EMAIL,
      nonce: 42,
    });
    expect([h.verdict, h.reason]).toEqual(["HITL", "hitl_all_calls"]);
    return s.session_id;
  };

  it("an approval releases only the paused tool; another tool is denied and the approval stays usable", async () => {
    const engine = await setup();
    const id = await paused(engine);
    await engine.resume({ session_id: id, decision: "approve", operator_id: "alice" });

    const wire = await engine.evaluate({
      session_id: id,
      tool_name: "wire_transfer",
      params: EMAIL,
      nonce: 42,
    });
    expect([wire.verdict, wire.reason]).toEqual(["DENY", "hitl_transition:tool_mismatch"]);
    // The wrong call neither trips the circuit nor spends the approval or the nonce.
    const between = await engine.getSession(id);
    expect(between.state.circuit_tripped).toBe(false);
    expect(between.state.pending_transition).toMatchObject({ decision: "approve", original_nonce: 42 });
    expect((await hitlRows(store!.substrate, id)).map((r) => r.status)).toEqual(["DECIDED"]);

    const email = await engine.evaluate({
      session_id: id,
      tool_name: "send_email",
      params: EMAIL,
      nonce: 42,
    });
    expect([email.verdict, email.reason]).toEqual(["ALLOW", "hitl_transition:approve"]);
    expect((await hitlRows(store!.substrate, id)).map((r) => r.status)).toEqual(["CONSUMED"]);
    const again = await engine.evaluate({
      session_id: id,
      tool_name: "wire_transfer",
      params: EMAIL,
      nonce: 42,
    });
    expect([again.verdict, again.reason]).toEqual(["DENY", "policy_violation:duplicate_resume_no_effect"]);

    const { entries, data } = await chainOf(store!.substrate);
    const decisions = data.filter((e) => e.kind === "decision").map((e) => [e.data.tool_name, e.data.reason]);
    expect(decisions).toEqual([
      ["send_email", "hitl_all_calls"],
      ["wire_transfer", "hitl_transition:tool_mismatch"],
      ["send_email", "hitl_transition:approve"],
      ["wire_transfer", "policy_violation:duplicate_resume_no_effect"],
    ]);
    expect((await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] })).ok).toBe(true);
  });

  it("a modified call is bound to the paused tool too", async () => {
    const engine = await setup();
    const id = await paused(engine);
    const edited = { to: "carol@example.com" };
    await engine.resume({
      session_id: id,
      decision: "modify",
      operator_id: "alice",
      successor: { nonce: 43, args_digest: canonicalHash(edited) },
    });
    const wire = await engine.evaluate({
      session_id: id,
      tool_name: "wire_transfer",
      params: edited,
      nonce: 43,
    });
    expect([wire.verdict, wire.reason]).toEqual(["DENY", "hitl_transition:tool_mismatch"]);
    const email = await engine.evaluate({
      session_id: id,
      tool_name: "send_email",
      params: edited,
      nonce: 43,
    });
    expect([email.verdict, email.reason]).toEqual(["ALLOW", "hitl_transition:modify_successor"]);
  });

  it("resume accepts only the five decisions, trimmed and in any case; anything else is an error that records nothing", async () => {
    const engine = await setup();
    const id = await paused(engine);
    const before = await chainOf(store!.substrate);
    const session = await engine.getSession(id);
    for (const decision of [
      null,
      undefined,
      "",
      "  ",
      "approve\u0000",
      "approved",
      "ALLOW",
      1,
      true,
      {},
      10n,
      () => "approve",
    ]) {
      const error = await engine
        .resume({ session_id: id, decision: decision as never, operator_id: "alice" })
        .then(
          () => null,
          (e: unknown) => e,
        );
      expect(LeashError.isInstance(error), `decision ${String(decision)}`).toBe(true);
      expect((error as LeashError).code).toBe("invalid_argument");
      expect((error as Error).message).toMatch(
        /^decision must be one of approve, reject, modify, defer, escalate/,
      );
      // One line, and the NUL shown escaped rather than raw.
      expect((error as Error).message.includes("\n") || (error as Error).message.includes("\u0000")).toBe(
        false,
      );
    }
    for (const operator of ["", "  ", null, 7]) {
      const error = await engine
        .resume({ session_id: id, decision: "approve", operator_id: operator as never })
        .then(
          () => null,
          (e: unknown) => e,
        );
      expect((error as LeashError).code, `operator ${JSON.stringify(operator)}`).toBe("invalid_argument");
    }
    // Nothing was written: no chain entry, the request still open, the session as it was.
    expect((await chainOf(store!.substrate)).data).toEqual(before.data);
    expect((await hitlRows(store!.substrate, id)).map((r) => [r.status, r.decision])).toEqual([
      ["PENDING", null],
    ]);
    expect(await engine.getSession(id)).toEqual(session);

    const view = await engine.resume({
      session_id: id,
      decision: " APPROVE\n" as never,
      operator_id: "alice",
    });
    expect(view.state.pending_transition).toMatchObject({ decision: "approve" });
    const recorded = (await chainOf(store!.substrate)).data.filter((e) => e.kind === "hitl_decision");
    expect(recorded.map((e) => e.data.decision)).toEqual(["approve"]);
    const ok = await engine.evaluate({ session_id: id, tool_name: "send_email", params: EMAIL, nonce: 42 });
    expect(ok.reason).toBe("hitl_transition:approve");
  });

  /** Asserts the loser of a race heard the typed "already decided" error naming the winner's answer. */
  const expectAlreadyDecided = (error: unknown, winner: { decision: string; operator: string }) => {
    expect(LeashError.isInstance(error), String(error)).toBe(true);
    expect((error as LeashError).code).toBe("hitl_already_decided");
    expect((error as Error).name).toBe("LeashAlreadyDecided");
    expect(error).toMatchObject({ decision: winner.decision, operatorId: winner.operator });
    expect((error as Error).message).toContain(`${winner.decision} by "${winner.operator}"`);
  };

  const races = [
    ["approve", "reject"],
    ["reject", "approve"],
    ["defer", "approve"],
    ["approve", "approve"],
  ] as const;
  for (const engines of ["one engine", "two engines on one store"] as const) {
    it.each(races)(`${engines}: operators answering %s and %s at once, exactly one wins`, async (a, b) => {
      const engine = await setup();
      const id = await paused(engine);
      const other =
        engines === "one engine"
          ? engine
          : createEngine({ substrate: await store!.another(), signer: KEY.signer, clock: fixedClock() });
      const results = await Promise.all([
        outcome(engine.resume({ session_id: id, decision: a, operator_id: "alice" })),
        outcome(other.resume({ session_id: id, decision: b, operator_id: "bob" })),
      ]);
      expect(results.filter((r) => r.ok)).toHaveLength(1);
      const winner = results[0]!.ok ? { decision: a, operator: "alice" } : { decision: b, operator: "bob" };
      expectAlreadyDecided(results.find((r) => !r.ok)!.error, winner);

      const rows = await hitlRows(store!.substrate, id);
      expect(rows.map((r) => [r.status, r.decision, r.operator_id])).toEqual([
        ["DECIDED", winner.decision, winner.operator],
      ]);
      const answers = (await chainOf(store!.substrate)).data.filter((e) => e.kind === "hitl_decision");
      expect(answers.map((e) => [e.data.decision, e.data.operator_id])).toEqual([
        [winner.decision, winner.operator],
      ]);
      // A late third answer is told the same, and the call follows the winner's answer only.
      expectAlreadyDecided(
        await engine.resume({ session_id: id, decision: "approve", operator_id: "carol" }).catch((e) => e),
        winner,
      );
      const retried = await other.evaluate({
        session_id: id,
        tool_name: "send_email",
        params: EMAIL,
        nonce: 42,
      });
      const expected = {
        approve: ["ALLOW", "hitl_transition:approve"],
        reject: ["DENY", "hitl_transition:reject"],
        defer: ["HITL", "hitl_transition:defer_escalate"],
      }[winner.decision];
      expect([retried.verdict, retried.reason]).toEqual(expected);
    });
  }

  it("a deferred call asks again, and an answer naming an older request is refused", async () => {
    const engine = await setup();
    const id = await paused(engine);
    const first = (await engine.getSession(id)).state.pending_request as { request_id?: string } | null;
    expect(typeof first?.request_id).toBe("string");
    await engine.resume({ session_id: id, decision: "defer", operator_id: "alice" });
    // The agent sends the call again: it waits for a human once more, as a new request.
    const asked = await engine.evaluate({
      session_id: id,
      tool_name: "send_email",
      params: EMAIL,
      nonce: 42,
    });
    expect([asked.verdict, asked.reason]).toEqual(["HITL", "hitl_transition:defer_escalate"]);
    const second = (await engine.getSession(id)).state.pending_request as { request_id?: string } | null;
    expect(second?.request_id).not.toBe(first?.request_id);

    // An operator still looking at the first request cannot land an answer on the second.
    const stale = await engine
      .resume({ session_id: id, decision: "approve", operator_id: "bob", request_id: first!.request_id! })
      .catch((e: unknown) => e);
    expectAlreadyDecided(stale, { decision: "defer", operator: "alice" });
    const unknown = await engine
      .resume({ session_id: id, decision: "approve", operator_id: "bob", request_id: "no-such-request" })
      .catch((e: unknown) => e);
    expect((unknown as LeashError).code).toBe("no_pending_request");

    await engine.resume({
      session_id: id,
      decision: "approve",
      operator_id: "bob",
      request_id: second!.request_id!,
    });
    const ok = await engine.evaluate({ session_id: id, tool_name: "send_email", params: EMAIL, nonce: 42 });
    expect([ok.verdict, ok.reason]).toEqual(["ALLOW", "hitl_transition:approve"]);
    const rows = await hitlRows(store!.substrate, id);
    const byId = new Map(rows.map((r) => [r.request_id, [r.status, r.decision, r.operator_id]]));
    expect(byId.get(first!.request_id!)).toEqual(["DECIDED", "defer", "alice"]);
    expect(byId.get(second!.request_id!)).toEqual(["CONSUMED", "approve", "bob"]);
  });
});
