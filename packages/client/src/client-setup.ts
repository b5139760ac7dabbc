// createClient's options checked and its connection built (Unix socket with the organization's HMAC key,
// or gRPC), plus the small wire helpers the client's calls share. No request is sent here.
import { createHash, getRandomValues } from "node:crypto";
import type { Clock } from "@leash/core";
import { errorCodeName, MIN_KEY_BYTES, type Payload } from "@leash/wire";
import { Connection } from "./connection.js";
import { LeashError, type LeashErrorCode } from "./errors.js";
import { GrpcConnection } from "./grpc-connection.js";
import type { RequestOutcome, Transport } from "./transport.js";
import type { ClientOptions, PreExecCall } from "./types.js";

/** The spec's pre_exec SLA is 5 ms (§8); 50 ms leaves room for a loaded host before failing closed. */
export const DEFAULT_TIMEOUT_MS = 50;
export const DEFAULT_CONTROL_TIMEOUT_MS = 1000;
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000;
export const DEFAULT_RECONNECT = { initialDelayMs: 50, maxDelayMs: 5000 } as const;

const systemClock: Clock = { nowNs: () => Date.now() * 1e6 };

/** The options' timings, each checked (a bad one is a LeashError invalid_argument). */
export interface ClientTimings {
  readonly timeoutMs: number;
  readonly controlTimeoutMs: number;
  /** 0 turns the heartbeat off. */
  readonly heartbeatMs: number;
  readonly reconnect: { initialDelayMs: number; maxDelayMs: number };
}

/** Checks the options createClient takes and resolves their defaults. */
export function checkClientOptions(options: ClientOptions): ClientTimings {
  for (const name of ["organizationId", "agentId"] as const) {
    if (typeof options?.[name] !== "string" || options[name] === "") {
      throw new LeashError("invalid_argument", `createClient: ${name} must be a non-empty string`);
    }
  }
  if ((options.socketPath === undefined) === (options.grpc === undefined)) {
    throw new LeashError("invalid_argument", "createClient: give one of socketPath or grpc");
  }
  if (options.daemonPublicKey !== undefined && !/^[0-9a-f]{64}$/i.test(options.daemonPublicKey)) {
    throw new LeashError(
      "invalid_argument",
      "createClient: daemonPublicKey must be 64 hex characters (Ed25519)",
    );
  }
  const timeoutMs = positive("timeoutMs", options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  const controlTimeoutMs = positive(
    "controlTimeoutMs",
    options.controlTimeoutMs ?? DEFAULT_CONTROL_TIMEOUT_MS,
  );
  const heartbeatMs = options.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS;
  if (!Number.isFinite(heartbeatMs) || heartbeatMs < 0) {
    throw new LeashError(
      "invalid_argument",
      "createClient: heartbeatIntervalMs must be ≥ 0 (0 turns it off)",
    );
  }
  const reconnect = {
    initialDelayMs: positive(
      "reconnect.initialDelayMs",
      options.reconnect?.initialDelayMs ?? DEFAULT_RECONNECT.initialDelayMs,
    ),
    maxDelayMs: positive(
      "reconnect.maxDelayMs",
      options.reconnect?.maxDelayMs ?? DEFAULT_RECONNECT.maxDelayMs,
    ),
  };
  return { timeoutMs, controlTimeoutMs, heartbeatMs, reconnect };
}

/** The connection the options ask for (not started). */
export function connectionFor(
  options: ClientOptions,
  reconnect: { initialDelayMs: number; maxDelayMs: number },
): Transport {
  return options.grpc !== undefined
    ? new GrpcConnection({ target: options.grpc, organizationId: options.organizationId, ...reconnect })
    : socketConnection(options, reconnect);
}

/** The Unix-socket transport: SP/1.0 envelopes HMAC'd with the organization's key. */
function socketConnection(
  options: ClientOptions,
  reconnect: { initialDelayMs: number; maxDelayMs: number },
): Connection {
  if (typeof options.socketPath !== "string" || options.socketPath === "")
    throw new LeashError("invalid_argument", "createClient: socketPath must be a non-empty string");
  if (options.hmacKey === undefined)
    throw new LeashError(
      "invalid_argument",
      "createClient: the socket needs hmacKey (the organization's key)",
    );
  const key = hmacKeyOf(options.hmacKey);
  if (typeof options.keyId !== "string")
    throw new LeashError("invalid_argument", "createClient: keyId must be a string");
  return new Connection({
    socketPath: options.socketPath,
    key,
    keyId: options.keyId,
    clock: systemClock,
    ...reconnect,
    onStray: (envelope) => {
      if (envelope.payload.case !== "error") return;
      const e = envelope.payload.value;
      options.onBackgroundError?.(
        new LeashError(
          "daemon_error",
          `the daemon refused a notification or late request: ${errorCodeName(e.code)} ${e.detail}: ${e.message}`,
        ),
      );
    },
  });
}

function hmacKeyOf(key: Uint8Array | string): Uint8Array {
  let bytes: Uint8Array;
  if (typeof key === "string") {
    const hex = key.trim();
    if (!/^([0-9a-fA-F]{2})+$/.test(hex))
      throw new LeashError("invalid_argument", "createClient: hmacKey is not hex");
    bytes = new Uint8Array(Buffer.from(hex, "hex"));
  } else if (key instanceof Uint8Array) bytes = key;
  else throw new LeashError("invalid_argument", "createClient: hmacKey must be bytes or hex");
  if (bytes.length < MIN_KEY_BYTES) {
    throw new LeashError("invalid_argument", `createClient: hmacKey must be at least ${MIN_KEY_BYTES} bytes`);
  }
  return bytes;
}

function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0)
    throw new LeashError("invalid_argument", `createClient: ${name} must be > 0`);
  return value;
}

