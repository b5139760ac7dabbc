// The client's behaviour beyond failing closed: late answers, HITL, the heartbeat loop, register, and
// errors that the engine's isInstance recognizes. In-test daemons on @leash/wire, real Unix sockets.
import { create } from "@bufbuild/protobuf";
import { LeashDenied as EngineLeashDenied, LeashError as EngineLeashError } from "@leash/engine";
import {
  GuardConfigSchema,
  HeartbeatAckSchema,
  PreExecResponseSchema,
  RegisterResponseSchema,
  Verdict,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { type Client, createClient, guard, LeashDenied, LeashError, LeashHitl } from "../src/index.js";
import { answer, KEY, type Responder, startFakeDaemon, tempSocketPath, verdictFor } from "./fake-daemon.js";

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setUp(respond: Responder, extra: Partial<Parameters<typeof createClient>[0]> = {}) {
  const s = tempSocketPath();
  cleanups.push(s.cleanup);
  const daemon = await startFakeDaemon(s.path, respond);
  cleanups.push(() => daemon.close());
  const client: Client = createClient({
    socketPath: s.path,
    organizationId: "acme",
    agentId: "research-bot",
    hmacKey: Buffer.from(KEY).toString("hex"),
    keyId: "k1",
    heartbeatIntervalMs: 0,
    timeoutMs: 2000,
    ...extra,
  });
  cleanups.push(() => client.close());
  return { daemon, client };
}

describe("client behaviour", () => {
  it("a late answer to a call that timed out is ignored; the next call is served on the same connection", async () => {
    let n = 0;
    const { client, daemon } = await setUp(
      (request, s) => {
        const delay = ++n === 1 ? 300 : 0; // the first answer comes after the client gave up
        setTimeout(() => s.write(answer(request, verdictFor(request, "ALLOW", "within_thresholds"))), delay);
      },
      { timeoutMs: 100 },
    );
    const first = await client.preExec({ session_id: "s1", tool_name: "t" });
    expect(first).toMatchObject({ verdict: "DENY", reason: "fail_closed:timeout" });
    await new Promise((r) => setTimeout(r, 400)); // the late answer arrives meanwhile
    const second = await client.preExec({ session_id: "s1", tool_name: "t" });
    expect(second).toMatchObject({ verdict: "ALLOW", reason: "within_thresholds", fail_closed: false });
    expect(daemon.accepted).toBe(1); // no reconnect: the late answer did not poison the stream
  });

  it("HITL throws LeashHitl and the tool does not run", async () => {
    const { client } = await setUp((request, s) => {
      if (request.payload.case !== "preExec") return;
      const value = create(PreExecResponseSchema, {
        sessionId: request.payload.value.sessionId,
        callNumber: 1n,
        verdict: Verdict.HITL,
        reason: "hitl_all_calls",
      });
      s.write(answer(request, { case: "preExecResponse", value }));
    });
    const runs: unknown[] = [];
    const tool = guard(client, { session_id: "s1", tool_name: "t" }, async () => runs.push(1));
    const error = await tool().catch((e: unknown) => e);
    expect(LeashHitl.isInstance(error)).toBe(true);
    expect((error as LeashHitl).reason).toBe("hitl_all_calls");
    expect((error as LeashHitl).code).toBe("hitl_required");
    expect(runs).toEqual([]);
  });

  it("an unknown verdict value is DENY (fail closed, shackle.proto Verdict)", async () => {
    const { client } = await setUp((request, s) => {
      if (request.payload.case !== "preExec") return;
      const value = create(PreExecResponseSchema, {
        sessionId: request.payload.value.sessionId,
        callNumber: 1n,
        verdict: 42 as Verdict,
        reason: "within_thresholds",
      });
      s.write(answer(request, { case: "preExecResponse", value }));
    });
    const runs: unknown[] = [];
    const tool = guard(client, { session_id: "s1", tool_name: "t" }, async () => runs.push(1));
    expect(LeashDenied.isInstance(await tool().catch((e: unknown) => e))).toBe(true);
    expect(runs).toEqual([]);
  });

  it("register returns the daemon's policy, then the heartbeat loop runs for that session", async () => {
    const { client, daemon } = await setUp(
      (request, s) => {
        if (request.payload.case === "register") {
          const activeConfig = create(GuardConfigSchema, {
            budgetUsd: 0.5,
            budgetUsdDecimal: "0.5",
            maxRepeatCalls: 3,
          });
          const value = create(RegisterResponseSchema, {
            sessionId: "sess-1",
            negotiatedProtocol: "1.0.0",
            activeConfig,
          });
          s.write(answer(request, { case: "registerResponse", value }));
        } else if (request.payload.case === "heartbeat") {
          const value = create(HeartbeatAckSchema, {
            sessionId: request.payload.value.sessionId,
            daemonBudgetRemaining: 0.5,
            daemonBudgetRemainingDecimal: "0.5",
          });
          s.write(answer(request, { case: "heartbeatAck", value }));
        }
      },
      { heartbeatIntervalMs: 20 },
    );
    const registered = await client.register({ metadata: { team: "r" } });
    expect(registered).toMatchObject({ session_id: "sess-1", negotiated_protocol: "1.0.0" });
    expect(registered.active_config?.budgetUsdDecimal).toBe("0.5");
    expect(client.sessionId).toBe("sess-1");
    const sent = daemon.received[0]?.payload;
    expect(sent?.case === "register" && [sent.value.organizationId, sent.value.agentId]).toEqual([
      "acme",
      "research-bot",
    ]);
    for (
      let i = 0;
      i < 100 && daemon.received.filter((e) => e.payload.case === "heartbeat").length < 3;
      i++
    ) {
      await new Promise((r) => setTimeout(r, 20));
    }
    const beats = daemon.received.filter((e) => e.payload.case === "heartbeat");
    expect(beats.length).toBeGreaterThanOrEqual(3);
    expect(beats.every((e) => e.payload.case === "heartbeat" && e.payload.value.sessionId === "sess-1")).toBe(
      true,
    );
    await expect(client.heartbeat()).resolves.toMatchObject({ daemon_budget_remaining_usd: "0.5" });
  });

  it("register against no daemon throws LeashError DAEMON_UNAVAILABLE (no session, so nothing can run)", async () => {
    const s = tempSocketPath();
    cleanups.push(s.cleanup);
    const client = createClient({
      socketPath: s.path,
      organizationId: "acme",
      agentId: "a",
      hmacKey: KEY,
      keyId: "k1",
    });
    cleanups.push(() => client.close());
    const error = await client.register().catch((e: unknown) => e);
    expect(LeashError.isInstance(error) && error.code).toBe("daemon_unavailable");
  });

  it("the client's LeashDenied is recognized by the engine's isInstance, and the engine's by the client's", async () => {
    const { client } = await setUp((request, s) =>
      s.write(answer(request, verdictFor(request, "DENY", "budget_exhausted"))),
    );
    const tool = guard(client, { session_id: "s1", tool_name: "t" }, async () => 1);
    const error = await tool().catch((e: unknown) => e);
    expect(EngineLeashError.isInstance(error)).toBe(true);
    expect(EngineLeashDenied.isInstance(error)).toBe(true);
    const engineDenied = new EngineLeashDenied({
      session_id: "s1",
      call_number: 1,
      verdict: "DENY",
      reason: "budget_exhausted",
      budget_remaining_usd: null,
      reservation_id: null,
      rng: null,
      params_hash: null,
      entry_seq: 1,
      entry_hash: "",
      receipt: "",
    });
    expect(LeashDenied.isInstance(engineDenied)).toBe(true);
    expect([(error as LeashDenied).name, (error as LeashDenied).code]).toEqual([
      engineDenied.name,
      engineDenied.code,
    ]);
  });
});
