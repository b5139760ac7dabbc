// The one error @leash/wire throws: a frame, envelope, key, version or value the wire refuses.
// Each code names the SP/1.0 Appendix B code a daemon answers with; this module sends nothing.

import { LeashBaseError } from "@leash/core";
import { ErrorCode } from "./gen/shackle/sp1/shackle_pb.js";

/**
 * Why the wire refused something. The code is also the `detail` of the Error message a daemon sends
 * (shackle.proto `Error.detail`), so a program on the other side can tell the cases apart.
 */
export type WireErrorCode =
  /** A frame's length prefix says more than MAX_FRAME_BYTES (1 MiB). */
  | "message_too_large"
  /** A zero-length frame, or a stream that ended inside a frame. */
  | "malformed_frame"
  /** Bytes that are not an Envelope, an Envelope without payload, or a malformed field in it. */
  | "invalid_envelope"
  /** No hmac, a hmac of the wrong size, field 6 twice, or a MAC that does not match. */
  | "bad_hmac"
  /** No key for the envelope (unknown key_id or organization). */
  | "unknown_key"
  /** A message id already accepted within the replay window. */
  | "replayed_message"
  /** The sender's timestamp is further from this clock than the replay window. */
  | "timestamp_out_of_window"
  /** The replay cache is full of unexpired ids; refusing is the only safe answer. */
  | "replay_cache_full"
  /** No protocol version both sides speak (spec §9.4). */
  | "protocol_version_mismatch"
  /** tool_params_json is not JSON, or not a JSON object. */
  | "invalid_params_json"
  /** A money decimal string outside the grammar of shackle.proto ("Money"). */
  | "invalid_decimal"
  /** A money double and its decimal string both sent, and they disagree. */
  | "money_mismatch"
  /** A correlation id already in flight, or an empty one. */
  | "duplicate_correlation_id"
  /** No response arrived for a request in time. */
  | "request_timeout"
  /** The connection closed with the request still in flight. */
  | "connection_closed"
  /** A caller passed something the function does not take (a short key, a negative window, …). */
  | "invalid_argument";

/** The Appendix B code (shackle.proto ErrorCode) each WireError code is answered with. */
export const WIRE_ERROR_CODES: Readonly<Record<WireErrorCode, ErrorCode>> = {
  message_too_large: ErrorCode.MESSAGE_TOO_LARGE,
  malformed_frame: ErrorCode.INVALID_MESSAGE,
  invalid_envelope: ErrorCode.INVALID_MESSAGE,
  bad_hmac: ErrorCode.AUTHENTICATION_FAILED,
  unknown_key: ErrorCode.AUTHENTICATION_FAILED,
  replayed_message: ErrorCode.AUTHENTICATION_FAILED,
  timestamp_out_of_window: ErrorCode.AUTHENTICATION_FAILED,
  replay_cache_full: ErrorCode.RATE_LIMITED,
  protocol_version_mismatch: ErrorCode.PROTOCOL_VERSION_MISMATCH,
  invalid_params_json: ErrorCode.INVALID_MESSAGE,
  invalid_decimal: ErrorCode.INVALID_MESSAGE,
  money_mismatch: ErrorCode.INVALID_MESSAGE,
  duplicate_correlation_id: ErrorCode.INVALID_MESSAGE,
  request_timeout: ErrorCode.DAEMON_UNAVAILABLE,
  connection_closed: ErrorCode.DAEMON_UNAVAILABLE,
  invalid_argument: ErrorCode.ERROR_CODE_UNSPECIFIED,
};

export class WireError extends LeashBaseError<WireErrorCode> {
  static override readonly marker: symbol = Symbol.for("leash.wire.error");
  override readonly name = "WireError";
  /** With protocol_version_mismatch: the versions this side speaks, highest first. */
  readonly supportedVersions: readonly string[];

  constructor(
    code: WireErrorCode,
    message: string,
    options?: { cause?: unknown; supportedVersions?: readonly string[] },
  ) {
    super(code, message, options);
    this.supportedVersions = options?.supportedVersions ?? [];
  }

  /** The Appendix B code to answer with (shackle.proto ErrorCode). */
  get wireCode(): ErrorCode {
    return WIRE_ERROR_CODES[this.code];
  }
}

/** The SP/1.0 Appendix B error codes, as the spec spells them (shackle.proto ErrorCode, values 1–8). */
export const APPENDIX_B_ERROR_CODES = [
  "PROTOCOL_VERSION_MISMATCH",
  "SESSION_NOT_FOUND",
  "AUTHENTICATION_FAILED",
  "RATE_LIMITED",
  "MESSAGE_TOO_LARGE",
  "DAEMON_UNAVAILABLE",
  "ORGANIZATION_QUOTA_EXCEEDED",
  "PARENT_GUARD_DENIED",
] as const;

export type AppendixBErrorCode = (typeof APPENDIX_B_ERROR_CODES)[number];

/** The spec's name of an ErrorCode value ("MESSAGE_TOO_LARGE"; "INVALID_MESSAGE" for Leash's own; the number if unknown). */
export function errorCodeName(code: ErrorCode): string {
  return ErrorCode[code] ?? String(code);
}
