// Refused input over a real socket: wrong HMAC, unknown key id, replay, wrong protocol major, oversize,
// truncated and garbage frames. The daemon answers the right Error or closes, keeps serving others, writes nothing.
import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import {
  type Envelope,
  ErrorCode,
  encodeFrame,
  GetSessionStateRequestSchema,
  newMessageId,
  PreExecRequestSchema,
  paramsDigest,
  paramsToJson,
  RegisterRequestSchema,
  sealEnvelope,
  Verdict,
} from "@leash/wire";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clock, RawClient } from "./raw-client.js";
import { ACME, type Running, runDaemon } from "./support.js";

const chainLength = (running: Running) =>
  running.store.substrate.transaction(async (tx) => ((await tx.chain.head())?.seq ?? -1) + 1);

function errorOf(envelope: Envelope | undefined): { code: ErrorCode; detail: string } {
  expect(envelope?.payload.case).toBe("error");
  const value = envelope!.payload.value as { code: ErrorCode; detail: string };
  return { code: value.code, detail: value.detail };
}

/** Waits until the daemon closed `client`, and returns the one unpaired Error it sent first. */
async function closedWith(client: RawClient): Promise<{ code: ErrorCode; detail: string }> {
  await client.closedPromise;
  expect(client.unpaired.length).toBe(1);
  return errorOf(client.unpaired[0]);
}

const registerPayload = () => ({
  case: "register" as const,
  value: create(RegisterRequestSchema, { agentId: "research-bot", organizationId: "acme" }),
});

