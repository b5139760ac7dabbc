// The hand-written envelope serializer writes exactly toBinary's bytes, for random PreExec, PreExec
// answers and PostExec (Unicode, negative and huge integers, -0, NaN) and for the payloads it hands to
// toBinary; and what it writes decodes back to the same message.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { unsignedEnvelopeBytes } from "./envelope-writer.js";
import {
  type Envelope,
  EnvelopeSchema,
  ErrorSchema,
  PostExecNotificationSchema,
  PreExecRequestSchema,
  PreExecResponseSchema,
  RegisterRequestSchema,
} from "./gen/shackle/sp1/shackle_pb.js";

let seed = 7;
const rand = () => {
  seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
  return seed / 2 ** 31;
};
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
const STRINGS = ["", "a", "search", "ünïcödé ✓", "😀 emoji", "x".repeat(200), "é".repeat(70), "\u0000nul"];
const text = () =>
  rand() < 0.3
    ? pick(STRINGS)
    : rand()
        .toString(36)
        .repeat(Math.floor(rand() * 40));
const BIGS = [0n, 1n, 127n, 128n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 63n - 1n, -1n, -(2n ** 63n)];
const big = (unsigned: boolean) => {
  const b = rand() < 0.5 ? pick(BIGS) : BigInt(Math.floor(rand() * 2 ** 40));
  return unsigned ? BigInt.asUintN(64, b) : b;
};
const DOUBLES = [0, -0, 1.5, -2.25, 1e-300, Number.NaN, Number.POSITIVE_INFINITY, 0.001];
const INTS = [0, 1, 2, 3, -1, 127, 128, 2 ** 31 - 1, -(2 ** 31)];
const bytes = () => Uint8Array.from({ length: pick([0, 1, 32, 200]) }, () => Math.floor(rand() * 256));

function payload(): Envelope["payload"] {
  switch (Math.floor(rand() * 5)) {
    case 0:
      return {
        case: "preExec",
        value: create(PreExecRequestSchema, {
          sessionId: text(),
          callNumber: big(true),
          toolName: text(),
          toolParamsHash: bytes(),
          estimatedCostUsd: pick(DOUBLES),
          parentGuardId: text(),
          nonce: big(true),
          tags: rand() < 0.2 ? { a: text(), [text()]: "v" } : {},
          toolParamsJson: text(),
          estimatedCostUsdDecimal: text(),
        }),
      };
    case 1:
      return {
        case: "preExecResponse",
        value: create(PreExecResponseSchema, {
          sessionId: text(),
          callNumber: big(true),
          verdict: pick([0, 1, 2, 3]),
          denyReason: pick([0, 1, 5, 17]),
          humanReadableReason: text(),
          budgetRemainingUsd: pick(DOUBLES),
          repeatCount: pick(INTS),
          daemonTimeNs: big(false),
          probabilisticDeny: rand() < 0.5,
          reason: text(),
          budgetRemainingUsdDecimal: text(),
          receipt: text() + "e".repeat(Math.floor(rand() * 1500)),
          chainSeq: big(true),
          entryHash: text(),
          hitlRequestId: text(),
          hitlExpiresNs: big(false),
        }),
      };
    case 2:
      return {
        case: "postExec",
        value: create(PostExecNotificationSchema, {
          sessionId: text(),
          callNumber: big(true),
          actualCostUsd: pick(DOUBLES),
          success: rand() < 0.5,
          errorMessage: text(),
          durationMs: big(false),
          tokensIn: big(true),
          tokensOut: big(true),
          modelUsed: text(),
          actualCostUsdDecimal: text(),
          idempotencyKey: text(),
          ackRequested: rand() < 0.5,
        }),
      };
    case 3:
      return {
        case: "register",
        value: create(RegisterRequestSchema, { agentId: text(), metadata: { k: text() } }),
      };
    default:
      return {
        case: "error",
        value: create(ErrorSchema, { code: pick([0, 3]), detail: text(), message: text() }),
      };
  }
}

function envelope(): Envelope {
  return create(EnvelopeSchema, {
    protocolVersion: pick(["", "1.0", "1.1"]),
    messageId: text(),
    correlationId: text(),
    clientTimestampNs: big(false),
    serverTimestampNs: big(false),
    keyId: text(),
    hmac: rand() < 0.3 ? bytes() : new Uint8Array(0),
    payload: rand() < 0.05 ? { case: undefined } : payload(),
  });
}

describe("unsignedEnvelopeBytes", () => {
  it("writes toBinary's bytes (without the hmac) for 3,000 random envelopes", () => {
    for (let i = 0; i < 3000; i++) {
      const e = envelope();
      const want = toBinary(EnvelopeSchema, { ...e, hmac: new Uint8Array(0) });
      const { buffer, end } = unsignedEnvelopeBytes(e, 4, 34);
      const got = buffer.subarray(4, end);
      expect(Buffer.from(got).equals(Buffer.from(want)), `envelope ${i}`).toBe(true);
      expect(buffer.length).toBe(end + 34);
      const back = fromBinary(EnvelopeSchema, got);
      expect(back.payload.case).toBe(e.payload.case);
    }
  });

  it("hands an envelope with unknown fields to toBinary, unknown fields included", () => {
    const withUnknown = fromBinary(
      EnvelopeSchema,
      Uint8Array.from([
        ...toBinary(EnvelopeSchema, create(EnvelopeSchema, { messageId: "m" })),
        0xf8,
        0x06,
        0x01,
      ]),
    );
    expect(withUnknown.$unknown?.length).toBe(1);
    const { buffer, end } = unsignedEnvelopeBytes(withUnknown, 0, 0);
    expect(Buffer.from(buffer.subarray(0, end))).toEqual(Buffer.from(toBinary(EnvelopeSchema, withUnknown)));
  });
});
