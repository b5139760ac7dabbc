// Model-based test: random register/evaluate/postExec/expire sequences on each substrate agree
// with a small in-memory model built from core's decide + feedback and exact decimals (an expired
// hold stays spent at its estimate, a late settlement corrects it; a second replays or is refused).

import { generateKeyPair } from "@leash/chain";
import { type Config, decide, feedback, type State } from "@leash/core";
import { Decimal } from "decimal.js";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, type Engine } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const RUNS = Math.max(1, Math.floor(Number(process.env.LEASH_PROPERTY_RUNS ?? 1000) / 20));
const TTL_MS = 1000;

type Op =
  | { kind: "evaluate"; tool: string; q: number; nonce: number; estimate: number }
  | { kind: "postExec"; pick: number; actual: number }
  | { kind: "expire" };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant("evaluate" as const),
      tool: fc.constantFrom("a", "b"),
      q: fc.nat(2),
      nonce: fc.nat(12),
      estimate: fc.constantFrom(0, 0.05, 0.1, 0.3),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("postExec" as const),
      pick: fc.nat(20),
      actual: fc.constantFrom(0, 0.05, 0.1, 0.5),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "expire" as const }) },
);
const configArb: fc.Arbitrary<Config> = fc.record({
  budget_usd: fc.constantFrom(0.5, 1),
  max_repeat_calls: fc.constantFrom(0, 2, 3),
  hitl_mode: fc.constantFrom("never" as const, "on_threshold" as const),
  hitl_budget_threshold: fc.constantFrom(0.1, 0.3),
});

/** The model: one session, its decision state, and a ledger of exact holds. */
class Model {
  state: State;
  seen = new Set<number>();
  spent = new Decimal(0);
  holds = new Map<number, { amount: Decimal; at: number }>();
  calls = 0;
  constructor(
    readonly config: Config,
    readonly limit: Decimal,
  ) {
    this.state = {
      circuit_tripped: false,
      total_calls: 0,
      session_started_ns: 0,
      budget_initial_usd: config.budget_usd,
    };
  }
  remaining() {
    const held = [...this.holds.values()].reduce((s, h) => s.plus(h.amount), new Decimal(0));
    return Decimal.max(0, this.limit.minus(this.spent).minus(held));
  }
  evaluate(op: Extract<Op, { kind: "evaluate" }>, now: number) {
    const call = {
      tool_name: op.tool,
      params: { q: op.q },
      nonce: op.nonce,
      estimated_cost_usd: op.estimate,
    };
    const state = {
      ...this.state,
      seen_nonces: this.seen.has(op.nonce) ? [op.nonce] : [],
      budget_remaining_usd: this.remaining().toNumber(),
    };
    const d = decide(this.config, state, call, { nowNs: now });
    this.calls++;
    if (d.verdict === "ALLOW") {
      this.seen.add(op.nonce);
      this.holds.set(this.calls, { amount: new Decimal(op.estimate), at: now });
    }
    this.state = feedback(this.config, state, call, d, { nowNs: now });
    return { verdict: d.verdict, reason: d.reason, call_number: this.calls };
  }
  /** Expired holds: charged at their estimate; a late settlement corrects the charge to its actual. */
  expired = new Map<number, Decimal>();
  settled = new Map<number, number>();
  settle(callNumber: number, actual: number): "settled" | "replayed" | "refused" {
    const first = this.settled.get(callNumber);
    if (first !== undefined) return first === actual ? "replayed" : "refused";
    const charged = this.expired.get(callNumber);
    if (!this.holds.delete(callNumber) && !this.expired.delete(callNumber)) return "refused";
    this.settled.set(callNumber, actual);
    this.spent = this.spent.plus(actual).minus(charged ?? 0);
    return "settled";
  }
  expire(now: number) {
    for (const [n, h] of this.holds) {
      if (h.at + TTL_MS * 1e6 <= now) {
        this.holds.delete(n);
        this.expired.set(n, h.amount);
        this.spent = this.spent.plus(h.amount);
      }
    }
  }
}

describe.each(KINDS)("engine agrees with the model on %s", (kind) => {
  let store: OpenedStore;
  let engine: Engine;
  let now = 1_000_000;
  beforeAll(async () => {
    store = await openStore(kind);
    engine = createEngine({
      substrate: store.substrate,
      signer: generateKeyPair().signer,
      clock: { nowNs: () => now },
      reservationTtlMs: TTL_MS,
    });
  });
  afterAll(() => store.close());

  it("on random command sequences", async () => {
    await fc.assert(
      fc.asyncProperty(configArb, fc.array(opArb, { minLength: 1, maxLength: 25 }), async (config, ops) => {
        const session = await engine.register({ agent_id: "model", config });
        const model = new Model(config, new Decimal(config.budget_usd!));
        const allowed: number[] = [];
        for (const op of ops) {
          now += 200e6;
          if (op.kind === "evaluate") {
            const got = await engine.evaluate({
              session_id: session.session_id,
              tool_name: op.tool,
              params: { q: op.q },
              nonce: op.nonce,
              estimated_cost_usd: op.estimate,
            });
            const want = model.evaluate(op, now);
            expect([got.verdict, got.reason, got.call_number]).toEqual([
              want.verdict,
              want.reason,
              want.call_number,
            ]);
            if (got.verdict === "ALLOW") allowed.push(got.call_number);
          } else if (op.kind === "postExec") {
            const callNumber = allowed[op.pick % Math.max(1, allowed.length)];
            if (callNumber === undefined) continue;
            const settledInModel = model.settle(callNumber, op.actual);
            const result = await engine
              .postExec({
                session_id: session.session_id,
                call_number: callNumber,
                actual_cost_usd: op.actual,
              })
              .then(
                (r) => (r.replayed ? "replayed" : "settled"),
                () => "refused",
              );
            expect(result).toBe(settledInModel);
          } else {
            model.expire(now);
            await engine.expireReservations();
          }
          const view = await engine.getSession(session.session_id);
          expect(view.budget_remaining_usd).toBe(model.remaining().toFixed());
          expect(view.state.circuit_tripped).toBe(model.state.circuit_tripped);
          expect(view.state.total_calls).toBe(model.state.total_calls);
        }
      }),
      { numRuns: RUNS },
    );
  }, 300_000);
});