describe("bad input on a live daemon (SQLite)", () => {
  let running: Running;
  let good: RawClient;
  let sessionId: string;
  let before: number;

  beforeAll(async () => {
    running = await runDaemon("sqlite");
    good = await RawClient.connect(running.socket, ACME);
    const reg = await good.request(registerPayload());
    sessionId = (reg.payload.value as { sessionId: string }).sessionId;
    before = await chainLength(running);
  });
  afterAll(async () => {
    good.close();
    await running.stop();
  });

  /** The well-behaved client on its own connection is answered (and writes nothing). */
  async function goodClientServed(): Promise<void> {
    const answer = await good.request({
      case: "getSessionState",
      value: create(GetSessionStateRequestSchema, { sessionId }),
    });
    expect(answer.payload.case).toBe("sessionState");
  }

  it("a wrong HMAC: AUTHENTICATION_FAILED bad_hmac, then the connection closes", async () => {
    const c = await RawClient.connect(running.socket, ACME);
    c.write(
      encodeFrame(
        sealEnvelope(registerPayload(), { key: randomBytes(32), keyId: ACME.keyId, sender: "agent", clock }),
      ),
    );
    expect(await closedWith(c)).toEqual({ code: ErrorCode.AUTHENTICATION_FAILED, detail: "bad_hmac" });
    await goodClientServed();
  });

  it("an unknown key id: AUTHENTICATION_FAILED unknown_key", async () => {
    const c = await RawClient.connect(running.socket, ACME);
    c.write(
      encodeFrame(
        sealEnvelope(registerPayload(), { key: ACME.key, keyId: "nobody", sender: "agent", clock }),
      ),
    );
    expect(await closedWith(c)).toEqual({ code: ErrorCode.AUTHENTICATION_FAILED, detail: "unknown_key" });
    await goodClientServed();
  });

  it("a replayed message id, on another connection too: AUTHENTICATION_FAILED replayed_message", async () => {
    const messageId = newMessageId();
    const payload = {
      case: "getSessionState" as const,
      value: create(GetSessionStateRequestSchema, { sessionId }),
    };
    const first = await good.request(payload, { messageId });
    expect(first.payload.case).toBe("sessionState");
    const c = await RawClient.connect(running.socket, ACME);
    c.write(
      encodeFrame(
        sealEnvelope(payload, { key: ACME.key, keyId: ACME.keyId, sender: "agent", clock, messageId }),
      ),
    );
    expect(await closedWith(c)).toEqual({
      code: ErrorCode.AUTHENTICATION_FAILED,
      detail: "replayed_message",
    });
    await goodClientServed();
  });

  it("a stale client timestamp: AUTHENTICATION_FAILED timestamp_out_of_window", async () => {
    const c = await RawClient.connect(running.socket, ACME);
    const old = { nowNs: () => (Date.now() - 10 * 60_000) * 1e6 };
    c.write(
      encodeFrame(
        sealEnvelope(registerPayload(), { key: ACME.key, keyId: ACME.keyId, sender: "agent", clock: old }),
      ),
    );
    expect(await closedWith(c)).toEqual({
      code: ErrorCode.AUTHENTICATION_FAILED,
      detail: "timestamp_out_of_window",
    });
  });

  it("another protocol major: PROTOCOL_VERSION_MISMATCH with the versions spoken; a 1.x client negotiates 1.0.0", async () => {
    const c = await RawClient.connect(running.socket, ACME);
    c.write(
      encodeFrame(
        sealEnvelope(registerPayload(), {
          key: ACME.key,
          keyId: ACME.keyId,
          sender: "agent",
          clock,
          protocolVersion: "2.0.0",
        }),
      ),
    );
    await c.closedPromise;
    const error = c.unpaired[0]!.payload.value as { code: ErrorCode; supportedVersions: string[] };
    expect([error.code, error.supportedVersions]).toEqual([ErrorCode.PROTOCOL_VERSION_MISMATCH, ["1.0.0"]]);
    const newer = await RawClient.connect(running.socket, ACME);
    const reg = await newer.request(registerPayload(), { protocolVersion: "1.4.2" });
    expect(reg.payload.case).toBe("registerResponse");
    expect((reg.payload.value as { negotiatedProtocol: string }).negotiatedProtocol).toBe("1.0.0");
    newer.close();
    before += 1; // that registration was accepted: its session_registered entry is the only new one
  });

  it("an oversize frame is refused on its length prefix alone: MESSAGE_TOO_LARGE before any body byte is sent", async () => {
    const c = await RawClient.connect(running.socket, ACME);
    const prefix = new Uint8Array(4);
    new DataView(prefix.buffer).setUint32(0, 1024 * 1024 + 1, false);
    c.write(prefix);
    // No body was sent, so the answer proves the daemon did not wait for (or buffer) one.
    expect(await closedWith(c)).toEqual({ code: ErrorCode.MESSAGE_TOO_LARGE, detail: "message_too_large" });
    await goodClientServed();
  });

  it("an oversize frame streamed in full: refused, closed, the daemon keeps serving", async () => {
    const c = await RawClient.connect(running.socket, ACME);
    const big = new Uint8Array(4 + 4 * 1024 * 1024);
    new DataView(big.buffer).setUint32(0, big.length - 4, false);
    c.write(big);
    expect(await closedWith(c)).toEqual({ code: ErrorCode.MESSAGE_TOO_LARGE, detail: "message_too_large" });
    await goodClientServed();
  });

  it("a truncated frame, then the client closes: no answer, no crash", async () => {
    const c = await RawClient.connect(running.socket, ACME);
    const body = sealEnvelope(registerPayload(), {
      key: ACME.key,
      keyId: ACME.keyId,
      sender: "agent",
      clock,
    });
    c.socket.end(encodeFrame(body).subarray(0, 20));
    await c.closedPromise;
    expect(c.unpaired).toEqual([]);
    await goodClientServed();
  });

  it("garbage bytes: INVALID_MESSAGE (or MESSAGE_TOO_LARGE for a huge prefix), then close", async () => {
    const small = await RawClient.connect(running.socket, ACME);
    const junk = randomBytes(64);
    small.write(encodeFrame(junk));
    const e = await closedWith(small);
    expect(e.code).toBe(ErrorCode.INVALID_MESSAGE);
    const zero = await RawClient.connect(running.socket, ACME);
    zero.write(new Uint8Array(4));
    expect(await closedWith(zero)).toEqual({ code: ErrorCode.INVALID_MESSAGE, detail: "malformed_frame" });
    const huge = await RawClient.connect(running.socket, ACME);
    huge.write(Uint8Array.from([0xff, 0xff, 0xff, 0xff, 1, 2, 3]));
    expect((await closedWith(huge)).code).toBe(ErrorCode.MESSAGE_TOO_LARGE);
    await goodClientServed();
  });

  it("nothing refused above reached the chain", async () => {
    expect(await chainLength(running)).toBe(before);
  });

  it("PreExec inputs: hash only → HITL opaque_context; bad JSON → DENY malformed_input; wrong hash → DENY params_hash_mismatch; money mismatch → INVALID_MESSAGE, nothing recorded", async () => {
    const c = await RawClient.connect(running.socket, ACME);
    const reg = await c.request({
      case: "register",
      value: create(RegisterRequestSchema, { agentId: "tester", organizationId: "acme" }),
    });
    const sid = (reg.payload.value as { sessionId: string }).sessionId;
    const pre = async (fields: Record<string, unknown>) =>
      (
        await c.request({
          case: "preExec",
          value: create(PreExecRequestSchema, { sessionId: sid, callNumber: 1n, toolName: "t", ...fields }),
        })
      ).payload;
    const mismatch = await pre({
      toolParamsJson: paramsToJson({ a: 1 }),
      toolParamsHash: paramsDigest({ a: 2 }),
    });
    expect([
      (mismatch.value as { verdict: Verdict }).verdict,
      (mismatch.value as { reason: string }).reason,
    ]).toEqual([Verdict.DENY, "policy_violation:params_hash_mismatch"]);
    const matching = await pre({
      toolParamsJson: paramsToJson({ a: 1 }),
      toolParamsHash: paramsDigest({ a: 1 }),
    });
    expect((matching.value as { reason: string }).reason).toBe("within_thresholds");
    const badJson = await pre({ toolParamsJson: "{not json" });
    expect((badJson.value as { reason: string }).reason).toBe("policy_violation:malformed_input");
    // The DENY tripped the circuit; a fresh session shows the hash-only case.
    const reg2 = await c.request({
      case: "register",
      value: create(RegisterRequestSchema, { agentId: "tester", organizationId: "acme" }),
    });
    const sid2 = (reg2.payload.value as { sessionId: string }).sessionId;
    const hashOnly = (
      await c.request({
        case: "preExec",
        value: create(PreExecRequestSchema, {
          sessionId: sid2,
          callNumber: 1n,
          toolName: "t",
          toolParamsHash: paramsDigest({ a: 1 }),
        }),
      })
    ).payload;
    expect([
      (hashOnly.value as { verdict: Verdict }).verdict,
      (hashOnly.value as { reason: string }).reason,
    ]).toEqual([Verdict.HITL, "fail_closed:opaque_context"]);
    const length = await chainLength(running);
    const money = await pre({ toolParamsJson: "{}", estimatedCostUsd: 0.1, estimatedCostUsdDecimal: "0.2" });
    expect(errorOf({ payload: money } as Envelope)).toEqual({
      code: ErrorCode.INVALID_MESSAGE,
      detail: "money_mismatch",
    });
    const unknown = (
      await c.request({
        case: "preExec",
        value: create(PreExecRequestSchema, {
          sessionId: "nope",
          callNumber: 1n,
          toolName: "t",
          toolParamsJson: "{}",
        }),
      })
    ).payload;
    expect(errorOf({ payload: unknown } as Envelope)).toEqual({
      code: ErrorCode.SESSION_NOT_FOUND,
      detail: "session_not_found",
    });
    expect(await chainLength(running)).toBe(length);
    expect(c.closed).toBe(false);
    c.close();
  });
});
