// One signed request is one decision, however many daemons: two daemons on one PostgreSQL schema receive the
// same sealed PreExec envelope (byte for byte), and one daemon receives it again after a restart.
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair } from "@leash/chain";
import type { Clock } from "@leash/core";
import type { TestStore } from "@leash/test-stores";
import {
  decodeEnvelope,
  type Envelope,
  encodeFrame,
  GetSessionStateRequestSchema,
  PostExecNotificationSchema,
  PreExecRequestSchema,
  type PreExecResponse,
  RegisterRequestSchema,
  type SessionState,
  sealEnvelope,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { type Daemon, parseDaemonConfig, startDaemon } from "../src/index.js";
import { clock, RawClient } from "./raw-client.js";
import { ACME, configObject, openStore, quietLogger, scratchDir } from "./support.js";

/** The daemons of one cluster share the store and the signing key. */
const KEY = generateKeyPair();

interface Cluster {
  store: TestStore;
  dir: string;
  start(name: string): Promise<Daemon>;
}

async function cluster(options: { clock?: Clock; extra?: Record<string, unknown> } = {}): Promise<Cluster> {
  const store = await openStore("postgres");
  const dir = scratchDir();
  const config = parseDaemonConfig(configObject(dir, options.extra));
  return {
    store,
    dir,
    start: (name) =>
      startDaemon({
        config,
        signer: KEY.signer,
        store: store.url!,
        socketPath: join(dir, `${name}.sock`),
        logger: quietLogger(),
        ...(options.clock === undefined ? {} : { clock: options.clock }),
      }),
  };
}

/** Sends exactly these envelope bytes and waits for the answer to their message id. */
async function deliver(client: RawClient, body: Uint8Array): Promise<Envelope> {
  const answer = client.pending.wait(decodeEnvelope(body).messageId, { timeoutMs: 10_000 });
  client.write(encodeFrame(body));
  return answer;
}

/** What the agent is told: verdict, reason, receipt, where the decision sits in the chain. */
function told(envelope: Envelope) {
  expect(envelope.payload.case).toBe("preExecResponse");
  const r = envelope.payload.value as PreExecResponse;
  return {
    verdict: r.verdict,
    reason: r.reason,
    receipt: r.receipt,
    callNumber: r.callNumber,
    chainSeq: r.chainSeq,
    entryHash: r.entryHash,
    budget: r.budgetRemainingUsdDecimal,
  };
}

async function decisionsOf(store: TestStore) {
  return store.substrate.transaction(async (tx) => ({
    decisions: (await tx.chain.range(0, 100_000)).filter((e) => e.kind === "decision"),
    holds: await tx.budgets.listReservations({}),
  }));
}

async function sessionState(client: RawClient, sessionId: string): Promise<SessionState> {
  const answer = await client.request({
    case: "getSessionState",
    value: create(GetSessionStateRequestSchema, { sessionId }),
  });
  expect(answer.payload.case).toBe("sessionState");
  return answer.payload.value as SessionState;
}

describe("one signed PreExec, two daemons on one PostgreSQL schema", () => {
  const cleanup: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step();
  });

  async function twoDaemons() {
    const c = await cluster();
    cleanup.push(() => c.store.close());
    const a = await c.start("a");
    cleanup.push(() => a.close());
    const b = await c.start("b");
    cleanup.push(() => b.close());
    const toA = await RawClient.connect(a.address, ACME);
    const toB = await RawClient.connect(b.address, ACME);
    cleanup.push(
      () => toA.close(),
      () => toB.close(),
    );
    const reg = await toA.request({
      case: "register",
      value: create(RegisterRequestSchema, { agentId: "research-bot", organizationId: "acme" }),
    });
    const sessionId = (reg.payload.value as { sessionId: string }).sessionId;
    return { c, a, b, toA, toB, sessionId };
  }

  const sealedPreExec = (sessionId: string, nonce: bigint) =>
    sealEnvelope(
      {
        case: "preExec",
        value: create(PreExecRequestSchema, {
          sessionId,
          callNumber: 1n,
          toolName: "web_search",
          toolParamsJson: '{"q":"leash"}',
          estimatedCostUsdDecimal: "0.1",
          nonce,
        }),
      },
      { key: ACME.key, keyId: ACME.keyId, sender: "agent", clock },
    );

  for (const nonce of [0n, 7n]) {
    it(`nonce ${nonce}: both daemons answer with the one recorded decision; one hold, no circuit trip`, async () => {
      const { c, toA, toB, sessionId } = await twoDaemons();
      const body = sealedPreExec(sessionId, nonce);
      const fromA = told(await deliver(toA, body));
      const fromB = told(await deliver(toB, body));
      expect(fromA.reason).toBe("within_thresholds");
      expect(fromB).toEqual(fromA);
      const { decisions, holds } = await decisionsOf(c.store);
      expect(decisions).toHaveLength(1);
      expect(BigInt(decisions[0]!.seq)).toBe(fromA.chainSeq);
      expect(holds).toHaveLength(1);
      const state = await sessionState(toB, sessionId);
      expect([state.circuitTripped, state.totalCalls, state.budgetRemainingUsdDecimal]).toEqual([
        false,
        1n,
        "0.4",
      ]);
    });
  }

  it("both daemons at once: exactly one decision, both answers the same", async () => {
    const { c, toA, toB, sessionId } = await twoDaemons();
    const body = sealedPreExec(sessionId, 9n);
    const [fromA, fromB] = (await Promise.all([deliver(toA, body), deliver(toB, body)])).map(told);
    expect(fromB).toEqual(fromA);
    expect((await decisionsOf(c.store)).decisions).toHaveLength(1);
    expect((await sessionState(toA, sessionId)).circuitTripped).toBe(false);
  });

  it("a PostExec copy on the second daemon settles the hold once (one post_exec entry)", async () => {
    const { c, toA, toB, sessionId } = await twoDaemons();
    const decided = told(await deliver(toA, sealedPreExec(sessionId, 3n)));
    const settle = sealEnvelope(
      {
        case: "postExec",
        value: create(PostExecNotificationSchema, {
          sessionId,
          callNumber: decided.callNumber,
          actualCostUsdDecimal: "0.05",
          success: true,
        }),
      },
      { key: ACME.key, keyId: ACME.keyId, sender: "agent", clock },
    );
    // A PostExec has no answer; a PreExec of the session behind it on the same connection waits for it.
    const after = (client: RawClient, nonce: bigint) => deliver(client, sealedPreExec(sessionId, nonce));
    toA.write(encodeFrame(settle));
    await after(toA, 4n);
    toB.write(encodeFrame(settle));
    await after(toB, 5n);
    const entries = await c.store.substrate.transaction((tx) => tx.chain.range(0, 1000));
    expect(entries.filter((e) => e.kind === "post_exec")).toHaveLength(1);
    // 0.5 − 0.05 settled − two 0.1 holds of the calls behind it.
    expect((await sessionState(toB, sessionId)).budgetRemainingUsdDecimal).toBe("0.25");
  });

  it("the sweeper forgets a decided id once it is two replay windows old (the table stays bounded)", async () => {
    // The daemon's clock runs 11 minutes ahead once the decision is made; its sweep runs every 0.5 s.
    let aheadNs = 0;
    const daemonClock: Clock = { nowNs: () => Date.now() * 1e6 + aheadNs };
    const c = await cluster({ clock: daemonClock, extra: { reservation_ttl_s: 1 } });
    cleanup.push(() => c.store.close());
    const a = await c.start("a");
    cleanup.push(() => a.close());
    const client = await RawClient.connect(a.address, ACME);
    cleanup.push(() => client.close());
    const reg = await client.request({
      case: "register",
      value: create(RegisterRequestSchema, { agentId: "research-bot", organizationId: "acme" }),
    });
    const sessionId = (reg.payload.value as { sessionId: string }).sessionId;
    told(await deliver(client, sealedPreExec(sessionId, 1n)));
    const count = () => c.store.substrate.transaction((tx) => tx.messages.count());
    expect(await count()).toBe(1);
    aheadNs = 11 * 60 * 1e9;
    const deadline = Date.now() + 10_000;
    while ((await count()) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(await count()).toBe(0);
  });

  it("the same daemon after a restart (its in-memory replay cache gone) answers from the record", async () => {
    const { c, a, toA, sessionId } = await twoDaemons();
    const body = sealedPreExec(sessionId, 11n);
    const first = told(await deliver(toA, body));
    toA.close();
    await a.close();
    const again = await c.start("a");
    cleanup.push(() => again.close());
    const client = await RawClient.connect(again.address, ACME);
    cleanup.push(() => client.close());
    expect(told(await deliver(client, body))).toEqual(first);
    expect((await decisionsOf(c.store)).decisions).toHaveLength(1);
    expect((await sessionState(client, sessionId)).circuitTripped).toBe(false);
    // While it remembers the id, the daemon refuses a copy before the store is asked (the fast
    // check): an Error, then the connection closes.
    const copy = await RawClient.connect(again.address, ACME);
    copy.write(encodeFrame(body));
    await copy.closedPromise;
    expect(copy.unpaired.map((e) => (e.payload.value as { detail?: string }).detail)).toEqual([
      "replayed_message",
    ]);
    expect((await decisionsOf(c.store)).decisions).toHaveLength(1);
  });
});
