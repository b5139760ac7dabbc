// Marks sessions STALE after missed heartbeats (spec §4.5), each with a signed "session_stale" entry
// queued in the outbox in the same transaction. It never revives a session (engine.heartbeat does).
import { appendEntry, type Signer } from "@leash/chain";
import type { ChainEntryRecord, SessionRecord, Substrate } from "@leash/core";
import { enqueueEntry } from "@leash/outbox";

/** Only these can go stale: a TERMINATED session stays terminated, a STALE one already is. */
const LIVE = ["ACTIVE", "PAUSED"] as const;

/** When a session last showed life: its last heartbeat, or its registration if it never sent one. */
export function lastSeenNs(session: SessionRecord): number {
  return session.last_heartbeat_ns ?? session.created_ns;
}

/** ACTIVE and PAUSED sessions whose last heartbeat is more than `staleNs` before `nowNs`. */
export async function findStaleSessions(
  substrate: Substrate,
  nowNs: number,
  staleNs: number,
): Promise<SessionRecord[]> {
  const live = await substrate.transaction(async (tx) => {
    const found: SessionRecord[] = [];
    for (const status of LIVE) found.push(...(await tx.sessions.list({ status })));
    return found;
  });
  return live.filter((s) => nowNs - lastSeenNs(s) > staleNs);
}

export interface MarkStaleInput {
  sessionId: string;
  signer: Signer;
  /** The chain's id (its genesis entry_id), saving appendEntry a read; null when unknown. */
  chainId: string | null;
  nowNs: number;
  staleNs: number;
  heartbeatIntervalMs: number;
  staleAfterMissed: number;
}

/** Epoch nanoseconds pass 2^53: the audit body carries them as exact decimal strings. */
const ns = (value: number): string => BigInt(value).toString();

/**
 * One transaction: re-reads the session under its lock and, if it is still ACTIVE or PAUSED and still
 * overdue (a heartbeat may have landed since it was listed), sets it STALE, appends the signed
 * "session_stale" entry and queues it. Returns the entry, or null when there was nothing to do.
 * This is an engine-style state change written outside the engine (which exposes no auditor); it
 * follows packages/engine/src/audit.ts: append with @leash/chain, enqueue in the same transaction.
 */
export function markSessionStale(
  substrate: Substrate,
  input: MarkStaleInput,
): Promise<ChainEntryRecord | null> {
  return substrate.transaction(async (tx) => {
    const session = await tx.sessions.get(input.sessionId);
    if (session === null || !(LIVE as readonly string[]).includes(session.status)) return null;
    const seen = lastSeenNs(session);
    if (input.nowNs - seen <= input.staleNs) return null;
    await tx.sessions.update({ ...session, status: "STALE", updated_ns: input.nowNs });
    const entry = await appendEntry(tx, {
      chainId: input.chainId,
      kind: "session_stale",
      data: {
        session_id: session.session_id,
        agent_id: session.agent_id,
        organization_id: session.organization_id,
        previous_status: session.status,
        last_heartbeat_ns: session.last_heartbeat_ns === null ? null : ns(session.last_heartbeat_ns),
        last_seen_ns: ns(seen),
        heartbeat_interval_ms: input.heartbeatIntervalMs,
        missed_heartbeats: input.staleAfterMissed,
        now_ns: ns(input.nowNs),
        reason: "heartbeat_timeout",
      },
      signer: input.signer,
      nowNs: input.nowNs,
    });
    await enqueueEntry(tx, entry);
    return entry;
  });
}
