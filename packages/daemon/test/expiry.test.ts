// The issue #31 case on a live daemon: an ALLOW of 0.60 on a $1 budget whose post-exec never arrives.
// Past the hold's TTL the daemon charges it (settled_by_expiry), so a call of 0.90 is DENIED; a late
// post-exec corrects the charge to the actual, and the chain still replays. On SQLite and PostgreSQL.
import { create } from "@bufbuild/protobuf";
import { verifyChain } from "@leash/chain";
import { replayChain } from "@leash/recovery";
import type { StoreKind } from "@leash/test-stores";
import {
  PostExecNotificationSchema,
  PreExecRequestSchema,
  RegisterRequestSchema,
  Verdict,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { RawClient } from "./raw-client.js";
import { ACME, type Running, runDaemon } from "./support.js";

const preExec = (sessionId: string, n: bigint, estimate: string) => ({
  case: "preExec" as const,
  value: create(PreExecRequestSchema, {
    sessionId,
    callNumber: n,
    toolName: "search",
    toolParamsJson: `{"n":${n}}`,
    estimatedCostUsdDecimal: estimate,
    nonce: n,
  }),
});

describe.each(["sqlite", "postgres"] as StoreKind[])("an unsettled hold on a live daemon (%s)", (kind) => {
  let running: Running | undefined;
  afterEach(async () => {
    await running?.stop();
    running = undefined;
  });

  it("is charged at its estimate past its TTL; a call of 0.90 is then DENIED; a late post-exec corrects it", async () => {
    running = await runDaemon(kind, { extra: { reservation_ttl_s: 1 } }); // the shortest a daemon accepts
    const client = await RawClient.connect(running.socket, ACME);
    try {
      const registered = await client.request({
        case: "register",
        value: create(RegisterRequestSchema, { agentId: "spender" }),
      });
      const sid = (registered.payload.value as { sessionId: string }).sessionId;
      const allowed = await client.request(preExec(sid, 1n, "0.6"));
      expect(allowed.payload.value).toMatchObject({
        verdict: Verdict.ALLOW,
        budgetRemainingUsdDecimal: "0.4",
      });

      // No post-exec arrives (an SP/1.0 client's notification lost with a dead daemon): the sweeper
      // charges the hold once its TTL has passed.
      const chain = () => running!.store.substrate.transaction((tx) => tx.chain.range(0, 100_000));
      for (let waited = 0; !(await chain()).some((e) => e.kind === "settled_by_expiry"); waited += 50) {
        if (waited > 30_000) throw new Error("the hold was never charged");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const refused = await client.request(preExec(sid, 2n, "0.9"));
      expect(refused.payload.value).toMatchObject({
        verdict: Verdict.DENY,
        budgetRemainingUsdDecimal: "0.4",
      });

      const late = await client.request({
        case: "postExec",
        value: create(PostExecNotificationSchema, {
          sessionId: sid,
          callNumber: 1n,
          actualCostUsdDecimal: "0.25",
          success: true,
          ackRequested: true,
        }),
      });
      expect(late.payload).toMatchObject({
        case: "postExecAck",
        value: { replayed: false, budgetRemainingUsdDecimal: "0.75" },
      });
      const entries = await chain();
      const expiry = entries.find((e) => e.kind === "settled_by_expiry")!;
      expect(JSON.parse(expiry.body).data).toMatchObject({
        session_id: sid,
        call_number: 1,
        charged_usd: "0.6",
      });
      const settlement = entries.filter((e) => e.kind === "post_exec").map((e) => JSON.parse(e.body).data);
      expect(settlement).toMatchObject([{ actual_usd: "0.25", late: true, hold_status: "EXPIRED" }]);
      expect((await verifyChain(entries, { publicKeys: [running.key.publicKeyHex] })).ok).toBe(true);
      const replayed = await replayChain(entries);
      expect(replayed.mismatch).toBeNull();
    } finally {
      client.close();
    }
  }, 60_000);
});
