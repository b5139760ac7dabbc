// Unix-socket framing of SP/1.0 (spec §6.1): 4-byte big-endian length + one binary Envelope.
// It neither authenticates nor interprets envelopes (hmac.ts, envelope.ts do); it only cuts frames.

import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { WireError } from "./errors.js";
import { type Envelope, EnvelopeSchema } from "./gen/shackle/sp1/shackle_pb.js";

/** The largest frame body accepted or sent: 1 MiB (spec §7.5 "Max message size: 1MB"). */
export const MAX_FRAME_BYTES = 1024 * 1024;

const PREFIX_BYTES = 4;

/**
 * One frame: the 4-byte big-endian length of `body`, then `body` (a serialized Envelope).
 * @throws WireError `message_too_large` over `maxBytes`, `malformed_frame` for an empty body.
 */
export function encodeFrame(body: Uint8Array, maxBytes: number = MAX_FRAME_BYTES): Uint8Array {
  if (body.length === 0) throw new WireError("malformed_frame", "a frame must not be empty");
  if (body.length > maxBytes) {
    throw new WireError("message_too_large", `frame of ${body.length} bytes exceeds ${maxBytes}`);
  }
  const frame = new Uint8Array(PREFIX_BYTES + body.length);
  new DataView(frame.buffer).setUint32(0, body.length, false);
  frame.set(body, PREFIX_BYTES);
  return frame;
}

/** Room to leave before a body built in place, for prefixFrame to fill. */
export const FRAME_PREFIX_BYTES = PREFIX_BYTES;

/**
 * Makes `frame` (FRAME_PREFIX_BYTES left free, then the body) a frame by writing the body's length in
 * front of it, without copying the body; the same bytes as encodeFrame(body).
 * @throws WireError `message_too_large` over `maxBytes`, `malformed_frame` for an empty body.
 */
export function prefixFrame(frame: Uint8Array, maxBytes: number = MAX_FRAME_BYTES): Uint8Array {
  const length = frame.length - PREFIX_BYTES;
  if (length <= 0) throw new WireError("malformed_frame", "a frame must not be empty");
  if (length > maxBytes)
    throw new WireError("message_too_large", `frame of ${length} bytes exceeds ${maxBytes}`);
  new DataView(frame.buffer, frame.byteOffset, PREFIX_BYTES).setUint32(0, length, false);
  return frame;
}

/**
 * A streaming decoder: feed it the socket's chunks as they come, get whole frame bodies back.
 * It holds at most one partial frame (≤ maxBytes) plus the chunk in hand. A length prefix over
 * maxBytes, or of 0, is refused as soon as its 4 bytes arrive — the body is never buffered — and
 * the decoder is then failed for good: the stream cannot be resynchronised, so every later push
 * throws the same error and the owner answers once and closes the connection.
 */
export class FrameDecoder {
  readonly maxBytes: number;
  #chunks: Uint8Array[] = [];
  #buffered = 0;
  /** The body length being waited for, or -1 while the prefix is incomplete. */
  #need = -1;
  #failure: WireError | null = null;

  constructor(options?: { maxBytes?: number }) {
    const maxBytes = options?.maxBytes ?? MAX_FRAME_BYTES;
    if (!Number.isInteger(maxBytes) || maxBytes < 1 || maxBytes > 0xffffffff) {
      throw new WireError("invalid_argument", "maxBytes must be an integer in [1, 2^32 - 1]");
    }
    this.maxBytes = maxBytes;
  }

  /** Bytes received and not yet returned as a frame. */
  get bufferedBytes(): number {
    return this.#buffered;
  }

  /** Whether a frame has begun and not yet completed (even when only its length prefix has arrived). */
  get inFrame(): boolean {
    return this.#buffered > 0 || this.#need >= 0;
  }

  /** The error that failed the decoder, or null while it is usable. */
  get failure(): WireError | null {
    return this.#failure;
  }

  /**
   * Takes one chunk; returns the frame bodies it completes, in order (possibly none). A body may be a
   * view into a pushed chunk, so do not reuse a chunk's memory after pushing it. When a chunk holds
   * whole frames and then a refused prefix, it throws and those frames are dropped with it: the
   * connection is closing, and the peer fails its requests in flight closed.
   * @throws WireError `message_too_large` or `malformed_frame` (zero length); again on every later call.
   */
  push(chunk: Uint8Array): Uint8Array[] {
    if (this.#failure !== null) throw this.#failure;
    const frames: Uint8Array[] = [];
    if (chunk.length > 0) {
      this.#chunks.push(chunk);
      this.#buffered += chunk.length;
    }
    for (;;) {
      if (this.#need < 0) {
        if (this.#buffered < PREFIX_BYTES) break;
        const prefix = this.#take(PREFIX_BYTES);
        const length = new DataView(prefix.buffer, prefix.byteOffset, PREFIX_BYTES).getUint32(0, false);
        if (length === 0) this.#fail(new WireError("malformed_frame", "zero-length frame"));
        if (length > this.maxBytes) {
          this.#fail(
            new WireError(
              "message_too_large",
              `frame length ${length} exceeds the limit of ${this.maxBytes}`,
            ),
          );
        }
        this.#need = length;
      }
      if (this.#buffered < this.#need) break;
      frames.push(this.#take(this.#need));
      this.#need = -1;
    }
    return frames;
  }

  /**
   * The stream ended: throws if it ended inside a frame (a truncated frame), else does nothing.
   * @throws WireError `malformed_frame`, or the error that failed the decoder.
   */
  end(): void {
    if (this.#failure !== null) throw this.#failure;
    if (this.#buffered > 0 || this.#need >= 0) {
      const expected = this.#need >= 0 ? `${this.#need}-byte body` : "4-byte length prefix";
      this.#fail(
        new WireError(
          "malformed_frame",
          `stream ended inside a frame (${this.#buffered} bytes of a ${expected})`,
        ),
      );
    }
  }

  #fail(error: WireError): never {
    this.#failure = error;
    this.#chunks = [];
    this.#buffered = 0;
    this.#need = -1;
    throw error;
  }

  /** Removes and returns the first `n` buffered bytes (n ≤ buffered); copies only when they span chunks. */
  #take(n: number): Uint8Array {
    this.#buffered -= n;
    const first = this.#chunks[0]!;
    if (first.length >= n) {
      if (first.length === n) this.#chunks.shift();
      else this.#chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = new Uint8Array(n);
    let filled = 0;
    while (filled < n) {
      const head = this.#chunks[0]!;
      const part = Math.min(head.length, n - filled);
      out.set(head.subarray(0, part), filled);
      filled += part;
      if (part === head.length) this.#chunks.shift();
      else this.#chunks[0] = head.subarray(part);
    }
    return out;
  }
}

/** Serializes an Envelope as it is (hmac included); see hmac.ts signEnvelope to make a signed one. */
export function encodeEnvelope(envelope: Envelope): Uint8Array {
  return toBinary(EnvelopeSchema, envelope);
}

/**
 * Parses a frame body into an Envelope. Authenticates nothing (see openEnvelope).
 * @throws WireError `invalid_envelope` for bytes that are not an Envelope.
 */
export function decodeEnvelope(body: Uint8Array): Envelope {
  try {
    return fromBinary(EnvelopeSchema, body);
  } catch (error) {
    throw new WireError("invalid_envelope", "frame body is not an SP/1.0 Envelope", { cause: error });
  }
}
