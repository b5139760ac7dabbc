// What the client needs from a way of reaching the daemon (Unix socket or gRPC): a request that never
// throws and says why it got no usable answer. No decisions here: the client fails closed on failures.
import type { Payload } from "@leash/wire";

/** Why a request got no usable answer; the client turns each into a fail-closed reason. */
/** `auth_failed`: the daemon refused our HMAC key or key id (its unsigned Error says so). */
export type RequestFailure = "daemon_unavailable" | "timeout" | "bad_response" | "auth_failed";

export type RequestOutcome =
  | { ok: true; answer: Payload }
  | { ok: false; failure: RequestFailure; message: string };

/** A settlement's outcome: `answer` is null when the transport has no acknowledgement (the socket). */
export type SettleOutcome = RequestOutcome | { ok: true; answer: null };

export interface Transport {
  /** Starts connecting now (the first request would otherwise). */
  start(): void;
  /** Sends `payload`, waits up to `timeoutMs` (connecting included) for its authenticated answer. */
  request(payload: Payload, timeoutMs: number): Promise<RequestOutcome>;
  /**
   * Sends a post_exec and waits until the daemon has it durably: a post_exec_ack (socket) or `Empty`
   * (gRPC), or a refusal.
   */
  settle(payload: Payload, timeoutMs: number): Promise<SettleOutcome>;
  /** Runs `listener` after each (re)connection, when the transport knows of them (the socket does). */
  onConnected?(listener: () => void): void;
  /** The version negotiated at Register; sent on every later request. */
  protocolVersion: string | undefined;
  /** Closes for good; requests in flight fail as daemon_unavailable. */
  close(): void;
}
