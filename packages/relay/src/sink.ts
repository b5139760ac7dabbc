// The Sink port (docs/architecture.md §3): where a relay delivers chain entries, and what it must promise.
// Types only; the sinks that ship with Leash are in ./sinks and ./postgres, the delivery loop in ./relay.

import type { ChainEntryRecord } from "@leash/core";

/** Bumped on any change a sink must follow; a sink declares the one it implements. */
export const SINK_SPECIFICATION_VERSION = "leash-sink-v1" as const;

/** What became of one entry of a batch. */
export type DeliveryOutcome =
  /** The entry has taken effect at the destination (durably, where the destination can say so). */
  | { readonly status: "delivered" }
  /** It has not, but may on a later try (destination down, timeout, 5xx, 429): the relay retries it. */
  | { readonly status: "retryable"; readonly error: string }
  /** It never will (the destination refuses it, a 4xx): the relay marks it DEAD, keeping `error`. */
  | { readonly status: "permanent"; readonly error: string }
  /**
   * It was not tried (the sink stopped early: the destination is unreachable, or asks to slow down):
   * the relay gives it back without counting an attempt against it.
   */
  | { readonly status: "unsent"; readonly error: string };

export interface DeliveryResult {
  /** Exactly one outcome per entry, in the batch's order: `outcomes[i]` is about `batch[i]`. */
  readonly outcomes: readonly DeliveryOutcome[];
}

/**
 * A destination for chain entries.
 *
 * Guarantees every sink MUST keep:
 * - Idempotent by `entry_id`: delivering an entry twice has the effect of delivering it once. Relays
 *   redeliver whatever they could not acknowledge (a crash between delivery and ack, an expired lease).
 * - `body` arrives byte for byte: it is the signed canonical JSON, and a re-serialization (key order,
 *   number spelling, escapes) would break its signature.
 * - Order per session: the batch comes in chain order. An entry MUST NOT take effect when an earlier
 *   entry of the same session (`session_id`, null included) in the batch is reported anything but
 *   "delivered" (a DEAD entry holds its session up until an operator requeues it). Skipping the
 *   rest of that session, and going on with the other sessions, is what keeps one failing session
 *   from holding up the others.
 * - "unsent" only for an entry the sink did not try: attempts count what was tried, so an entry
 *   reported "retryable" or "permanent" was sent (or its sending began).
 * - "delivered" only once the effect is durable as far as the destination allows (fsync, COMMIT, 2xx):
 *   the relay acknowledges on it, and an acknowledged entry is never sent again.
 * - `deliver` MAY reject instead of answering; the relay then treats every entry as retryable.
 */
export interface Sink {
  readonly specificationVersion: typeof SINK_SPECIFICATION_VERSION;
  /** For logs, stats and last_error: "file:/var/log/leash.ndjson", "webhook:https://…". */
  readonly name: string;
  deliver(batch: readonly ChainEntryRecord[]): Promise<DeliveryResult>;
  /** Releases files, sockets and pools the sink opened itself. */
  close?(): Promise<void>;
}

export const DELIVERED: DeliveryOutcome = Object.freeze({ status: "delivered" });

export function retryable(error: string): DeliveryOutcome {
  return { status: "retryable", error };
}

export function permanent(error: string): DeliveryOutcome {
  return { status: "permanent", error };
}

export function unsent(error: string): DeliveryOutcome {
  return { status: "unsent", error };
}
