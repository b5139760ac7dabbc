// 8 OS processes × 500 calls racing on one budget, through one SQLite file and through PostgreSQL.
// Every session receives the same nonce from all 8 processes at about the same moment.
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { generateKeyPair, verifyChain } from "@leash/chain";
import { beforeAll, describe, expect, it } from "vitest";
import { createEngine } from "../src/index.js";
import { ensureBuilt } from "./build.js";
import { type OpenedStore, openStore } from "./substrates.js";

const run = promisify(execFile);
const WORKER = fileURLToPath(new URL("./race-worker.mjs", import.meta.url));
const PROCESSES = 8;
const SESSIONS = 500;
const ESTIMATE = "0.01";
const BUDGET = 2.5; // room for 250 of the 500 sessions' calls

describe.each(["sqlite", "postgres"] as const)("%s: 8 processes × 500 calls on one budget", (kind) => {
  beforeAll(() => ensureBuilt());

  it("never overspends, accepts each nonce at most once, and leaves denied sessions untouched", async () => {
    const store: OpenedStore = await openStore(kind);
    try {
      const key = generateKeyPair();
      const engine = createEngine({ substrate: store.substrate, signer: key.signer });
      const config = { budget_usd: BUDGET, budget_scope: "agent" as const };
      const ids: string[] = [];
      for (let i = 0; i < SESSIONS; i++)
        ids.push((await engine.register({ agent_id: "racer", config })).session_id);

      const outputs = await Promise.all(
        Array.from({ length: PROCESSES }, () =>
          run(process.execPath, [WORKER, store.url!, JSON.stringify(ids), ESTIMATE], {
            maxBuffer: 64 << 20,
            timeout: 240_000,
            env: { ...process.env, LEASH_SIGNING_KEY: key.privateKeyPem },
          }),
        ),
      );
      const results = outputs.flatMap((o) => JSON.parse(o.stdout) as [string, string, string, number][]);
      expect(results).toHaveLength(PROCESSES * SESSIONS);

      const allowedBySession = new Map<string, number>();
      for (const [id, verdict] of results)
        if (verdict === "ALLOW") allowedBySession.set(id, (allowedBySession.get(id) ?? 0) + 1);
      // No nonce accepted twice: at most one ALLOW per session, and exactly as many as the budget pays for.
      expect(Math.max(...allowedBySession.values())).toBe(1);
      expect(allowedBySession.size).toBe(BUDGET / Number(ESTIMATE));

      const reasons = new Set(results.filter((r) => r[1] !== "ALLOW").map((r) => r[2]));
      for (const reason of reasons) {
        expect([
          "policy_violation:duplicate_nonce",
          "circuit_open",
          "budget_exhausted",
          "budget_overrun",
        ]).toContain(reason);
      }

      const settled = await store.substrate.transaction(async (tx) => {
        const reservations = await tx.budgets.listReservations({});
        const account = await tx.budgets.getAccount("agent:default/racer");
        const sessions = await Promise.all(ids.map((id) => tx.sessions.get(id)));
        const chain = await tx.chain.range(0, 1_000_000);
        return { reservations, account, sessions, chain };
      });
      // Every ALLOW has its reservation, settled; nothing else holds or spends money.
      expect(settled.reservations).toHaveLength(allowedBySession.size);
      expect(
        settled.reservations.every((r) => r.status === "SETTLED" && allowedBySession.has(r.session_id)),
      ).toBe(true);
      const spent =
        settled.reservations.reduce((sum, r) => sum + Math.round(Number(r.actual_usd) * 100), 0) / 100;
      expect(spent).toBeLessThanOrEqual(BUDGET);
      expect(settled.account?.spent_usd).toBe("2.5");
      expect(settled.account?.reserved_usd).toBe("0");
      // Every decision of every process is in the one chain, which verifies end to end.
      const decisions = settled.chain.filter((e) => e.kind === "decision");
      expect(decisions).toHaveLength(PROCESSES * SESSIONS);
      expect((await verifyChain(settled.chain, { publicKeys: [key.signer.publicKeyHex] })).ok).toBe(true);
      // A DENY changes nothing but the circuit: denied-only sessions counted no call and spent nothing.
      for (const s of settled.sessions) {
        const won = allowedBySession.has(s!.session_id);
        expect(s!.state.total_calls).toBe(won ? 1 : 0);
        expect(s!.call_count).toBe(PROCESSES);
        if (!won) expect(s!.state.circuit_tripped).toBe(true);
      }
    } finally {
      await store.close();
    }
  }, 300_000);
});
