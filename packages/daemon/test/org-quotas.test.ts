// One organization cannot starve another, over a real socket: each has its own replay window, tails, in-flight
// and rate quota; only an admitted request takes a replay slot; a half-closed connection ends its polls at once.
import { create } from "@bufbuild/protobuf";
import {
  type Envelope,
  ErrorCode,
  HeartbeatAckSchema,
  HeartbeatSchema,
  PreExecRequestSchema,
  paramsToJson,
  RegisterRequestSchema,
  TailRequestSchema,
  Verdict,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { RawClient } from "./raw-client.js";
import { ACME, GLOBEX, type Running, runDaemon } from "./support.js";

let running: Running | undefined;
const clients: RawClient[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  await running?.stop();
  running = undefined;
});

async function client(key = ACME): Promise<RawClient> {
  const c = await RawClient.connect(running!.socket, key);
  clients.push(c);
  return c;
}

const detailOf = (envelope: Envelope) =>
  envelope.payload.case === "error"
    ? `${ErrorCode[envelope.payload.value.code]}:${envelope.payload.value.detail}`
    : envelope.payload.case;

const heartbeat = (sessionId: string) => ({
  case: "heartbeat" as const,
  value: create(HeartbeatSchema, { sessionId }),
});

/** globex: registers, gets an ALLOW, reads its tail. */
async function globexWorks(): Promise<void> {
  const beta = await client(GLOBEX);
  const reg = await beta.request({
    case: "register",
    value: create(RegisterRequestSchema, { agentId: "beta-bot", organizationId: "globex" }),
  });
  expect(reg.payload.case).toBe("registerResponse");
  const sessionId = (reg.payload.value as { sessionId: string }).sessionId;
  const pre = await beta.request({
    case: "preExec",
    value: create(PreExecRequestSchema, {
      sessionId,
      toolName: "search",
      toolParamsJson: paramsToJson({ q: "beta" }),
    }),
  });
  expect(pre.payload.case).toBe("preExecResponse");
  expect((pre.payload.value as { verdict: Verdict }).verdict).toBe(Verdict.ALLOW);
  const tail = await beta.request({ case: "tailEntries", value: create(TailRequestSchema, { last: 10 }) });
  expect(tail.payload.case).toBe("tailBatch");
  const events = (tail.payload.value as { events: { sessionId: string }[] }).events;
  expect(events.length).toBeGreaterThan(0);
  expect(new Set(events.map((e) => e.sessionId))).toEqual(new Set([sessionId]));
}

describe("per-organization quotas", () => {
  it("acme fills its own replay window: acme is refused RATE_LIMITED, globex's calls and tails keep working", async () => {
    running = await runDaemon("memory", { extra: { limits: { per_organization: { replay_ids: 20 } } } });
    const acme = await client();
    const answers: string[] = [];
    for (let i = 0; i < 25; i++) answers.push(detailOf(await acme.request(heartbeat(`flood-${i}`))));
    expect(answers.slice(0, 20)).toEqual(
      Array.from({ length: 20 }, () => "SESSION_NOT_FOUND:session_not_found"),
    );
    expect(answers.slice(20)).toEqual(Array.from({ length: 5 }, () => "RATE_LIMITED:org_replay_cache_full"));
    expect(acme.closed).toBe(false);
    await globexWorks();
  });

  it("envelopes that are not requests, and requests refused for in-flight, take no replay slot", async () => {
    running = await runDaemon("memory", {
      extra: { limits: { per_organization: { replay_ids: 10, in_flight: 1 } } },
    });
    const acme = await client();
    // Not requests: refused, and the window stays empty.
    for (let i = 0; i < 30; i++) {
      const answer = await acme.request({ case: "heartbeatAck", value: create(HeartbeatAckSchema, {}) });
      expect(detailOf(answer)).toBe("INVALID_MESSAGE:not_a_request");
    }
    // Thirty at once with one in-flight slot: one is taken, the rest refused without a slot.
    const burst = await Promise.all(
      Array.from({ length: 30 }, (_, i) => acme.request(heartbeat(`burst-${i}`))),
    );
    const limited = burst.filter((a) => detailOf(a) === "RATE_LIMITED:org_in_flight_limit").length;
    expect(limited).toBeGreaterThan(0);
    const admitted = burst.length - limited;
    // Every slot the refusals did not take is still there for real requests.
    for (let i = 0; i < 10 - admitted; i++) {
      expect(detailOf(await acme.request(heartbeat(`after-${i}`)))).toBe(
        "SESSION_NOT_FOUND:session_not_found",
      );
    }
    expect(detailOf(await acme.request(heartbeat("one-too-many")))).toBe(
      "RATE_LIMITED:org_replay_cache_full",
    );
  });

  it("acme's tails are counted against acme's quota: past it acme is refused, globex tails on", async () => {
    running = await runDaemon("memory", { extra: { limits: { per_organization: { tails: 2 } } } });
    const acme = await client();
    const follows = [1, 2].map(() =>
      acme.request(
        { case: "tailEntries", value: create(TailRequestSchema, { follow: true, waitMs: 3_000 }) },
        { timeoutMs: 10_000 },
      ),
    );
    // The two polls hold acme's two slots (sent first, answered at their wait).
    await new Promise((resolve) => setTimeout(resolve, 200));
    const third = await acme.request({ case: "tailEntries", value: create(TailRequestSchema, { last: 1 }) });
    expect(detailOf(third)).toBe("RATE_LIMITED:org_tails");
    await globexWorks();
    expect((await Promise.all(follows)).map(detailOf)).toEqual(["tailBatch", "tailBatch"]);
  });

  it("acme over its request rate is refused with retry_after_ms; globex is not", async () => {
    running = await runDaemon("memory", {
      extra: { limits: { per_organization: { rate_per_s: 1, burst: 5 } } },
    });
    const acme = await client();
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => acme.request(heartbeat(`r-${i}`))),
    );
    const limited = answers.filter((a) => detailOf(a) === "RATE_LIMITED:org_rate_limited");
    expect(limited.length).toBeGreaterThanOrEqual(6);
    expect((limited[0]!.payload.value as { retryAfterMs: bigint }).retryAfterMs).toBeGreaterThan(0n);
    // globex's bucket is its own (its three requests fit in its burst of five).
    await globexWorks();
  });

  it("a half-closed connection ends its long polls at once, and closes", async () => {
    running = await runDaemon("memory");
    const acme = await client();
    const poll = acme.request(
      { case: "tailEntries", value: create(TailRequestSchema, { follow: true, waitMs: 60_000 }) },
      { timeoutMs: 60_000 },
    );
    await new Promise((resolve) => setTimeout(resolve, 100));
    acme.socket.end();
    const outcome = await Promise.race([
      poll.then(detailOf, () => "failed"),
      new Promise((resolve) => setTimeout(() => resolve("still waiting"), 5_000)),
    ]);
    expect(outcome).toBe("DAEMON_UNAVAILABLE:cancelled");
    await acme.closedPromise;
  });
});
