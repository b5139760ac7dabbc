// The waiting client against the real daemon (in process, real socket) on memory, SQLite and PostgreSQL:
// guard() waits for the human's answer, then the daemon judges the re-dispatch. The operator answers through
// the daemon's HITL desk (the console's WebSocket path is tested in apps/cli's browser tests).
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair } from "@leash/chain";
import { type Daemon, HitlError, parseDaemonConfig, startDaemon } from "@leash/daemon";
import { openStore, STORE_KINDS, type StoreKind, type TestStore } from "@leash/test-stores";
import {
  type HitlDecision,
  HitlDecisionKind,
  HitlDecisionSchema,
  type HitlRequestView,
  HitlStatus,
} from "@leash/wire";
import { pino } from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type Client, createClient, guard, LeashDenied, type PreExecResult } from "../src/index.js";

const HMAC = randomBytes(32);
const GLOBEX_HMAC = randomBytes(32);

interface Setup {
  daemon: Daemon;
  store: TestStore;
  dir: string;
  signer: ReturnType<typeof generateKeyPair>;
}

async function start(kind: StoreKind, hitlTimeoutS: number): Promise<Setup> {
  const dir = mkdtempSync(join(tmpdir(), "leash-client-hitl-"));
  writeFileSync(join(dir, "acme.hmac"), HMAC.toString("hex"), { mode: 0o600 });
  const store = await openStore(kind, { label: "clienthitl" });
  const signer = generateKeyPair();
  const config = parseDaemonConfig({
    organizations: {
      acme: {
        hmac_keys: { k1: { file: join(dir, "acme.hmac") } },
        default_guard: { budget_usd: 1 },
        agents: { "ops-bot": { guard: { budget_usd: 1, hitl_mode: "always" } } },
      },
      globex: {
        hmac_keys: { g1: { hex: GLOBEX_HMAC.toString("hex") } },
        agents: { "ops-bot": { guard: { hitl_mode: "always" } } },
      },
    },
  });
  const daemon = await startDaemon({
    config,
    signer: signer.signer,
    store: store.url ?? "memory:",
    socketPath: join(dir, "leash.sock"),
    grpc: { listen: "127.0.0.1:0", insecure: true },
    logger: pino({ level: "silent" }),
    hitlTimeoutS,
  });
  return { daemon, store, dir, signer };
}

async function stop(setup: Setup | undefined): Promise<void> {
  if (setup === undefined) return;
  await setup.daemon.close();
  await setup.store.close();
  rmSync(setup.dir, { recursive: true, force: true });
}

const decision = (kind: HitlDecisionKind, extra: Partial<HitlDecision> = {}) =>
  create(HitlDecisionSchema, { kind, ...extra });

/** Resolves with the next request the desk opens. */
function nextOpened(daemon: Daemon): Promise<HitlRequestView> {
  return new Promise((resolve) => {
    const off = daemon.hitl.subscribe((kind, view) => {
      if (kind !== "opened") return;
      off();
      resolve(view);
    });
  });
}

