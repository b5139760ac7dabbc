import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it, vi } from "vitest";
import { isMessageId, newMessageId, openEnvelope, sealEnvelope, sealFrame } from "./envelope.js";
import { WireError } from "./errors.js";
import { encodeFrame, FrameDecoder } from "./framing.js";
import { EnvelopeSchema } from "./gen/shackle/sp1/shackle_pb.js";
import { checkEnvelopeHmac, signEnvelope } from "./hmac.js";
import { RANDOM_POOL_BYTES } from "./random-pool.js";
import { ReplayWindow } from "./replay.js";

const key = new Uint8Array(32).map((_, i) => 200 - i);
const NOW_NS = 1_764_600_000_123_456_800;
const clock = { nowNs: () => NOW_NS };
const payload = {
  case: "preExec" as const,
  value: {
    sessionId: "s_ü",
    callNumber: 7n,
    toolName: "web_search",
    toolParamsJson: '{"q":"naïve 🐍","n":1.0}',
  },
};
const options = {
  key,
  keyId: "k1",
  sender: "daemon" as const,
  clock,
  correlationId: "0190f5a0-0000-7000-8000-000000000001",
  messageId: "0190f5a0-0000-7000-8000-0000000000aa",
};
// encodeFrame(sealEnvelope(payload, options)) as written by the build before sealFrame existed.
const GOLDEN =
  "000000b80a05312e302e30122430313930663561302d303030302d373030302d383030302d3030303030303030303061611a" +
  "2430313930663561302d303030302d373030302d383030302d30303030303030303030303128809a8d909dcbc7be185232" +
  "0a04735fc3bc10071a0a7765625f736561726368a2061b7b2271223a226e61c3af766520f09f908d222c226e223a312e30" +
  "7db206026b313220c79f79f63fcf9531d52e04c402cd7befb2602f6a0ff1bc6c0e8f7d96c2835887";
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

describe("sealFrame", () => {
  it("writes the same bytes as encodeFrame(sealEnvelope(…)), and as the build before it", () => {
    const frame = sealFrame(payload, options);
    expect(hex(frame)).toBe(GOLDEN);
    expect(hex(encodeFrame(sealEnvelope(payload, options)))).toBe(GOLDEN);
  });

  it("is a frame whose body opens and verifies", () => {
    const [body] = new FrameDecoder().push(sealFrame(payload, { ...options, messageId: newMessageId() }));
    const envelope = openEnvelope(body!, {
      keyFor: () => key,
      sender: "daemon",
      replay: new ReplayWindow({ clock }),
    });
    expect(envelope.payload).toMatchObject(payload);
    expect(envelope.keyId).toBe("k1");
  });

  it("refuses a frame over maxBytes", () => {
    expect(() => sealFrame(payload, options, 100)).toThrow(WireError);
  });
});

describe("signEnvelope", () => {
  it("signs an envelope whose hmac is set as if it were empty (the MAC covers the rest only)", () => {
    const envelope = create(EnvelopeSchema, { messageId: options.messageId, payload });
    const again = create(EnvelopeSchema, { ...envelope, hmac: new Uint8Array(32).fill(9) });
    expect(hex(signEnvelope(again, key))).toBe(hex(signEnvelope(envelope, key)));
    expect(() => checkEnvelopeHmac(signEnvelope(again, key), key)).not.toThrow();
    expect(again.hmac).toEqual(new Uint8Array(32).fill(9));
  });
});

describe("newMessageId", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("draws its randomness a pool at a time, and every id is a distinct UUIDv7", () => {
    const draws = vi.spyOn(globalThis.crypto, "getRandomValues");
    const ids = Array.from({ length: 10_000 }, () => newMessageId());
    expect(ids.every(isMessageId)).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    // 16 bytes an id: one draw per RANDOM_POOL_BYTES / 16 ids, not one per id.
    expect(draws.mock.calls.length).toBeLessThanOrEqual(Math.ceil((ids.length * 16) / RANDOM_POOL_BYTES) + 1);
  });

  it("keeps the time it is given in the id's first 48 bits", () => {
    const id = newMessageId(1_764_600_000_123);
    expect(Number.parseInt(id.replaceAll("-", "").slice(0, 12), 16)).toBe(1_764_600_000_123);
  });
});
