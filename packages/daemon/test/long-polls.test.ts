// Socket long polls (wait_hitl, tail_entries) a client gave up on: they take no in-flight slot, so PreExec
// on the same connection is still answered, and past the per-connection cap the oldest is superseded.
import { create } from "@bufbuild/protobuf";
import {
  type Envelope,
  ErrorCode,
  HitlDecisionKind,
  HitlDecisionSchema,
  HitlStatus,
  PreExecRequestSchema,
  paramsToJson,
  RegisterRequestSchema,
  TailRequestSchema,
  Verdict,
  WaitHitlRequestSchema,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { RawClient } from "./raw-client.js";
import { ACME, type Running, runDaemon } from "./support.js";

let running: Running | undefined;
afterEach(async () => {
  await running?.stop();
  running = undefined;
});

/** A session of acme paused on a HITL request (hitl_mode always), made through the daemon's engine. */
async function paused(r: Running): Promise<{ sessionId: string; requestId: string }> {
  const session = await r.daemon.engine.register({
    agent_id: "hitl-bot",
    organization_id: "acme",
    config: { hitl_mode: "always" },
  });
  const result = await r.daemon.engine.evaluate({ session_id: session.session_id, tool_name: "deploy" });
  return { sessionId: session.session_id, requestId: result.hitl_request_id! };
}

const waitHitl = (client: RawClient, request: { sessionId: string; requestId: string }, timeoutMs: number) =>
  client.request({ case: "waitHitl", value: create(WaitHitlRequestSchema, request) }, { timeoutMs });

/** Sends a request and stops waiting for it after `ms` (what a cancelled MCP request or an aborted tail does). */
const abandon = (answer: Promise<Envelope>) =>
  answer.then(
    () => "answered",
    () => "abandoned",
  );

describe("socket long polls", () => {
  it("abandoned wait_hitl and tail_entries polls hold no in-flight slot: PreExec on the connection is answered", async () => {
    running = await runDaemon("sqlite", { maxInFlight: 2 });
    const hitl = await paused(running);
    const client = await RawClient.connect(running.socket, ACME);
    const reg = await client.request({
      case: "register",
      value: create(RegisterRequestSchema, { agentId: "research-bot", organizationId: "acme" }),
    });
    const sessionId = (reg.payload.value as { sessionId: string }).sessionId;

    // Five polls the daemon would hold for minutes (the HITL expiry; 60 s of tail wait), each given up
    // on by this side after 50 ms — more than maxInFlight of them.
    const gaveUp = await Promise.all([
      ...Array.from({ length: 3 }, () => abandon(waitHitl(client, hitl, 50))),
      ...Array.from({ length: 2 }, () =>
        abandon(
          client.request(
            {
              case: "tailEntries",
              value: create(TailRequestSchema, { last: 0, follow: true, waitMs: 60_000 }),
            },
            { timeoutMs: 50 },
          ),
        ),
      ),
    ]);
    expect(gaveUp).toEqual(Array.from({ length: 5 }, () => "abandoned"));

    // Ordinary calls on the same connection: answered (two at once fill maxInFlight, never RATE_LIMITED).
    const answers = await Promise.all(
      [1, 2].map((n) =>
        client.request({
          case: "preExec",
          value: create(PreExecRequestSchema, {
            sessionId,
            callNumber: BigInt(n),
            toolName: `tool_${n}`,
            toolParamsJson: paramsToJson({}),
            estimatedCostUsd: 0.001,
            estimatedCostUsdDecimal: "0.001",
          }),
        }),
      ),
    );
    expect(answers.map((a) => [a.payload.case, (a.payload.value as { verdict?: Verdict }).verdict])).toEqual([
      ["preExecResponse", Verdict.ALLOW],
      ["preExecResponse", Verdict.ALLOW],
    ]);
    client.close();
  });

  it("past maxLongPolls on one connection the oldest poll is answered RATE_LIMITED long_poll_superseded; the rest get the answer", async () => {
    running = await runDaemon("sqlite", { maxLongPolls: 2 });
    const hitl = await paused(running);
    const client = await RawClient.connect(running.socket, ACME);
    const outcomes: Array<Promise<Envelope>> = [];
    for (let i = 0; i < 3; i++) {
      outcomes.push(waitHitl(client, hitl, 30_000));
      // In order: the first must be the oldest when the third arrives.
      await new Promise((r) => setTimeout(r, 50));
    }
    const oldest = await outcomes[0]!;
    expect(oldest.payload).toMatchObject({
      case: "error",
      value: { code: ErrorCode.RATE_LIMITED, detail: "long_poll_superseded" },
    });
    await running.daemon.hitl.answer(
      hitl.requestId,
      create(HitlDecisionSchema, { kind: HitlDecisionKind.HITL_DECISION_APPROVE }),
      "alice",
    );
    for (const later of await Promise.all(outcomes.slice(1))) {
      expect(later.payload.case).toBe("hitlUpdate");
      expect((later.payload.value as { request?: { status: HitlStatus } }).request?.status).toBe(
        HitlStatus.HITL_DECIDED,
      );
    }
    // The superseded poll's own answer never follows: nothing arrived unpaired.
    expect(client.unpaired).toEqual([]);
    client.close();
  });
});
