// Building and opening SP/1.0 envelopes: ids, timestamps, version, HMAC and replay checks in one place.
// It does no I/O and decides nothing; a daemon or client owns the socket and the answers.

import { create } from "@bufbuild/protobuf";
import type { Clock } from "@leash/core";
import { validate as uuidValidate, version as uuidVersion, v7 as uuidv7 } from "uuid";
import { WIRE_ERROR_CODES, WireError } from "./errors.js";
import { decodeEnvelope, FRAME_PREFIX_BYTES, prefixFrame } from "./framing.js";
import {
  type Envelope,
  EnvelopeSchema,
  ErrorCode,
  type Error as ErrorMessage,
  ErrorSchema,
} from "./gen/shackle/sp1/shackle_pb.js";
import { checkEnvelopeHmac, signEnvelope, signedEnvelopeBytes } from "./hmac.js";
import { pooledRandom } from "./random-pool.js";
import type { ReplayWindow } from "./replay.js";
import {
  negotiateProtocolVersion,
  PROTOCOL_VERSION,
  requireSupportedVersion,
  SUPPORTED_PROTOCOL_VERSIONS,
} from "./version.js";

/** Who sent an envelope; it says which timestamp field carries the sender's clock. */
export type Sender = "agent" | "daemon";

/** The payload of an Envelope: `{ case: "pre_exec", value: … }` and so on (shackle.proto oneof). */
export type Payload = Envelope["payload"];

/**
 * A UUIDv7 message id for the instant `nowMs` (milliseconds since the epoch; default now). Its 74
 * random bits come from a pool (random-pool.ts), not a getRandomValues call per id.
 */
export function newMessageId(nowMs: number = Date.now()): string {
  return uuidv7({ msecs: nowMs, random: pooledRandom(16) });
}

/** Whether `id` is a UUIDv7 in its canonical text form. */
export function isMessageId(id: string): boolean {
  return typeof id === "string" && uuidValidate(id) && uuidVersion(id) === 7 && id === id.toLowerCase();
}

export interface SealOptions {
  /** The sender's HMAC key (the organization's), at least 32 bytes. */
  key: Uint8Array;
  /** Envelope.key_id: which of the organization's keys `key` is. Default "" (its current key). */
  keyId?: string;
  sender: Sender;
  clock: Clock;
  /** A response's correlation_id is its request's; a request's defaults to its own message_id. */
  correlationId?: string;
  /** Default PROTOCOL_VERSION (a client sends the negotiated one after registration). */
  protocolVersion?: string;
  /** Default a fresh UUIDv7 for the clock's instant. */
  messageId?: string;
}

/**
 * A signed envelope carrying `payload`, serialized: the frame body to pass to encodeFrame. Sets
 * message_id, correlation_id, the sender's timestamp (client_timestamp_ns for an agent,
 * server_timestamp_ns for the daemon) and the HMAC.
 */
export function sealEnvelope(payload: Payload, options: SealOptions): Uint8Array {
  return signEnvelope(envelopeOf(payload, options), options.key);
}

/**
 * sealEnvelope's bytes as a whole frame (encodeFrame(sealEnvelope(…)) byte for byte), serialized once
 * into one buffer with room for the length prefix: what a socket writes.
 * @throws WireError `message_too_large` over `maxBytes` (default MAX_FRAME_BYTES).
 */
export function sealFrame(payload: Payload, options: SealOptions, maxBytes?: number): Uint8Array {
  return prefixFrame(
    signedEnvelopeBytes(envelopeOf(payload, options), options.key, FRAME_PREFIX_BYTES),
    maxBytes,
  );
}

