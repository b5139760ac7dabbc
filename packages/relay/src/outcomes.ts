// How the relay reads one round's outcomes: which claimed items to ack, retry, give back or make DEAD,
// keeping each session's order. Claiming and settling in the store are the relay's and @leash/outbox's.

import type { OutboxItem } from "@leash/core";
import type { DeliveryOutcome } from "./sink.js";

/** What one round's outcomes mean for each claimed item: ack, retry, give back, or DEAD; and per session. */
export interface SortedOutcomes {
  delivered: number[];
  retry: { seq: number; error: string }[];
  release: { seq: number; error: string }[];
  dead: { seq: number; error: string }[];
  failed: number;
  blocked: number;
  unsentCount: number;
  /** The first retryable failure's error, or null when none failed. */
  firstError: string | null;
  failedSessions: Set<string | null>;
  passedSessions: Set<string | null>;
}

/** Sorts a round's outcomes, item by item in seq order, keeping each session's order. */
export function sortOutcomes(
  items: readonly OutboxItem[],
  outcomes: readonly DeliveryOutcome[],
  maxAttempts: number,
): SortedOutcomes {
  const delivered: number[] = [];
  const retry: { seq: number; error: string }[] = [];
  const release: { seq: number; error: string }[] = [];
  const dead: { seq: number; error: string }[] = [];
  let failed = 0;
  let blocked = 0;
  let unsentCount = 0;
  let firstError: string | null = null;
  // The first entry of each session in this batch that did not get through: later entries of the
  // session wait for it (a DEAD one included: it holds its session up until requeued).
  const stalled = new Map<string | null, { seq: number; error: string }>();
  const failedSessions = new Set<string | null>();
  const passedSessions = new Set<string | null>();
  items.forEach((item: OutboxItem, k) => {
    const outcome = outcomes[k]!;
    if (outcome.status === "delivered") {
      // Even behind a stalled entry (a sink breaking the order rule): it has taken effect, and not
      // acking it would only send it again.
      delivered.push(item.seq);
      passedSessions.add(item.session_id);
      return;
    }
    const head = stalled.get(item.session_id);
    if (head !== undefined) {
      // Not its own try, whatever the sink answered: the attempt is given back.
      blocked++;
      release.push({
        seq: item.seq,
        error: `blocked behind seq ${head.seq} of its session: ${head.error}`,
      });
      return;
    }
    stalled.set(item.session_id, { seq: item.seq, error: outcome.error });
    if (outcome.status === "unsent") {
      unsentCount++;
      release.push({ seq: item.seq, error: outcome.error });
    } else if (outcome.status === "permanent") {
      // DEAD: the store holds the session up from now on; nothing for the loop to wait out.
      passedSessions.add(item.session_id);
      dead.push({ seq: item.seq, error: outcome.error });
    } else {
      if (failed === 0) firstError = outcome.error;
      failed++;
      if (item.attempts >= maxAttempts) {
        passedSessions.add(item.session_id);
        dead.push({ seq: item.seq, error: `gave up after ${item.attempts} attempts: ${outcome.error}` });
      } else {
        failedSessions.add(item.session_id);
        retry.push({ seq: item.seq, error: outcome.error });
      }
    }
  });
  return {
    delivered,
    retry,
    release,
    dead,
    failed,
    blocked,
    unsentCount,
    firstError,
    failedSessions,
    passedSessions,
  };
}