describe.each(STORE_KINDS)("waiting for a human on %s", (kind) => {
  let setup: Setup;
  const clients: Client[] = [];

  beforeAll(async () => {
    setup = await start(kind, 60);
  });
  afterAll(() => stop(setup));
  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
  });

  async function agent(
    org: "acme" | "globex" = "acme",
    transport: "socket" | "grpc" = "socket",
  ): Promise<{ client: Client; session: string }> {
    const client = createClient({
      ...(transport === "socket"
        ? { socketPath: setup.daemon.address }
        : { grpc: { address: setup.daemon.grpcAddress as string, tls: false } }),
      organizationId: org,
      agentId: "ops-bot",
      hmacKey: org === "acme" ? HMAC : GLOBEX_HMAC,
      keyId: org === "acme" ? "k1" : "g1",
      daemonPublicKey: setup.signer.publicKeyHex,
      timeoutMs: 10_000,
      heartbeatIntervalMs: 0,
    });
    clients.push(client);
    const { session_id } = await client.register();
    return { client, session: session_id };
  }

  it("approve: the paused call runs once, with its own params, and the approval is spent", async () => {
    const { client, session } = await agent();
    const ran: unknown[] = [];
    const verdicts: PreExecResult[] = [];
    const send = guard(
      client,
      { session_id: session, tool_name: "send_email", onDecision: (v) => verdicts.push(v) },
      async (params: { to: string }) => {
        ran.push(params);
        return "sent";
      },
    );
    const opened = nextOpened(setup.daemon);
    const call = send({ to: "ops@example.com" });
    const request = await opened;
    expect(request.toolName).toBe("send_email");
    expect(JSON.parse(request.paramsJson)).toEqual({ to: "ops@example.com" });
    expect(request.argsDigest).toMatch(/^[0-9a-f]{64}$/);
    expect(request.expiresNs).toBeGreaterThan(request.createdNs);
    expect(request.budget?.limitUsdDecimal).toBe("1");
    await setup.daemon.hitl.answer(
      request.requestId,
      decision(HitlDecisionKind.HITL_DECISION_APPROVE),
      "alice",
    );
    await expect(call).resolves.toBe("sent");
    expect(ran).toEqual([{ to: "ops@example.com" }]);
    expect(verdicts.map((v) => [v.verdict, v.reason])).toEqual([
      ["HITL", "hitl_all_calls"],
      ["ALLOW", "hitl_transition:approve"],
    ]);
    const after = await setup.daemon.hitl.get(request.requestId);
    expect(after?.status).toBe(HitlStatus.HITL_CONSUMED);
    expect(after?.operatorId).toBe("alice");
    // The approval was single use: the same dispatch again is refused.
    const again = await client.preExec({
      session_id: session,
      tool_name: "send_email",
      params: { to: "ops@example.com" },
      nonce: request.nonce,
    });
    expect(again.verdict).toBe("DENY");
    expect(again.reason).toMatch(/^policy_violation:duplicate_/);
  });

  it("over gRPC: the WaitHitl stream brings the approval, the paused call runs once; a rejection denies", async () => {
    const { client, session } = await agent("acme", "grpc");
    const ran: unknown[] = [];
    const send = guard(
      client,
      { session_id: session, tool_name: "send_email" },
      async (params: { to: string }) => {
        ran.push(params);
        return "sent";
      },
    );
    let opened = nextOpened(setup.daemon);
    const call = send({ to: "ops@example.com" });
    let request = await opened;
    await setup.daemon.hitl.answer(
      request.requestId,
      decision(HitlDecisionKind.HITL_DECISION_APPROVE),
      "alice",
    );
    await expect(call).resolves.toBe("sent");
    expect(ran).toEqual([{ to: "ops@example.com" }]);
    opened = nextOpened(setup.daemon);
    const refused = send({ to: "all@example.com" });
    request = await opened;
    await setup.daemon.hitl.answer(request.requestId, decision(HitlDecisionKind.HITL_DECISION_REJECT), "bob");
    const error = await refused.catch((e: unknown) => e);
    expect(LeashDenied.isInstance(error)).toBe(true);
    expect((error as LeashDenied).reason).toBe("hitl_transition:reject");
    expect(ran).toHaveLength(1);
  });

  it("reject: LeashDenied with the daemon's recorded reason; the tool never runs", async () => {
    const { client, session } = await agent();
    let ran = false;
    const drop = guard(client, { session_id: session, tool_name: "drop_table" }, async () => {
      ran = true;
    });
    const opened = nextOpened(setup.daemon);
    const call = drop({ table: "users" });
    const request = await opened;
    await setup.daemon.hitl.answer(
      request.requestId,
      decision(HitlDecisionKind.HITL_DECISION_REJECT, { comment: "no" }),
      "bob",
    );
    const error = await call.catch((e: unknown) => e);
    expect(LeashDenied.isInstance(error)).toBe(true);
    expect((error as LeashDenied).reason).toBe("hitl_transition:reject");
    expect((error as LeashDenied).result.receipt).not.toBeNull();
    expect(ran).toBe(false);
  });

  it("modify: only the successor runs, and the tool receives the operator's params", async () => {
    const { client, session } = await agent();
    const ran: unknown[] = [];
    const verdicts: PreExecResult[] = [];
    const pay = guard(
      client,
      { session_id: session, tool_name: "pay", onDecision: (v) => verdicts.push(v) },
      async (params: { amount: number; to: string }, memo: string) => {
        ran.push([params, memo]);
        return params.amount;
      },
    );
    const opened = nextOpened(setup.daemon);
    const call = pay({ amount: 900, to: "mallory" }, "invoice 7");
    const request = await opened;
    const answered = await setup.daemon.hitl.answer(
      request.requestId,
      decision(HitlDecisionKind.HITL_DECISION_MODIFY, { paramsJson: '{"to":"alice","amount":90}' }),
      "carol",
    );
    expect(answered.successorNonce).toMatch(/^[1-9][0-9]*$/);
    expect(answered.successorParamsJson).toBe('{"amount":90,"to":"alice"}');
    await expect(call).resolves.toBe(90);
    expect(ran).toEqual([[{ amount: 90, to: "alice" }, "invoice 7"]]);
    expect(verdicts.at(-1)?.reason).toBe("hitl_transition:modify_successor");
    // The original call never runs: dispatching it again only asks a human again.
    const original = await client.preExec({
      session_id: session,
      tool_name: "pay",
      params: { amount: 900, to: "mallory" },
      nonce: request.nonce,
    });
    expect(original.verdict).not.toBe("ALLOW");
  });

  it("defer: nothing runs now (LeashDenied defer_escalate); the agent's next attempt asks again", async () => {
    const { client, session } = await agent();
    let runs = 0;
    const tool = guard(client, { session_id: session, tool_name: "rotate_keys" }, async () => {
      runs++;
      return "rotated";
    });
    const first = nextOpened(setup.daemon);
    const call = tool({ scope: "all" }).catch((e: unknown) => e);
    const deferred = await first;
    await setup.daemon.hitl.answer(
      deferred.requestId,
      decision(HitlDecisionKind.HITL_DECISION_DEFER),
      "dave",
    );
    const error = await call;
    expect(LeashDenied.isInstance(error)).toBe(true);
    expect((error as LeashDenied).reason).toBe("hitl_transition:defer_escalate");
    expect(runs).toBe(0);
    // A new dispatch asks again: a new request, which an approval releases.
    const second = nextOpened(setup.daemon);
    const retry = tool({ scope: "all" });
    const reopened = await second;
    expect(reopened.requestId).not.toBe(deferred.requestId);
    await setup.daemon.hitl.answer(
      reopened.requestId,
      decision(HitlDecisionKind.HITL_DECISION_APPROVE),
      "erin",
    );
    await expect(retry).resolves.toBe("rotated");
    expect(runs).toBe(1);
  });

  it("an answered request takes no second answer, and bad answers change nothing", async () => {
    const { client, session } = await agent();
    const tool = guard(client, { session_id: session, tool_name: "t" }, async () => "ok");
    const opened = nextOpened(setup.daemon);
    const call = tool({});
    const request = await opened;
    await expect(
      setup.daemon.hitl.answer(request.requestId, decision(HitlDecisionKind.HITL_DECISION_UNSPECIFIED), "a"),
    ).rejects.toMatchObject({ code: "hitl_invalid_decision" });
    await expect(
      setup.daemon.hitl.answer(
        request.requestId,
        decision(HitlDecisionKind.HITL_DECISION_MODIFY, { paramsJson: "[1,2]" }),
        "a",
      ),
    ).rejects.toMatchObject({ code: "hitl_invalid_params" });
    await expect(
      setup.daemon.hitl.answer("no-such-request", decision(HitlDecisionKind.HITL_DECISION_APPROVE), "a"),
    ).rejects.toMatchObject({ code: "hitl_request_not_found" });
    expect((await setup.daemon.hitl.get(request.requestId))?.status).toBe(HitlStatus.HITL_PENDING);
    await setup.daemon.hitl.answer(request.requestId, decision(HitlDecisionKind.HITL_DECISION_APPROVE), "a");
    const second = await setup.daemon.hitl
      .answer(request.requestId, decision(HitlDecisionKind.HITL_DECISION_REJECT), "b")
      .catch((e: unknown) => e);
    expect(HitlError.isInstance(second)).toBe(true);
    expect((second as HitlError).code).toBe("hitl_already_decided");
    await expect(call).resolves.toBe("ok");
  });

  it("another organization cannot wait on (or learn of) a session's request", async () => {
    const { client, session } = await agent();
    const first = await client.preExec({ session_id: session, tool_name: "t", params: {} });
    expect(first.verdict).toBe("HITL");
    expect(first.hitl_request_id).toBeTruthy();
    const other = await agent("globex");
    const outcome = await other.client.waitForHitl(first.hitl_request_id!, {
      session_id: session,
      timeoutMs: 5000,
    });
    expect(outcome.kind).toBe("fail_closed");
    expect(outcome.detail).toContain("SESSION_NOT_FOUND");
    const wrongSession = await other.client.waitForHitl(first.hitl_request_id!, { timeoutMs: 5000 });
    expect(wrongSession.kind).toBe("fail_closed");
  });
});

