// SP/1.0 Appendix A end to end over the Unix socket, on SQLite and PostgreSQL: a raw wire client, a real
// daemon in process, a real store. Every receipt verifies with the daemon's public key; the chain verifies.
import { create } from "@bufbuild/protobuf";
import { verifyChain } from "@leash/chain";
import { verifyReceipt } from "@leash/receipts";
import {
  DenyReason,
  ErrorCode,
  GetSessionStateRequestSchema,
  HeartbeatSchema,
  PostExecNotificationSchema,
  PreExecRequestSchema,
  type PreExecResponse,
  paramsDigest,
  paramsToJson,
  RegisterRequestSchema,
  Verdict,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { RawClient } from "./raw-client.js";
import { ACME, GLOBEX, type Running, runDaemon } from "./support.js";

const PARAMS = { query: "leash sidecar" };

describe.each(["sqlite", "postgres"] as const)("Appendix A over the socket on %s", (kind) => {
  let running: Running | undefined;
  afterEach(async () => {
    await running?.stop();
    running = undefined;
  });

  it("register → ALLOW 0.498 → postExec 0.0015 → repeats → DENY max_repeat_exceeded → circuit_open; receipts and chain verify", async () => {
    running = await runDaemon(kind);
    const client = await RawClient.connect(running.socket, ACME);
    const registered = await client.request({
      case: "register",
      value: create(RegisterRequestSchema, {
        agentId: "research-bot",
        framework: "crewai",
        organizationId: "acme",
      }),
    });
    expect(registered.payload.case).toBe("registerResponse");
    if (registered.payload.case !== "registerResponse") return;
    const reg = registered.payload.value;
    expect(reg.negotiatedProtocol).toBe("1.0.0");
    // The policy is the daemon's for acme/research-bot, never the agent's.
    expect(reg.activeConfig?.budgetUsdDecimal).toBe("0.5");
    expect(reg.activeConfig?.maxRepeatCalls).toBe(3);
    expect(reg.activeConfig?.deniedTools).toEqual(["delete_file"]);
    const sessionId = reg.sessionId;

    const preExec = async (callNumber: number): Promise<PreExecResponse> => {
      const answer = await client.request({
        case: "preExec",
        value: create(PreExecRequestSchema, {
          sessionId,
          callNumber: BigInt(callNumber),
          toolName: "web_search",
          toolParamsJson: paramsToJson(PARAMS),
          toolParamsHash: paramsDigest(PARAMS),
          estimatedCostUsd: 0.002,
          estimatedCostUsdDecimal: "0.002",
        }),
      });
      expect(
        answer.payload.case,
        JSON.stringify(answer.payload.value, (_, v) => (typeof v === "bigint" ? String(v) : v)),
      ).toBe("preExecResponse");
      return answer.payload.value as PreExecResponse;
    };

    const responses: PreExecResponse[] = [];
    const first = await preExec(1);
    responses.push(first);
    expect([first.verdict, first.reason, first.budgetRemainingUsdDecimal]).toEqual([
      Verdict.ALLOW,
      "within_thresholds",
      "0.498",
    ]);
    expect(first.budgetRemainingUsd).toBe(0.498);
    expect(first.callNumber).toBe(1n);

    // PostExec is fire-and-forget; a GetSessionState after it on the same connection sees it settled.
    client.notify({
      case: "postExec",
      value: create(PostExecNotificationSchema, {
        sessionId,
        callNumber: 1n,
        actualCostUsd: 0.0015,
        actualCostUsdDecimal: "0.0015",
        success: true,
      }),
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const state = await client.request({
      case: "getSessionState",
      value: create(GetSessionStateRequestSchema, { sessionId }),
    });
    expect(state.payload.case).toBe("sessionState");
    if (state.payload.case === "sessionState") {
      expect(state.payload.value.budgetRemainingUsdDecimal).toBe("0.4985");
      expect(state.payload.value.budgetSpentUsdDecimal).toBe("0.0015");
    }

    for (const n of [2, 3]) {
      const r = await preExec(n);
      responses.push(r);
      expect([r.verdict, r.reason]).toEqual([Verdict.ALLOW, "within_thresholds"]);
    }
    expect(responses[1]!.budgetRemainingUsdDecimal).toBe("0.4965");
    const fourth = await preExec(4);
    responses.push(fourth);
    expect([fourth.verdict, fourth.reason, fourth.denyReason]).toEqual([
      Verdict.DENY,
      "max_repeat_exceeded",
      DenyReason.MAX_REPEAT_EXCEEDED,
    ]);
    const fifth = await preExec(5);
    responses.push(fifth);
    expect([fifth.verdict, fifth.reason, fifth.denyReason]).toEqual([
      Verdict.DENY,
      "circuit_open",
      DenyReason.CIRCUIT_OPEN,
    ]);

    // Every PreExecResponse field the spec defines (§4.3), as Appendix A shows them: call 2 counts one
    // identical call before it, the DENY of call 4 three (and call 5, circuit_open, still sees three).
    expect(responses.map((r) => r.repeatCount)).toEqual([0, 1, 2, 3, 3]);
    for (const [i, r] of responses.entries()) {
      expect(r.sessionId).toBe(sessionId);
      expect(r.callNumber).toBe(BigInt(i + 1));
      expect(r.humanReadableReason).toContain(r.reason);
      expect(r.daemonTimeNs).toBeGreaterThan(0n);
      expect(r.probabilisticDeny).toBe(false);
    }
    expect(responses.map((r) => r.budgetRemainingUsd)).toEqual([0.498, 0.4965, 0.4945, 0.4945, 0.4945]);
    expect(responses[3]!.denyReason).toBe(DenyReason.MAX_REPEAT_EXCEEDED);

    const hb = await client.request({
      case: "heartbeat",
      value: create(HeartbeatSchema, {
        sessionId,
        lastCallNumber: 5n,
        localBudgetRemainingDecimal: "0.4965",
      }),
    });
    expect(hb.payload.case).toBe("heartbeatAck");
    if (hb.payload.case === "heartbeatAck") {
      expect(hb.payload.value.daemonBudgetRemainingDecimal).toBe("0.4945");
      expect(hb.payload.value.driftDetected).toBe(true);
    }

    // Another organization's key cannot reach acme's session.
    const other = await RawClient.connect(running.socket, GLOBEX);
    const foreign = await other.request({
      case: "getSessionState",
      value: create(GetSessionStateRequestSchema, { sessionId }),
    });
    expect(foreign.payload.case).toBe("error");
    if (foreign.payload.case === "error")
      expect(foreign.payload.value.code).toBe(ErrorCode.SESSION_NOT_FOUND);
    other.close();

    const entries = await running.store.substrate.transaction((tx) => tx.chain.range(0, 1000));
    for (const r of responses) {
      const checked = await verifyReceipt(r.receipt, running.key.publicKeyHex);
      expect(checked.ok, JSON.stringify(checked)).toBe(true);
      expect(entries[Number(r.chainSeq)]?.entry_hash).toBe(r.entryHash);
    }
    expect((await verifyChain(entries, { publicKeys: [running.key.publicKeyHex] })).ok).toBe(true);
    client.close();
  });
});
