import { describe, expect, it } from "vitest";
import { WireError } from "./errors.js";
import { decodeEnvelope, encodeFrame, FrameDecoder, MAX_FRAME_BYTES } from "./framing.js";

const body = (n: number, fill = 7) => new Uint8Array(n).fill(fill);
const concat = (...parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
};
const prefix = (n: number) => {
  const p = new Uint8Array(4);
  new DataView(p.buffer).setUint32(0, n, false);
  return p;
};
const code = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    return WireError.isInstance(e) ? e.code : "not a WireError";
  }
  return "no error";
};

describe("encodeFrame", () => {
  it("writes a 4-byte big-endian length", () => {
    expect([...encodeFrame(new Uint8Array([1, 2, 3]))]).toEqual([0, 0, 0, 3, 1, 2, 3]);
    expect([...encodeFrame(body(258)).subarray(0, 4)]).toEqual([0, 0, 1, 2]);
  });
  it("accepts exactly 1 MiB and refuses one byte more, and an empty body", () => {
    expect(encodeFrame(body(MAX_FRAME_BYTES)).length).toBe(MAX_FRAME_BYTES + 4);
    expect(code(() => encodeFrame(body(MAX_FRAME_BYTES + 1)))).toBe("message_too_large");
    expect(code(() => encodeFrame(new Uint8Array(0)))).toBe("malformed_frame");
  });
});

describe("FrameDecoder", () => {
  it("returns several frames from one chunk, in order", () => {
    const d = new FrameDecoder();
    const frames = d.push(concat(encodeFrame(body(3, 1)), encodeFrame(body(1, 2)), encodeFrame(body(5, 3))));
    expect(frames.map((f) => [...f])).toEqual([[1, 1, 1], [2], [3, 3, 3, 3, 3]]);
    expect(d.bufferedBytes).toBe(0);
    d.end();
  });

  it("reassembles frames fed byte by byte (prefix split too)", () => {
    const stream = concat(encodeFrame(body(300, 9)), encodeFrame(body(2, 4)));
    const d = new FrameDecoder();
    const frames: Uint8Array[] = [];
    for (let i = 0; i < stream.length; i++) frames.push(...d.push(stream.subarray(i, i + 1)));
    expect(frames.map((f) => f.length)).toEqual([300, 2]);
    expect(frames[0]!.every((b) => b === 9)).toBe(true);
    d.end();
  });

  it("handles a frame split across many chunks and a chunk holding the end of one and the start of the next", () => {
    const stream = concat(encodeFrame(body(10, 1)), encodeFrame(body(10, 2)));
    const d = new FrameDecoder();
    expect(d.push(stream.subarray(0, 3))).toEqual([]);
    expect(d.push(stream.subarray(3, 9))).toEqual([]);
    const a = d.push(stream.subarray(9, 20));
    expect(a.map((f) => f[0])).toEqual([1]);
    const b = d.push(stream.subarray(20));
    expect(b.map((f) => [f.length, f[0]])).toEqual([[10, 2]]);
  });

  it("refuses an oversize length prefix before any of the body arrives, then stays failed", () => {
    const d = new FrameDecoder();
    expect(code(() => d.push(prefix(MAX_FRAME_BYTES + 1)))).toBe("message_too_large");
    expect(d.bufferedBytes).toBe(0);
    expect(d.failure?.code).toBe("message_too_large");
    // The stream cannot be resynchronised: every later chunk, even a valid frame, gets the same error.
    expect(code(() => d.push(encodeFrame(body(1))))).toBe("message_too_large");
    expect(code(() => d.end())).toBe("message_too_large");
  });

  it("refuses 0xFFFFFFFF and a prefix arriving byte by byte", () => {
    const d = new FrameDecoder();
    const p = prefix(0xffffffff);
    expect(d.push(p.subarray(0, 3))).toEqual([]);
    expect(code(() => d.push(p.subarray(3)))).toBe("message_too_large");
  });

  it("does not buffer the body of a refused frame that came in the same chunk", () => {
    const d = new FrameDecoder({ maxBytes: 16 });
    expect(code(() => d.push(concat(encodeFrame(body(4)), prefix(17), body(17))))).toBe("message_too_large");
    expect(d.bufferedBytes).toBe(0);
  });

  it("refuses a zero-length frame", () => {
    const d = new FrameDecoder();
    expect(code(() => d.push(prefix(0)))).toBe("malformed_frame");
    expect(code(() => d.push(encodeFrame(body(1))))).toBe("malformed_frame");
  });

  it("reports a truncated frame at end of stream (in the prefix or in the body)", () => {
    const inPrefix = new FrameDecoder();
    inPrefix.push(new Uint8Array([0, 0]));
    expect(code(() => inPrefix.end())).toBe("malformed_frame");
    const inBody = new FrameDecoder();
    expect(inBody.push(encodeFrame(body(10)).subarray(0, 8))).toEqual([]);
    expect(inBody.bufferedBytes).toBe(4);
    expect(code(() => inBody.end())).toBe("malformed_frame");
  });

  it("inFrame: from a frame's first byte until it completes, the length prefix alone included", () => {
    const d = new FrameDecoder();
    const frame = encodeFrame(body(10));
    expect(d.inFrame).toBe(false);
    d.push(frame.subarray(0, 2));
    expect(d.inFrame).toBe(true);
    d.push(frame.subarray(2, 4));
    expect([d.inFrame, d.bufferedBytes]).toEqual([true, 0]);
    expect(d.push(frame.subarray(4)).length).toBe(1);
    expect(d.inFrame).toBe(false);
  });

  it("honours a smaller maxBytes and refuses a nonsensical one", () => {
    const d = new FrameDecoder({ maxBytes: 4 });
    expect(d.push(encodeFrame(body(4))).length).toBe(1);
    expect(code(() => d.push(prefix(5)))).toBe("message_too_large");
    expect(code(() => new FrameDecoder({ maxBytes: 0 }))).toBe("invalid_argument");
  });
});

describe("decodeEnvelope", () => {
  it("refuses bytes that are not an Envelope", () => {
    expect(code(() => decodeEnvelope(new Uint8Array([0xff, 0xff, 0xff])))).toBe("invalid_envelope");
  });
});
