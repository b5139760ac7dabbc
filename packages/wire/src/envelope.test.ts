import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  admitEnvelope,
  errorPayload,
  isMessageId,
  newMessageId,
  openEnvelope,
  sealEnvelope,
} from "./envelope.js";
import { WireError } from "./errors.js";
import { decodeEnvelope, encodeFrame, FrameDecoder } from "./framing.js";
import { EnvelopeSchema, ErrorCode } from "./gen/shackle/sp1/shackle_pb.js";
import { signEnvelope } from "./hmac.js";
import { ReplayWindow } from "./replay.js";

const key = new Uint8Array(32).fill(1);
const START_NS = 1_764_600_000_000 * 1e6;
const clock = { nowNs: () => START_NS };
const preExec = {
  case: "preExec" as const,
  value: { sessionId: "s_01", callNumber: 1n, toolName: "web_search", toolParamsJson: "{}" },
};
const register = { case: "register" as const, value: { agentId: "research-bot", organizationId: "org" } };

function opener(over: Partial<Parameters<typeof openEnvelope>[1]> = {}) {
  const replay = new ReplayWindow({ clock });
  return (body: Uint8Array) => openEnvelope(body, { keyFor: () => key, sender: "agent", replay, ...over });
}
const code = (f: () => unknown) => {
  try {
    f();
    return "ok";
  } catch (e) {
    return WireError.isInstance(e) ? e.code : `not a WireError: ${e}`;
  }
};

