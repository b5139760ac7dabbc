// A session belongs to the organization and agent that registered it: a key bound to another agent
// (hmac_keys: {k: {agents: [...]}}) cannot settle, decide, resume, heartbeat or read it, and every
// such request is answered as for an unknown session, before and after a restart. On SQLite and PostgreSQL.
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair } from "@leash/chain";
import type { StoreKind, TestStore } from "@leash/test-stores";
import {
  type Envelope,
  ErrorCode,
  GetSessionStateRequestSchema,
  HeartbeatSchema,
  type Payload,
  PostExecNotificationSchema,
  PreExecRequestSchema,
  RegisterRequestSchema,
  TailRequestSchema,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { type Daemon, parseDaemonConfig, startDaemon } from "../src/index.js";
import { type ClientKey, RawClient } from "./raw-client.js";
import { openStore, quietLogger, scratchDir } from "./support.js";

const RESEARCH: ClientKey = { key: randomBytes(32), keyId: "k-research" };
const WRITER: ClientKey = { key: randomBytes(32), keyId: "k-writer" };
const ORG_WIDE: ClientKey = { key: randomBytes(32), keyId: "k-org" };
const OTHER_ORG: ClientKey = { key: randomBytes(32), keyId: "k-globex" };
const hex = (k: ClientKey) => Buffer.from(k.key).toString("hex");

const CONFIG = {
  organizations: {
    acme: {
      hmac_keys: {
        [RESEARCH.keyId]: { hex: hex(RESEARCH), agents: ["research-bot"] },
        [WRITER.keyId]: { hex: hex(WRITER), agents: ["writer-bot"] },
        [ORG_WIDE.keyId]: { hex: hex(ORG_WIDE) },
      },
      current_key: ORG_WIDE.keyId,
      default_guard: { budget_usd: 1 },
    },
    globex: { hmac_keys: { [OTHER_ORG.keyId]: { hex: hex(OTHER_ORG) } } },
  },
};

const register = (agentId: string, sessionId = ""): Payload => ({
  case: "register",
  value: create(RegisterRequestSchema, { agentId, sessionId }),
});
const preExec = (sessionId: string, callNumber: bigint): Payload => ({
  case: "preExec",
  value: create(PreExecRequestSchema, {
    sessionId,
    callNumber,
    toolName: "search",
    toolParamsJson: `{"q":${callNumber}}`,
    estimatedCostUsdDecimal: "0.6",
    nonce: callNumber,
  }),
});
const postExec = (sessionId: string, actual: string, ackRequested = false): Payload => ({
  case: "postExec",
  value: create(PostExecNotificationSchema, {
    sessionId,
    callNumber: 1n,
    actualCostUsdDecimal: actual,
    success: true,
    ackRequested,
  }),
});
const heartbeat = (sessionId: string): Payload => ({
  case: "heartbeat",
  value: create(HeartbeatSchema, { sessionId }),
});
const state = (sessionId: string): Payload => ({
  case: "getSessionState",
  value: create(GetSessionStateRequestSchema, { sessionId }),
});

function refusal(envelope: Envelope): { code: string; detail: string } {
  expect(envelope.payload.case).toBe("error");
  const e = envelope.payload.value as { code: ErrorCode; detail: string };
  return { code: ErrorCode[e.code]!, detail: e.detail };
}
const NOT_FOUND = { code: "SESSION_NOT_FOUND", detail: "session_not_found" };

describe.each(["sqlite", "postgres"] as StoreKind[])("session ownership on %s", (kind) => {
  let store: TestStore | undefined;
  let daemon: Daemon | undefined;
  const clients: RawClient[] = [];
  afterEach(async () => {
    for (const c of clients.splice(0)) c.close();
    await daemon?.close();
    daemon = undefined;
    await store?.close();
    store = undefined;
  });

  async function start(socket: string): Promise<void> {
    daemon = await startDaemon({
      config: parseDaemonConfig(CONFIG),
      signer: SIGNER.signer,
      store: store!.url!,
      socketPath: socket,
      logger: quietLogger(),
    });
  }
  const connect = async (socket: string, key: ClientKey) => {
    const c = await RawClient.connect(socket, key);
    clients.push(c);
    return c;
  };
  const SIGNER = generateKeyPair();

  it("refuses another agent's post-exec, pre-exec, resume, heartbeat and reads as an unknown session", async () => {
    store = await openStore(kind);
    const socket = join(scratchDir(), "leash.sock");
    await start(socket);
    const research = await connect(socket, RESEARCH);
    const registered = await research.request(register("research-bot"));
    expect(registered.payload.case).toBe("registerResponse");
    const sid = registered.payload.case === "registerResponse" ? registered.payload.value.sessionId : "";
    expect((await research.request(preExec(sid, 1n))).payload).toMatchObject({
      case: "preExecResponse",
      value: { reason: "within_thresholds" },
    });

    const writer = await connect(socket, WRITER);
    // The attack of issue #31: settle the other agent's hold at $0 first.
    expect(refusal(await writer.request(postExec(sid, "0"), { timeoutMs: 5000 }))).toEqual(NOT_FOUND);
    for (const payload of [preExec(sid, 2n), heartbeat(sid), state(sid), register("writer-bot", sid)]) {
      expect(refusal(await writer.request(payload)), payload.case).toEqual(NOT_FOUND);
    }
    // A key bound to one agent cannot register as another.
    expect(refusal(await writer.request(register("research-bot", sid)))).toEqual({
      code: "AUTHENTICATION_FAILED",
      detail: "agent_not_allowed",
    });
    // Another organization's key, with a different agent: no session_exists oracle.
    const globex = await connect(socket, OTHER_ORG);
    expect(refusal(await globex.request(register("someone", sid)))).toEqual(NOT_FOUND);
    expect(refusal(await globex.request(register("research-bot", sid)))).toEqual(NOT_FOUND);

    // The owner's settlement is the one recorded (acknowledged once durable; again, as a replay);
    // a second one with another actual is its own error.
    for (const replayed of [false, true]) {
      expect((await research.request(postExec(sid, "0.25", true))).payload).toMatchObject({
        case: "postExecAck",
        value: { sessionId: sid, callNumber: 1n, replayed, budgetRemainingUsdDecimal: "0.75" },
      });
    }
    expect(refusal(await research.request(postExec(sid, "0.5")))).toEqual({
      code: "INVALID_MESSAGE",
      detail: "settlement_conflict",
    });
    // The organization's unbound key acts for any of its agents.
    const org = await connect(socket, ORG_WIDE);
    expect((await org.request(state(sid))).payload.case).toBe("sessionState");
    // The tail shows a bound key its own agents' sessions only (a session id is what one touches).
    const tailed = async (c: RawClient) => {
      const answer = await c.request({
        case: "tailEntries",
        value: create(TailRequestSchema, { afterSeq: -1n }),
      });
      expect(answer.payload.case).toBe("tailBatch");
      return new Set(
        (answer.payload.value as { events: Array<{ sessionId: string }> }).events.map((e) => e.sessionId),
      );
    };
    expect((await tailed(research)).has(sid)).toBe(true);
    expect((await tailed(org)).has(sid)).toBe(true);
    expect((await tailed(writer)).has(sid)).toBe(false);

    // After a restart the daemon knows nothing in memory: the store's session says whose it is.
    for (const c of clients.splice(0)) c.close();
    await daemon!.close();
    await start(socket);
    const writerAgain = await connect(socket, WRITER);
    for (const payload of [
      postExec(sid, "0"),
      preExec(sid, 2n),
      heartbeat(sid),
      register("writer-bot", sid),
    ]) {
      expect(refusal(await writerAgain.request(payload, { timeoutMs: 5000 })), payload.case).toEqual(
        NOT_FOUND,
      );
    }
    const researchAgain = await connect(socket, RESEARCH);
    expect((await researchAgain.request(heartbeat(sid))).payload.case).toBe("heartbeatAck");

    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 1000));
    const settlements = entries
      .filter((e) => e.kind === "post_exec")
      .map((e) => (JSON.parse(e.body) as { data: { actual_usd: string } }).data.actual_usd);
    expect(settlements).toEqual(["0.25"]);
  }, 60_000);
});