describe.each(STORE_KINDS)("when nobody answers, on %s", (kind) => {
  let setup: Setup | undefined;
  afterEach(async () => {
    await stop(setup);
    setup = undefined;
  });

  it("the request expires into LeashDenied hitl_timeout, recorded, and a late answer is refused", async () => {
    setup = await start(kind, 1);
    const client = createClient({
      socketPath: setup.daemon.address,
      organizationId: "acme",
      agentId: "ops-bot",
      hmacKey: HMAC,
      keyId: "k1",
      timeoutMs: 10_000,
      heartbeatIntervalMs: 0,
    });
    try {
      const { session_id } = await client.register();
      let ran = false;
      const tool = guard(client, { session_id, tool_name: "t" }, async () => {
        ran = true;
      });
      const opened = nextOpened(setup.daemon);
      const error = await tool({}).catch((e: unknown) => e);
      const request = await opened;
      expect(LeashDenied.isInstance(error)).toBe(true);
      expect((error as LeashDenied).reason).toBe("hitl_timeout");
      expect((error as LeashDenied).result.receipt).not.toBeNull(); // the daemon's signed DENY
      expect(ran).toBe(false);
      const view = await setup.daemon.hitl.get(request.requestId);
      expect(view?.status).toBe(HitlStatus.HITL_EXPIRED);
      await expect(
        setup.daemon.hitl.answer(request.requestId, decision(HitlDecisionKind.HITL_DECISION_APPROVE), "late"),
      ).rejects.toMatchObject({ code: "hitl_expired" });
      // The paused call cannot be released by re-sending it either.
      const retry = await client.preExec({ session_id, tool_name: "t", params: {}, nonce: request.nonce });
      expect(retry.verdict).toBe("DENY");
    } finally {
      client.close();
    }
  });

  it("a daemon that dies while the agent waits is a DENY (fail closed)", async () => {
    setup = await start(kind, 60);
    const client = createClient({
      socketPath: setup.daemon.address,
      organizationId: "acme",
      agentId: "ops-bot",
      hmacKey: HMAC,
      keyId: "k1",
      timeoutMs: 10_000,
      heartbeatIntervalMs: 0,
      reconnect: { initialDelayMs: 50, maxDelayMs: 100 },
    });
    try {
      const { session_id } = await client.register();
      const tool = guard(client, { session_id, tool_name: "t" }, async () => "ran");
      const opened = nextOpened(setup.daemon);
      const call = tool({}).catch((e: unknown) => e);
      await opened;
      await setup.daemon.close();
      const error = await call;
      expect(LeashDenied.isInstance(error)).toBe(true);
      expect((error as LeashDenied).reason).toMatch(/^fail_closed:/);
    } finally {
      client.close();
    }
  });
});
