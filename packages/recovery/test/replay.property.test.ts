// Property (fast-check): for random sequences of register / evaluate / postExec / resume / reset / expire
// on each substrate, after every step the store's state tables equal the projection of its replayed chain.
import { generateKeyPair } from "@leash/chain";
import type { Config } from "@leash/core";
import { createEngine } from "@leash/engine";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ChainReplayer, compareSnapshots } from "../src/index.js";
import { KINDS, type Kind, manualClock, openStore } from "./support.js";

const KEY = generateKeyPair();

const configArb: fc.Arbitrary<Config> = fc.record(
  {
    budget_usd: fc.constantFrom(0.5, 2, 10),
    max_repeat_calls: fc.integer({ min: 1, max: 4 }),
    hitl_mode: fc.constantFrom("never", "always", "on_deny"),
    hitl_budget_threshold: fc.constantFrom(0.2, 0.5),
    max_total_calls: fc.integer({ min: 2, max: 20 }),
    default_estimate_usd: fc.constantFrom(0.01, 0.3),
    // Short enough for an "expire" step to outlast it: the hitl_expired entry and hitl_timeout replay too.
    hitl_timeout_s: fc.constantFrom(60, 3_600),
  },
  { requiredKeys: [] },
) as fc.Arbitrary<Config>;

type Step =
  | { op: "register"; config: Config }
  | {
      op: "evaluate";
      session: number;
      tool: string;
      params: Record<string, unknown>;
      nonce: string | null;
      estimate: number | string | null;
    }
  | { op: "postExec"; session: number; call: number; actual: number | string }
  | { op: "resume"; session: number; decision: "approve" | "reject" | "modify" | "defer" | "escalate" }
  | { op: "reset"; session: number }
  | { op: "expire"; advanceMs: number };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 1, arbitrary: fc.record({ op: fc.constant("register" as const), config: configArb }) },
  {
    weight: 6,
    arbitrary: fc.record({
      op: fc.constant("evaluate" as const),
      session: fc.nat(3),
      tool: fc.constantFrom("search", "fetch", "pay"),
      params: fc.oneof(
        fc.constant({}),
        fc.record({ q: fc.string({ maxLength: 12 }), n: fc.integer({ min: -5, max: 5 }) }),
        fc.constant({ ctx: "opaque" }),
        fc.constant({ nested: { list: [1.5, "ü", { deep: true }] } }),
      ),
      nonce: fc.option(fc.constantFrom("a", "b", "c", "d", "e", "f"), { nil: null }),
      estimate: fc.option(fc.constantFrom(0.01, "0.1", 0.25, 1, -1), { nil: null }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant("postExec" as const),
      session: fc.nat(3),
      call: fc.integer({ min: 1, max: 8 }),
      actual: fc.constantFrom(0, 0.05, "0.2", 0.6),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant("resume" as const),
      session: fc.nat(3),
      decision: fc.constantFrom("approve", "reject", "modify", "defer", "escalate"),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("reset" as const), session: fc.nat(3) }) },
  {
    weight: 1,
    arbitrary: fc.record({ op: fc.constant("expire" as const), advanceMs: fc.constantFrom(1_000, 400_000) }),
  },
);

/** Refusals the engine throws for a step that does not apply (nothing is recorded for them). */
const REFUSALS = new Set([
  "no_pending_request",
  "reservation_not_found",
  "hitl_already_decided",
  "hitl_expired",
  "settlement_conflict",
  "invalid_argument",
]);

const RUNS: Record<Kind, number> = { memory: 100, sqlite: 20, postgres: 10 };

describe.each(KINDS)("live state equals the replayed chain on %s", (kind: Kind) => {
  it("after every step of random sequences", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 1, maxLength: 25 }), async (steps) => {
        const store = await openStore(kind);
        try {
          const clock = manualClock();
          const engine = createEngine({
            substrate: store.substrate,
            signer: KEY.signer,
            clock,
            rng: () => 0.3,
          });
          const replayer = new ChainReplayer();
          let folded = 0;
          const sessions: string[] = [
            (await engine.register({ agent_id: "first", config: { budget_usd: 1 } })).session_id,
          ];
          for (const step of steps) {
            clock.advanceMs(50);
            const session = sessions[("session" in step ? step.session : 0) % sessions.length]!;
            try {
              switch (step.op) {
                case "register":
                  sessions.push(
                    (await engine.register({ agent_id: `a${sessions.length}`, config: step.config }))
                      .session_id,
                  );
                  break;
                case "evaluate":
                  await engine.evaluate({
                    session_id: session,
                    tool_name: step.tool,
                    params: step.params,
                    nonce: step.nonce,
                    ...(step.estimate === null ? {} : { estimated_cost_usd: step.estimate }),
                  });
                  break;
                case "postExec":
                  await engine.postExec({
                    session_id: session,
                    call_number: step.call,
                    actual_cost_usd: step.actual,
                  });
                  break;
                case "resume":
                  await engine.resume({
                    session_id: session,
                    decision: step.decision,
                    operator_id: "op",
                    ...(step.decision === "modify"
                      ? { successor: { nonce: "succ", args_digest: "ab".repeat(32) } }
                      : {}),
                  });
                  break;
                case "reset":
                  await engine.reset(session, "op");
                  break;
                case "expire":
                  clock.advanceMs(step.advanceMs);
                  await engine.expireReservations();
                  await engine.expireHitl();
                  break;
              }
            } catch (error) {
              const code = (error as { code?: string }).code;
              if (code === undefined || !REFUSALS.has(code)) throw error;
            }
            // Fold what this step appended, then compare the live tables with the projection.
            const fresh = await store.substrate.transaction((tx) => tx.chain.range(folded, 1_000));
            for (const entry of fresh) await replayer.applyEntry(folded++, entry);
            const differences = await compareSnapshots(store.substrate, replayer.projection);
            expect(differences, `after ${step.op}`).toEqual([]);
          }
          // Every decision the engine wrote was re-derived through the machine, none folded on its verdict.
          const chain = await store.substrate.transaction((tx) => tx.chain.range(0, 100_000));
          expect(replayer.verdictsChecked).toBe(chain.filter((e) => e.kind === "decision").length);
          expect(replayer.provedFrom).toBe(0);
        } finally {
          await store.close();
        }
      }),
      { numRuns: RUNS[kind], seed: 20_2612 },
    );
  }, 120_000);
});
