// postExec's edges on every store: a late settlement is still spent and recorded as late, a second
// settlement with another actual is a conflict (the first stands), a call never allowed has nothing to settle.
import { generateKeyPair } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, LeashError } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();

async function readChain(substrate: Substrate): Promise<ChainEntryRecord[]> {
  return substrate.transaction(async (tx) => tx.chain.range(0, 1_000_000));
}

const bodyOf = (entry: ChainEntryRecord) =>
  JSON.parse(entry.body) as { kind: string; data: Record<string, unknown> };

async function refusal(promise: Promise<unknown>): Promise<LeashError> {
  return promise.then(
    (value) => expect.fail(`expected a refusal, got ${JSON.stringify(value)}`),
    (error: unknown) => {
      expect(LeashError.isInstance(error)).toBe(true);
      return error as LeashError;
    },
  );
}

describe.each(KINDS)("postExec on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });
  const setup = async () => {
    store = await openStore(kind);
    let now = 1_700_000_000_000_000_000;
    const engine = createEngine({
      substrate: store.substrate,
      signer: KEY.signer,
      clock: { nowNs: () => now },
      reservationTtlMs: 1000,
    });
    return { engine, substrate: store.substrate, advance: (ns: number) => (now += ns) };
  };

  it("keeps an expired ALLOWed hold spent (a settled_by_expiry entry); a late settlement corrects it to the actual", async () => {
    const { engine, substrate, advance } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const first = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "t",
      estimated_cost_usd: 0.6,
    });
    expect(first).toMatchObject({ verdict: "ALLOW", budget_remaining_usd: "0.4" });
    advance(2e9);
    expect(await engine.expireReservations()).toBe(1);
    // Silence gives no money back: the 0.6 estimate stays spent.
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe("0.4");
    const expiry = bodyOf((await readChain(substrate)).at(-1)!);
    expect(expiry).toMatchObject({
      kind: "settled_by_expiry",
      data: { call_number: 1, charged_usd: "0.6", budget_after_usd: "0.4" },
    });
    const [hold] = await substrate.transaction((tx) =>
      tx.budgets.listReservations({ sessionId: s.session_id }),
    );
    expect(hold).toMatchObject({ status: "EXPIRED", actual_usd: "0.6" });
    const second = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "v",
      estimated_cost_usd: 0.3,
    });
    expect(second).toMatchObject({ verdict: "ALLOW", budget_remaining_usd: "0.1" });
    // The case: a call of 0.9 after the expiry must not be ALLOWed on a $1 budget.
    const refused = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "u",
      estimated_cost_usd: 0.9,
    });
    expect(refused.verdict).toBe("DENY");

    // The late post-exec corrects the charge from 0.6 down to 0.25, giving 0.35 back.
    const late = await engine.postExec({
      session_id: s.session_id,
      call_number: first.call_number,
      actual_cost_usd: "0.25",
    });
    expect(late).toMatchObject({
      actual_usd: "0.25",
      overrun_usd: "0",
      budget_remaining_usd: "0.45",
      replayed: false,
      late: true,
    });
    const entry = bodyOf((await readChain(substrate)).at(-1)!);
    expect(entry.kind).toBe("post_exec");
    expect(entry.data).toMatchObject({
      call_number: 1,
      estimated_usd: "0.6",
      actual_usd: "0.25",
      late: true,
      hold_status: "EXPIRED",
      budget_after_usd: "0.45",
      over_limit_usd: "0",
    });
    // Once: the same settlement again moves nothing; another actual is a conflict.
    const again = await engine.postExec({
      session_id: s.session_id,
      call_number: 1,
      actual_cost_usd: "0.25",
    });
    expect(again).toMatchObject({ replayed: true, budget_remaining_usd: "0.45" });
    const conflict = await refusal(
      engine.postExec({ session_id: s.session_id, call_number: 1, actual_cost_usd: 1 }),
    );
    expect(conflict.code).toBe("settlement_conflict");
    // A late actual above the estimate is spent in full: call 2's 0.3 is charged, then 0.9 arrives.
    advance(2e9);
    expect(await engine.expireReservations()).toBe(1);
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe("0.45");
    const over = await engine.postExec({ session_id: s.session_id, call_number: 2, actual_cost_usd: "0.9" });
    expect(over).toMatchObject({ overrun_usd: "0.6", budget_remaining_usd: "0", late: true });
    const overEntry = bodyOf((await readChain(substrate)).at(-1)!);
    // Spent: 0.25 + 0.9 = 1.15 of 1.
    expect(overEntry.data).toMatchObject({ over_limit_usd: "0.15", budget_after_usd: "0" });
  });

  it("refuses a second settlement with another actual (the first stands); the same actual again is a replay", async () => {
    const { engine, substrate } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    await engine.evaluate({ session_id: s.session_id, tool_name: "t", estimated_cost_usd: 0.5 });
    await engine.postExec({ session_id: s.session_id, call_number: 1, actual_cost_usd: 0.25 });
    const length = (await readChain(substrate)).length;
    for (const request of [
      { actual_cost_usd: 0.4 },
      { actual_cost_usd: "0.250000000000000001" },
      { actual_cost_usd: 0.4, idempotency_key: "another" },
    ]) {
      const error = await refusal(engine.postExec({ session_id: s.session_id, call_number: 1, ...request }));
      expect(error.code).toBe("settlement_conflict");
      expect(error.message).toMatch(/settled at 0\.25|already SETTLED/);
    }
    for (const actual of ["0.25", 0.25, "0.2500"]) {
      const again = await engine.postExec({
        session_id: s.session_id,
        call_number: 1,
        actual_cost_usd: actual,
      });
      expect(again).toMatchObject({ replayed: true, actual_usd: "0.25", budget_remaining_usd: "0.75" });
    }
    expect((await readChain(substrate)).length).toBe(length);
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe("0.75");
  });

  it("lets exactly one of two concurrent settlements with different actuals stand, across two engines", async () => {
    const { engine, substrate } = await setup();
    const other = createEngine({ substrate: await store!.another(), signer: KEY.signer });
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    await engine.evaluate({ session_id: s.session_id, tool_name: "t", estimated_cost_usd: 0.5 });
    const outcomes = await Promise.allSettled([
      engine.postExec({ session_id: s.session_id, call_number: 1, actual_cost_usd: "0.1" }),
      other.postExec({ session_id: s.session_id, call_number: 1, actual_cost_usd: "0.3" }),
    ]);
    const won = outcomes.flatMap((o) => (o.status === "fulfilled" ? [o.value] : []));
    const lost = outcomes.flatMap((o) => (o.status === "rejected" ? [o.reason as LeashError] : []));
    expect([won.length, lost.map((e) => e.code)]).toEqual([1, ["settlement_conflict"]]);
    const winner = won[0]!;
    expect(winner.budget_remaining_usd).toBe(winner.actual_usd === "0.1" ? "0.9" : "0.7");
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe(winner.budget_remaining_usd);
    const settlements = (await readChain(substrate)).map(bodyOf).filter((b) => b.kind === "post_exec");
    expect(settlements.map((b) => b.data.actual_usd)).toEqual([winner.actual_usd]);
  });

  it("refuses to settle a call that was never allowed, writing nothing", async () => {
    const { engine, substrate } = await setup();
    const budgeted = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const plain = await engine.register({ agent_id: "bot", config: {} });
    await engine.evaluate({
      session_id: budgeted.session_id,
      tool_name: "t",
      nonce: 1,
      estimated_cost_usd: 0.1,
    });
    const denied = await engine.evaluate({
      session_id: budgeted.session_id,
      tool_name: "t",
      nonce: 1,
      estimated_cost_usd: 0.1,
    });
    expect(denied.verdict).toBe("DENY");
    await engine.evaluate({ session_id: plain.session_id, tool_name: "t" });
    const chain = await readChain(substrate);
    const before = [await engine.getSession(budgeted.session_id), await engine.getSession(plain.session_id)];
    for (const [session, call] of [
      [budgeted.session_id, denied.call_number],
      [budgeted.session_id, 7],
      [plain.session_id, 2],
    ] as const) {
      const error = await refusal(
        engine.postExec({ session_id: session, call_number: call, actual_cost_usd: 0.1 }),
      );
      expect([error.code, error.message]).toEqual([
        "reservation_not_found",
        `call ${call} of session ${session} was never allowed: there is nothing to settle`,
      ]);
    }
    for (const call of [0, 1.5, Number.NaN, "1"]) {
      const error = await refusal(
        engine.postExec({
          session_id: budgeted.session_id,
          call_number: call as number,
          actual_cost_usd: 0.1,
        }),
      );
      expect(error.code).toBe("invalid_argument");
    }
    for (const actual of [-1, Number.NaN, "abc", "0.1234567890123456789"]) {
      const error = await refusal(
        engine.postExec({ session_id: budgeted.session_id, call_number: 1, actual_cost_usd: actual }),
      );
      expect(error.code).toBe("invalid_argument");
      expect(error.message).toMatch(/^actual_cost_usd: amount /);
    }
    expect(await readChain(substrate)).toEqual(chain);
    expect([await engine.getSession(budgeted.session_id), await engine.getSession(plain.session_id)]).toEqual(
      before,
    );
  });
});