export const FAILURE_CODES: Record<string, LeashErrorCode> = {
  daemon_unavailable: "daemon_unavailable",
  timeout: "timeout",
  bad_response: "bad_response",
  auth_failed: "auth_failed",
};

export function answerOf(outcome: RequestOutcome): Payload {
  if (outcome.ok) return outcome.answer;
  throw new LeashError(FAILURE_CODES[outcome.failure] ?? "bad_response", outcome.message);
}

const MAX_UINT64 = 2n ** 64n - 1n;

/**
 * The uint64 nonce to send: a safe integer or uint64 decimal as given; any other text (a UUID, say)
 * maps to 52 bits of its SHA-256, plus one. Default: a random safe integer, so a daemon that reads it
 * as a JavaScript number records it exactly.
 */
export function nonceOf(nonce: PreExecCall["nonce"]): bigint {
  if (nonce === undefined) {
    const [hi = 0, lo = 0] = getRandomValues(new Uint32Array(2));
    return (BigInt(hi & 0x1fffff) << 32n) + BigInt(lo) + 1n;
  }
  if (typeof nonce === "number") {
    if (!Number.isSafeInteger(nonce) || nonce < 1) throw new Error(`nonce ${nonce} is not an integer ≥ 1`);
    return BigInt(nonce);
  }
  if (typeof nonce === "bigint") {
    if (nonce < 1n || nonce > MAX_UINT64) throw new Error(`nonce ${nonce} is outside 1 … 2^64 − 1`);
    return nonce;
  }
  if (typeof nonce === "string" && /^[1-9][0-9]{0,19}$/.test(nonce) && BigInt(nonce) <= MAX_UINT64)
    return BigInt(nonce);
  if (typeof nonce !== "string" || nonce === "")
    throw new Error("nonce must be a non-empty string or an integer");
  const digest = createHash("sha256").update(nonce).digest();
  return (digest.readBigUInt64BE(0) >> 12n) + 1n;
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
