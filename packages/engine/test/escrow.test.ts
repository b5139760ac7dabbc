// Two engines, each one shard (withEscrow), on one PostgreSQL (and on SQLite and memory for the basics),
// sharing one organization budget of a few dollars under concurrent load: zero overspend, none stranded.
import { checkEscrow, escrowOf } from "@leash/budget-guard";
import { generateKeyPair } from "@leash/chain";
import { describe, expect, it } from "vitest";
import { createEngine, withEscrow } from "../src/index.js";
import { openStore } from "./substrates.js";

const ORG_ACCOUNT = "org:acme";
const COST = 0.01;
/** A denial for money (rule 5/5b or the ledger), or the circuit a denial tripped: nothing else is expected. */
const BUDGET_DENIALS = new Set(["budget_exhausted", "budget_overrun", "circuit_open"]);

async function invariants(substrate: import("@leash/core").Substrate) {
  return substrate.transaction(async (tx) => {
    const account = (await tx.budgets.getAccount(ORG_ACCOUNT))!;
    const rows = await tx.allotments!.list(ORG_ACCOUNT);
    return { account, rows, violations: checkEscrow(escrowOf(account, rows)) };
  });
}

describe.each(["postgres", "sqlite", "memory"] as const)(
  "%s: two shard engines share one org budget in escrow",
  (kind) => {
    it("allow exactly what the budget pays for, never more, and release every allotment", {
      timeout: 120_000,
    }, async () => {
      const store = await openStore(kind);
      try {
        const key = generateKeyPair();
        const second = kind === "memory" ? store.substrate : await store.another();
        const budget = kind === "postgres" ? 3 : 1; // $3: 300 calls of $0.01
        const shards = [store.substrate, second].map((substrate, i) =>
          withEscrow(substrate, {
            shard: i,
            holder: `daemon-${i}`,
            epoch: 1,
            leaseExpiresNs: () => Date.now() * 1e6 + 60e9,
            activeShards: () => 2,
            minChunk_usd: "0.01",
            maxChunk_usd: "0.5",
            intervalMs: 10,
            idleMs: 50,
          }),
        );
        const engines = shards.map((substrate) =>
          createEngine({ substrate, signer: key.signer, trustedKeys: [key.signer.publicKeyHex] }),
        );
        const config = { budget_usd: budget, budget_scope: "organization" as const };
        const sessions = await Promise.all(
          engines.map(async (engine, i) => {
            const ids: string[] = [];
            for (let s = 0; s < 8; s++) {
              ids.push(
                (await engine.register({ agent_id: `a${i}`, organization_id: "acme", config })).session_id,
              );
            }
            return ids;
          }),
        );
        const wanted = Math.round(budget / COST) + 60; // more calls than the budget pays for
        let allowed = 0;
        const otherReasons: string[] = [];
        await Promise.all(
          engines.map(async (engine, i) => {
            // 8 sessions of this shard at once, one call after another each.
            await Promise.all(
              sessions[i]!.map(async (session_id, s) => {
                for (let n = 0; n < wanted / 16; n++) {
                  const r = await engine.evaluate({
                    session_id,
                    tool_name: "pay",
                    params: { n, s },
                    nonce: `n-${n}`,
                    estimated_cost_usd: COST,
                  });
                  if (r.verdict === "ALLOW") {
                    allowed++;
                    await engine.postExec({ session_id, call_number: r.call_number, actual_cost_usd: COST });
                  } else if (!BUDGET_DENIALS.has(String(r.reason))) {
                    otherReasons.push(String(r.reason));
                  }
                }
              }),
            );
          }),
        );
        const before = await invariants(store.substrate);
        expect(before.violations).toEqual([]);
        // Both shards decided on allotments: the shared row itself has not been charged a cent yet.
        expect(shards.every((s) => s.escrow.accounts.has(ORG_ACCOUNT))).toBe(true);
        expect(before.account.spent_usd).toBe("0");
        expect(before.account.reserved_usd).toBe("0");
        // Some allotment may still sit on a shard; the next calls of the other shard get it back by
        // asking (inline) once the idle one returned it. Drain until the budget is spent.
        for (let round = 0; round < 50 && allowed < budget / COST; round++) {
          await Promise.all(shards.map((s) => s.escrow.tick()));
          await new Promise((r) => setTimeout(r, 60));
          await Promise.all(shards.map((s) => s.escrow.tick()));
          for (const [i, engine] of engines.entries()) {
            // A fresh session: a denial above tripped the circuit of the ones before.
            const { session_id } = await engine.register({
              agent_id: `d${i}`,
              organization_id: "acme",
              config,
            });
            const r = await engine.evaluate({
              session_id,
              tool_name: "pay",
              params: { round },
              nonce: `drain-${round}`,
              estimated_cost_usd: COST,
            });
            if (r.verdict === "ALLOW") {
              allowed++;
              await engine.postExec({ session_id, call_number: r.call_number, actual_cost_usd: COST });
            }
          }
        }
        expect(otherReasons).toEqual([]);
        expect(allowed).toBe(Math.round(budget / COST)); // all of it usable, not a cent more
        for (const s of shards) await s.escrow.release();
        const after = await invariants(store.substrate);
        expect(after.rows).toEqual([]);
        expect(after.violations).toEqual([]);
        expect(Number(after.account.spent_usd)).toBeCloseTo(budget, 10);
        expect(after.account.spent_usd).toBe(String(budget));
        for (const engine of engines) await engine.close();
      } finally {
        await store.close();
      }
    });
  },
);