function envelopeOf(payload: Payload, options: SealOptions): Envelope {
  const nowNs = BigInt(Math.trunc(options.clock.nowNs()));
  const messageId = options.messageId ?? newMessageId(Number(nowNs / 1_000_000n));
  return create(EnvelopeSchema, {
    protocolVersion: options.protocolVersion ?? PROTOCOL_VERSION,
    messageId,
    correlationId: options.correlationId ?? messageId,
    clientTimestampNs: options.sender === "agent" ? nowNs : 0n,
    serverTimestampNs: options.sender === "daemon" ? nowNs : 0n,
    keyId: options.keyId ?? "",
    payload,
  });
}

export interface OpenOptions {
  /**
   * The HMAC key for an envelope, found from its (not yet authenticated) key_id, organization or
   * session; undefined when there is none (refused as `unknown_key`).
   */
  keyFor: (envelope: Envelope) => Uint8Array | undefined;
  /** Who sent it: the daemon opens "agent" envelopes, a client "daemon" ones. */
  sender: Sender;
  /**
   * Where the message id is admitted; null when the caller admits it itself with admitEnvelope, once it
   * has decided the envelope deserves a slot (a daemon does so per organization, after its quotas).
   */
  replay: ReplayWindow | null;
  /** Default SUPPORTED_PROTOCOL_VERSIONS. */
  supportedVersions?: readonly string[];
}

/**
 * Decodes a frame body and checks it, in this order: it is an Envelope with a payload and a UUIDv7
 * message id; its HMAC verifies over the bytes as received; its protocol version is spoken here (a
 * register envelope needs only a negotiable one); its sender timestamp is within the replay window
 * and its message id was not accepted before (the id is then remembered). Nothing about an envelope
 * that fails is trusted or remembered.
 * @throws WireError `invalid_envelope`, `unknown_key`, `bad_hmac`, `protocol_version_mismatch`,
 *   `timestamp_out_of_window`, `replayed_message`, `replay_cache_full`.
 */
export function openEnvelope(body: Uint8Array, options: OpenOptions): Envelope {
  const envelope = decodeEnvelope(body);
  if (envelope.payload.case === undefined) throw new WireError("invalid_envelope", "envelope has no payload");
  if (!isMessageId(envelope.messageId)) {
    throw new WireError("invalid_envelope", "message_id must be a lowercase UUIDv7");
  }
  const key = options.keyFor(envelope);
  if (key === undefined) throw new WireError("unknown_key", "no HMAC key for this envelope");
  checkEnvelopeHmac(body, key);
  const supported = options.supportedVersions ?? SUPPORTED_PROTOCOL_VERSIONS;
  if (envelope.payload.case === "register") negotiateProtocolVersion(envelope.protocolVersion, supported);
  else requireSupportedVersion(envelope.protocolVersion, supported);
  if (options.replay !== null) admitEnvelope(envelope, options.sender, options.replay);
  return envelope;
}

/**
 * Admits an opened envelope's message id into `replay` (its sender's timestamp checked against the window).
 * @throws WireError `timestamp_out_of_window`, `replayed_message`, `replay_cache_full`.
 */
export function admitEnvelope(envelope: Envelope, sender: Sender, replay: ReplayWindow): void {
  const ts = sender === "agent" ? envelope.clientTimestampNs : envelope.serverTimestampNs;
  replay.admit(envelope.messageId, ts);
}

/**
 * The Error payload answering `error`: a WireError's Appendix B code, message and detail (its code),
 * with the supported versions on a version mismatch; anything else is DAEMON_UNAVAILABLE with a
 * generic message (internal details stay in the daemon's log).
 */
export function errorPayload(error: unknown): { case: "error"; value: ErrorMessage } {
  if (WireError.isInstance(error)) {
    return {
      case: "error",
      value: create(ErrorSchema, {
        code: WIRE_ERROR_CODES[error.code],
        message: error.message,
        detail: error.code,
        supportedVersions: [...error.supportedVersions],
      }),
    };
  }
  return {
    case: "error",
    value: create(ErrorSchema, { code: ErrorCode.DAEMON_UNAVAILABLE, message: "internal daemon error" }),
  };
}
