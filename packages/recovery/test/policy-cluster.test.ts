// Two engines on one store, as two daemons on one PostgreSQL (or one SQLite file, or one memory store):
// a policy's rate and USD budget limits hold for both together (a limit of 5 allows exactly 5 calls),
// a third engine started afterwards counts on from the chain, and replay re-derives every verdict.
import { generateKeyPair } from "@leash/chain";
import type { Substrate } from "@leash/core";
import { createEngine, type EvaluateResult } from "@leash/engine";
import { loadPolicy } from "@leash/policy";
import { afterEach, describe, expect, it } from "vitest";
import { compareSnapshots, replayChain } from "../src/index.js";
import { KINDS, type Kind, manualClock, openStore, type TestStore } from "./support.js";

const KEY = generateKeyPair();
const POLICY = loadPolicy({
  version: 1,
  name: "cluster",
  rules: [
    {
      name: "search-rate",
      match: { tool: "search" },
      action: { rate: { limit: 5, window_s: 60, per: "agent" } },
    },
    {
      name: "pay-budget",
      match: { tool: "pay" },
      action: { budget_usd: { limit: 0.05, period: "day", per: "agent" } },
    },
  ],
});
const SESSIONS = 4;
const CALLS = 8;

describe.each(KINDS)("two engines on one %s store", (kind: Kind) => {
  let store: TestStore | undefined;
  const others: Substrate[] = [];
  afterEach(async () => {
    for (const s of others.splice(0)) await s.close?.();
    await store?.close();
    store = undefined;
  });

  it("share each limit: exactly 5 ALLOWs for a rate of 5 and for a $0.05 budget, from both together", async () => {
    store = await openStore(kind);
    // One clock for both: every call falls in the same window and day.
    const clock = manualClock();
    const second = kind === "memory" ? store.substrate : await store.another();
    if (second !== store.substrate) others.push(second);
    const engines = [store.substrate, second].map((substrate) =>
      createEngine({ substrate, signer: KEY.signer, clock, policy: POLICY }),
    );
    let nonce = 0;
    /** Every session of each engine calls `tool` CALLS times, all at once on both engines. */
    const hammer = async (tool: string, phase: string): Promise<EvaluateResult[]> => {
      const sessions = await Promise.all(
        engines.flatMap((engine, e) =>
          Array.from({ length: SESSIONS }, (_, i) =>
            engine.register({ agent_id: "bot", session_id: `${phase}-${e}-${i}`, config: {} }),
          ),
        ),
      );
      return Promise.all(
        sessions.flatMap((s, k) =>
          Array.from({ length: CALLS }, (_, c) =>
            engines[Math.floor(k / SESSIONS)]!.evaluate({
              session_id: s.session_id,
              tool_name: tool,
              params: { c },
              nonce: `n${nonce++}`,
              estimated_cost_usd: 0.01,
            }),
          ),
        ),
      );
    };
    const allowed = (results: EvaluateResult[]) => results.filter((r) => r.verdict === "ALLOW").length;

    const searches = await hammer("search", "search");
    expect(allowed(searches)).toBe(5);
    expect(searches.some((r) => r.reason === "policy_violation:rule:search-rate")).toBe(true);
    const pays = await hammer("pay", "pay");
    expect(allowed(pays)).toBe(5);
    expect(pays.some((r) => r.reason === "policy_violation:rule:pay-budget")).toBe(true);
    // Both engines allowed some (the limit is not one engine's alone) when they raced on a real store.
    const byEngine = (results: EvaluateResult[], e: number) =>
      allowed(results.slice(e * SESSIONS * CALLS, (e + 1) * SESSIONS * CALLS));
    expect(byEngine(searches, 0) + byEngine(searches, 1)).toBe(5);

    // A third engine, started now, counts on from the chain: both limits are reached.
    const third = createEngine({ substrate: store.substrate, signer: KEY.signer, clock, policy: POLICY });
    await third.register({ agent_id: "bot", session_id: "late", config: {} });
    const late = await third.evaluate({ session_id: "late", tool_name: "search", params: {}, nonce: "l1" });
    expect(late.reason).toBe("policy_violation:rule:search-rate");

    const chain = await store.substrate.transaction((tx) => tx.chain.range(0, 100_000));
    const replayed = await replayChain(chain);
    expect(replayed.mismatch).toBeNull();
    expect(replayed.verdicts_checked).toBe(2 * 2 * SESSIONS * CALLS + 1);
    expect(await compareSnapshots(store.substrate, replayed.projection)).toEqual([]);
  }, 120_000);
});
