// Shared rows and helpers of the outbox contract sections: queued items, enqueue, claim, and clocks.
// It registers no tests itself.

import type { OutboxItem, Substrate } from "@leash/core";
import { T0, WORLD } from "./fixtures.js";

/** A real epoch-nanosecond reading (2026-11-30): an integral double above 2^53. */
export const EPOCH_NS = 1_796_012_406_975_000_000;
/** 30 s, in nanoseconds. */
export const LEASE_NS = 30_000_000_000;

export function queued(seq: number, overrides: Partial<OutboxItem> = {}): OutboxItem {
  return {
    seq,
    entry_id: `01890000-0000-7000-8000-${seq.toString(16).padStart(12, "0")}`,
    session_id: seq % 3 === 0 ? null : WORLD.session1,
    status: "PENDING",
    attempts: 0,
    claimed_by: null,
    lease_until_ns: null,
    last_error: null,
    created_ns: T0 + seq,
    ...overrides,
  };
}

export async function enqueue(sub: Substrate, seqs: readonly number[]): Promise<void> {
  await sub.transaction(async (tx) => {
    for (const seq of seqs) {
      const { entry_id, session_id, created_ns } = queued(seq);
      await tx.outbox.enqueue({ seq, entry_id, session_id, created_ns });
    }
  });
}

export const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

export function claim(sub: Substrate, relayId: string, limit: number, nowNs = T0, leaseNs = LEASE_NS) {
  return sub.transaction((tx) => tx.outbox.claim({ relayId, limit, nowNs, leaseNs }));
}

export const seqsOf = (items: readonly OutboxItem[]) => items.map((i) => i.seq);
