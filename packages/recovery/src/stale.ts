// Finds the sessions that missed their heartbeats (spec §4.5). Marking them STALE, with the signed
// session_stale entry, is engine.markStale's job; reviving them is engine.heartbeat's.
import type { SessionRecord, Substrate } from "@leash/core";

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
