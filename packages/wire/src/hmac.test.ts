import { createHmac } from "node:crypto";
import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { WireError } from "./errors.js";
import { decodeEnvelope } from "./framing.js";
import { EnvelopeSchema } from "./gen/shackle/sp1/shackle_pb.js";
import { checkEnvelopeHmac, signEnvelope, splitHmac, verifyEnvelopeHmac } from "./hmac.js";

const key = new Uint8Array(32).fill(0x42);
const otherKey = new Uint8Array(32).fill(0x43);

const envelope = () =>
  create(EnvelopeSchema, {
    protocolVersion: "1.0.0",
    messageId: "01936f6e-7a5b-7c3d-9e8f-0123456789ab",
    correlationId: "01936f6e-7a5b-7c3d-9e8f-0123456789ab",
    clientTimestampNs: 1_764_600_000_000_000_000n,
    serverTimestampNs: 0n,
    payload: {
      case: "preExec",
      value: { sessionId: "s_01", callNumber: 1n, toolName: "web_search", toolParamsJson: '{"q":"x"}' },
    },
  });

const reason = (bytes: Uint8Array, k = key) => {
  try {
    checkEnvelopeHmac(bytes, k);
    return "ok";
  } catch (e) {
    return WireError.isInstance(e) ? e.code : "not a WireError";
  }
};

describe("signEnvelope / verifyEnvelopeHmac", () => {
  it("verifies what it signs, and the signed bytes decode to the same envelope plus its MAC", () => {
    const signed = signEnvelope(envelope(), key);
    expect(verifyEnvelopeHmac(signed, key)).toBe(true);
    const back = decodeEnvelope(signed);
    expect(back.messageId).toBe(envelope().messageId);
    expect(back.hmac.length).toBe(32);
  });

  it("the MAC is HMAC-SHA256 over the envelope serialized with hmac empty", () => {
    const unsigned = toBinary(EnvelopeSchema, envelope());
    const expected = createHmac("sha256", key).update(unsigned).digest();
    expect(Buffer.from(decodeEnvelope(signEnvelope(envelope(), key)).hmac)).toEqual(expected);
    expect(Buffer.from(splitHmac(signEnvelope(envelope(), key)).unsigned)).toEqual(Buffer.from(unsigned));
  });

  it("also accepts a sender that sets the MAC and re-serializes (field 6 in the middle)", () => {
    const e = envelope();
    e.hmac = createHmac("sha256", key).update(toBinary(EnvelopeSchema, e)).digest();
    expect(verifyEnvelopeHmac(toBinary(EnvelopeSchema, e), key)).toBe(true);
  });

  it("fails for a flipped bit anywhere in the envelope, MAC included", () => {
    const signed = signEnvelope(envelope(), key);
    for (let i = 0; i < signed.length; i++) {
      for (const bit of [0, 7]) {
        const tampered = signed.slice();
        tampered[i]! ^= 1 << bit;
        expect(verifyEnvelopeHmac(tampered, key), `byte ${i} bit ${bit}`).toBe(false);
      }
    }
  });

  it("covers message id, correlation id and both timestamps, not only the payload", () => {
    const base = envelope();
    const mac = decodeEnvelope(signEnvelope(base, key)).hmac;
    const variants = [
      { messageId: "01936f6e-7a5b-7c3d-9e8f-0123456789ac" },
      { correlationId: "other" },
      { clientTimestampNs: base.clientTimestampNs + 1n },
      { serverTimestampNs: 1n },
      { protocolVersion: "1.0.1" },
      { keyId: "k2" },
    ];
    for (const change of variants) {
      const forged = create(EnvelopeSchema, { ...base, ...change, hmac: mac });
      expect(
        verifyEnvelopeHmac(toBinary(EnvelopeSchema, forged), key),
        JSON.stringify(change, (_k, v) => (typeof v === "bigint" ? `${v}` : v)),
      ).toBe(false);
    }
  });

  it("fails with a wrong key, without a MAC, with a short MAC, with two MAC fields", () => {
    const signed = signEnvelope(envelope(), key);
    expect(reason(signed, otherKey)).toBe("bad_hmac");
    expect(reason(toBinary(EnvelopeSchema, envelope()))).toBe("bad_hmac");
    const short = toBinary(
      EnvelopeSchema,
      create(EnvelopeSchema, { ...envelope(), hmac: new Uint8Array(31) }),
    );
    expect(reason(short)).toBe("bad_hmac");
    const twice = new Uint8Array([...signed, ...signed.subarray(signed.length - 34)]);
    expect(reason(twice)).toBe("bad_hmac");
    expect(reason(new Uint8Array([0xff]))).toBe("invalid_envelope");
  });

  it("refuses keys shorter than 32 bytes", () => {
    expect(() => signEnvelope(envelope(), new Uint8Array(16))).toThrow(/at least 32 bytes/);
    expect(() => verifyEnvelopeHmac(new Uint8Array(0), new Uint8Array(16))).toThrow(/at least 32 bytes/);
  });
});