describe("sealEnvelope / openEnvelope", () => {
  it("with replay null the id is not admitted: the caller admits it, once, with admitEnvelope", () => {
    const body = sealEnvelope(preExec, { key, sender: "agent", clock });
    const replay = new ReplayWindow({ clock });
    const open = () => openEnvelope(body, { keyFor: () => key, sender: "agent", replay: null });
    const env = open();
    expect(code(open)).toBe("ok");
    admitEnvelope(env, "agent", replay);
    expect(replay.has(env.messageId)).toBe(true);
    expect(code(() => admitEnvelope(open(), "agent", replay))).toBe("replayed_message");
    expect(
      code(() =>
        openEnvelope(body, { keyFor: () => new Uint8Array(32).fill(2), sender: "agent", replay: null }),
      ),
    ).toBe("bad_hmac");
  });

  it("round-trips through a frame, setting ids, timestamp and version", () => {
    const body = sealEnvelope(preExec, { key, sender: "agent", clock });
    const [frame] = new FrameDecoder().push(encodeFrame(body));
    const env = opener()(frame!);
    expect(isMessageId(env.messageId)).toBe(true);
    expect(env.correlationId).toBe(env.messageId);
    expect(env.clientTimestampNs).toBe(BigInt(START_NS));
    expect(env.serverTimestampNs).toBe(0n);
    expect(env.protocolVersion).toBe("1.0.0");
    expect(env.payload.case).toBe("preExec");
  });

  it("a daemon's response carries the request's correlation id and its own timestamp field", () => {
    const body = sealEnvelope(
      { case: "heartbeatAck", value: { sessionId: "s_01" } },
      { key, sender: "daemon", clock, correlationId: "req-1" },
    );
    const env = opener({ sender: "daemon" })(body);
    expect(env.correlationId).toBe("req-1");
    expect(env.serverTimestampNs).toBe(BigInt(START_NS));
    // The same envelope opened as if an agent sent it has no client timestamp: refused.
    expect(code(() => opener()(body))).toBe("timestamp_out_of_window");
  });

  it("refuses a replayed envelope, a wrong key, an unknown key, a stale one", () => {
    const open = opener();
    const body = sealEnvelope(preExec, { key, sender: "agent", clock });
    open(body);
    expect(code(() => open(body))).toBe("replayed_message");
    const other = sealEnvelope(preExec, { key: new Uint8Array(32).fill(2), sender: "agent", clock });
    expect(code(() => open(other))).toBe("bad_hmac");
    expect(code(() => opener({ keyFor: () => undefined })(other))).toBe("unknown_key");
    const stale = sealEnvelope(preExec, {
      key,
      sender: "agent",
      clock: { nowNs: () => START_NS - 6 * 60e9 },
    });
    expect(code(() => open(stale))).toBe("timestamp_out_of_window");
  });

  it("an envelope that fails authentication is not remembered", () => {
    const open = opener();
    const body = sealEnvelope(preExec, { key, sender: "agent", clock });
    const tampered = body.slice();
    tampered[tampered.length - 1]! ^= 1;
    expect(code(() => open(tampered))).toBe("bad_hmac");
    expect(code(() => open(body))).toBe("ok");
  });

  it("checks the protocol version: register negotiates, later envelopes must be spoken", () => {
    const open = opener();
    expect(
      code(() => open(sealEnvelope(register, { key, sender: "agent", clock, protocolVersion: "1.4.0" }))),
    ).toBe("ok");
    expect(
      code(() => open(sealEnvelope(register, { key, sender: "agent", clock, protocolVersion: "2.0.0" }))),
    ).toBe("protocol_version_mismatch");
    expect(
      code(() => open(sealEnvelope(preExec, { key, sender: "agent", clock, protocolVersion: "1.4.0" }))),
    ).toBe("protocol_version_mismatch");
  });

  it("refuses an envelope without payload or with a message id that is not a UUIDv7", () => {
    const open = opener();
    expect(code(() => open(sealEnvelope(undefined as never, { key, sender: "agent", clock })))).toBe(
      "invalid_envelope",
    );
    expect(code(() => open(sealEnvelope({ case: undefined }, { key, sender: "agent", clock })))).toBe(
      "invalid_envelope",
    );
    const v4 = sealEnvelope(preExec, { key, sender: "agent", clock, messageId: crypto.randomUUID() });
    expect(code(() => open(v4))).toBe("invalid_envelope");
    const raw = toBinary(
      EnvelopeSchema,
      create(EnvelopeSchema, { messageId: newMessageId(), payload: preExec }),
    );
    expect(code(() => open(raw))).toBe("bad_hmac");
  });

  it("keeps unknown fields a newer peer sends, and they are covered by the MAC", () => {
    const env = create(EnvelopeSchema, {
      protocolVersion: "1.0.0",
      messageId: newMessageId(START_NS / 1e6),
      correlationId: "c",
      clientTimestampNs: BigInt(START_NS),
      payload: preExec,
    });
    const extra = new Uint8Array([0xba, 0x06, 0x02, 0x68, 0x69]); // field 103, string "hi"
    const unsigned = toBinary(EnvelopeSchema, env);
    const withExtra = new Uint8Array([...unsigned, ...extra]);
    const signed = signEnvelope(decodeEnvelope(withExtra), key);
    expect(code(() => opener()(signed))).toBe("ok");
  });
});

describe("errorPayload", () => {
  it("answers a WireError with its Appendix B code and detail", () => {
    const e = errorPayload(
      new WireError("protocol_version_mismatch", "no", { supportedVersions: ["1.0.0"] }),
    );
    expect(e.value.code).toBe(ErrorCode.PROTOCOL_VERSION_MISMATCH);
    expect(e.value.detail).toBe("protocol_version_mismatch");
    expect(e.value.supportedVersions).toEqual(["1.0.0"]);
    expect(errorPayload(new WireError("message_too_large", "big")).value.code).toBe(
      ErrorCode.MESSAGE_TOO_LARGE,
    );
    expect(errorPayload(new WireError("replayed_message", "x")).value.code).toBe(
      ErrorCode.AUTHENTICATION_FAILED,
    );
  });
  it("hides internal errors behind DAEMON_UNAVAILABLE", () => {
    const e = errorPayload(new Error("secret path /etc/x"));
    expect(e.value.code).toBe(ErrorCode.DAEMON_UNAVAILABLE);
    expect(e.value.message).not.toMatch(/secret/);
  });
});
