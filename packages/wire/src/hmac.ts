// HMAC-SHA256 of an SP/1.0 envelope with an organization's key, over the envelope's bytes minus field 6.
// It checks a MAC and nothing else: freshness and replay are replay.ts's, key lookup the caller's.

import { createHmac, timingSafeEqual } from "node:crypto";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { unsignedEnvelopeBytes } from "./envelope-writer.js";
import { WireError } from "./errors.js";
import type { Envelope } from "./gen/shackle/sp1/shackle_pb.js";

/** Envelope.hmac's field number (shackle.proto). */
export const HMAC_FIELD = 6;
/** HMAC-SHA256's size in bytes. */
export const HMAC_BYTES = 32;
/** The shortest key accepted: as long as the hash output (RFC 2104 §3). */
export const MIN_KEY_BYTES = 32;

function checkKey(key: Uint8Array): void {
  if (!(key instanceof Uint8Array) || key.length < MIN_KEY_BYTES) {
    throw new WireError("invalid_argument", `an HMAC key must be at least ${MIN_KEY_BYTES} bytes`);
  }
}

function mac(key: Uint8Array, bytes: Uint8Array): Uint8Array {
  return createHmac("sha256", key).update(bytes).digest();
}

/** Field 6's tag (field 6, wire type LEN) and its length (32): the two bytes before the MAC. */
const HMAC_TAG = (HMAC_FIELD << 3) | WireType.LengthDelimited;

/**
 * The envelope serialized once with `hmac` empty, then field 6 holding HMAC-SHA256(key, those bytes),
 * in one buffer sized up front with `headroom` bytes left free before it (a frame's length prefix).
 */
export function signedEnvelopeBytes(envelope: Envelope, key: Uint8Array, headroom: number): Uint8Array {
  checkKey(key);
  const { buffer: out, end } = unsignedEnvelopeBytes(envelope, headroom, 2 + HMAC_BYTES);
  let at = end;
  out[at++] = HMAC_TAG;
  out[at++] = HMAC_BYTES;
  out.set(mac(key, out.subarray(headroom, end)), at);
  return out;
}

/**
 * The envelope's bytes with its MAC appended: serializes it with `hmac` empty, computes
 * HMAC-SHA256(key, those bytes) and appends field 6. The result is a frame body (encodeFrame).
 * The envelope passed in is not modified.
 * @throws WireError `invalid_argument` for a key shorter than MIN_KEY_BYTES.
 */
export function signEnvelope(envelope: Envelope, key: Uint8Array): Uint8Array {
  return signedEnvelopeBytes(envelope, key, 0);
}

/**
 * Splits received envelope bytes into the MAC input (the bytes with the one top-level field 6 cut out,
 * everything else as received) and the MAC itself (undefined when field 6 is absent).
 * @throws WireError `invalid_envelope` for bytes that do not parse as top-level protobuf fields,
 *   `bad_hmac` for field 6 with the wrong wire type or present more than once.
 */
export function splitHmac(bytes: Uint8Array): { unsigned: Uint8Array; hmac: Uint8Array | undefined } {
  const { hmac, cutStart, cutEnd } = locateHmac(bytes);
  if (hmac === undefined) return { unsigned: bytes, hmac };
  const unsigned = new Uint8Array(bytes.length - (cutEnd - cutStart));
  unsigned.set(bytes.subarray(0, cutStart), 0);
  unsigned.set(bytes.subarray(cutEnd), cutStart);
  return { unsigned, hmac };
}

/** Where the one top-level field 6 lies in `bytes` (see splitHmac for what is refused). */
function locateHmac(bytes: Uint8Array): { hmac: Uint8Array | undefined; cutStart: number; cutEnd: number } {
  const reader = new BinaryReader(bytes);
  let hmac: Uint8Array | undefined;
  let cutStart = -1;
  let cutEnd = -1;
  try {
    while (reader.pos < reader.len) {
      const start = reader.pos;
      const [field, wireType] = reader.tag();
      if (field === HMAC_FIELD) {
        if (wireType !== WireType.LengthDelimited)
          throw new WireError("bad_hmac", "hmac field has the wrong wire type");
        if (hmac !== undefined) throw new WireError("bad_hmac", "hmac field present more than once");
        hmac = reader.bytes();
        cutStart = start;
        cutEnd = reader.pos;
      } else {
        reader.skip(wireType, field);
      }
    }
    if (reader.pos !== reader.len) throw new Error("trailing bytes");
  } catch (error) {
    if (WireError.isInstance(error)) throw error;
    throw new WireError("invalid_envelope", "envelope bytes are not protobuf", { cause: error });
  }
  return { hmac, cutStart, cutEnd };
}

/**
 * Whether `bytes` (an envelope exactly as received) carry a valid MAC under `key`. Compares in
 * constant time. Never throws for bad input: malformed bytes, no MAC, or a MAC of the wrong size are
 * `false` (use checkEnvelopeHmac for the reason).
 * @throws WireError `invalid_argument` only for a key shorter than MIN_KEY_BYTES.
 */
export function verifyEnvelopeHmac(bytes: Uint8Array, key: Uint8Array): boolean {
  checkKey(key);
  try {
    checkEnvelopeHmac(bytes, key);
    return true;
  } catch (error) {
    if (WireError.isInstance(error) && error.code !== "invalid_argument") return false;
    throw error;
  }
}

/**
 * Like verifyEnvelopeHmac, but throws the reason.
 * @throws WireError `bad_hmac` (absent, wrong size, repeated, or not matching), `invalid_envelope`.
 */
export function checkEnvelopeHmac(bytes: Uint8Array, key: Uint8Array): void {
  checkKey(key);
  const { hmac, cutStart, cutEnd } = locateHmac(bytes);
  if (hmac === undefined) throw new WireError("bad_hmac", "envelope carries no hmac");
  if (hmac.length !== HMAC_BYTES) throw new WireError("bad_hmac", `hmac must be ${HMAC_BYTES} bytes`);
  // The MAC input is the bytes either side of field 6, hashed in place rather than copied together.
  const expected = createHmac("sha256", key)
    .update(bytes.subarray(0, cutStart))
    .update(bytes.subarray(cutEnd))
    .digest();
  if (!timingSafeEqual(expected, hmac)) throw new WireError("bad_hmac", "hmac does not match");
}
