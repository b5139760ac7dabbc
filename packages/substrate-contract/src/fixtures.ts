// Record builders and a small seeded world for the contract tests: realistic, fully populated records.
// They hold no assertions; any field can be overridden per test.

import { createHash } from "node:crypto";
import type {
  BudgetAccount,
  ChainEntryRecord,
  HitlRequest,
  Reservation,
  SessionRecord,
  Substrate,
} from "@leash/core";

/**
 * The base timestamp of the suite, in nanoseconds. The port types every `*_ns` field as `number`, and a
 * real epoch-nanosecond clock (~1.8e18) is far above Number.MAX_SAFE_INTEGER (~9.0e15): such a value has
 * already lost precision in JavaScript before it reaches a substrate. So the suite only writes integers up
 * to MAX_SAFE_INTEGER, which every substrate must return exactly; MAX_SAFE_INTEGER itself is among them.
 */
export const T0 = 1_000_000_000_000_000;
export const MAX_SAFE_NS = Number.MAX_SAFE_INTEGER;

/** Ids of the world `seedWorld` creates: two sessions and a session → agent → organization account chain. */
export const WORLD = {
  session1: "sess-1",
  session2: "sess-2",
  orgAccount: "acct-org",
  agentAccount: "acct-agent",
  sessionAccount: "acct-session",
} as const;

export function makeSession(sessionId: string, overrides: Partial<SessionRecord> = {}): SessionRecord {
  return {
    session_id: sessionId,
    agent_id: "agent-1",
    organization_id: "org-1",
    status: "ACTIVE",
    config: {
      budget_usd: 10,
      budget_scope: "session",
      max_repeat_calls: 3,
      hitl_mode: "on_threshold",
      hitl_budget_threshold: 0.2,
    },
    state: {
      status: "ACTIVE",
      circuit_tripped: false,
      circuit_trip_reason: null,
      circuit_tripped_at_ns: null,
      budget_initial_usd: 10,
      budget_remaining_usd: 9.7,
      // A binary-float leftover on purpose: state numbers must come back as the same double.
      budget_spent_usd: 0.30000000000000004,
      total_calls: 3,
      repeat_counts: { search: 2, fetch: 1 },
      window_counts: {},
      window_start_ns: null,
      last_tool_name: "search",
      last_tool_params_hash: "ab".repeat(32),
      last_activity_ns: T0 + 3,
      session_started_ns: T0,
      pending_transition: null,
      pending_request: null,
    },
    call_count: 3,
    created_ns: T0,
    updated_ns: T0 + 3,
    last_heartbeat_ns: null,
    // The engine stamps a snapshot with the seq of the last chain entry it reflects.
    at_seq: 41,
    ...overrides,
  };
}

export function makeAccount(accountId: string, overrides: Partial<BudgetAccount> = {}): BudgetAccount {
  return {
    account_id: accountId,
    scope: "session",
    parent_id: null,
    limit_usd: "10.00",
    spent_usd: "0",
    reserved_usd: "0",
    created_ns: T0,
    updated_ns: T0,
    at_seq: 41,
    ...overrides,
  };
}

export function makeReservation(reservationId: string, overrides: Partial<Reservation> = {}): Reservation {
  return {
    reservation_id: reservationId,
    // Child first, and deliberately not in alphabetical order: the order is data and must survive.
    account_ids: [WORLD.sessionAccount, WORLD.agentAccount, WORLD.orgAccount],
    session_id: WORLD.session1,
    call_number: 1,
    amount_usd: "0.25",
    actual_usd: null,
    status: "PENDING",
    idempotency_key: null,
    created_ns: T0,
    expires_ns: T0 + 30_000_000_000,
    resolved_ns: null,
    ...overrides,
  };
}

export function makeHitlRequest(requestId: string, overrides: Partial<HitlRequest> = {}): HitlRequest {
  return {
    request_id: requestId,
    session_id: WORLD.session1,
    call_number: 4,
    tool_name: "transfer_funds",
    nonce: 7,
    args_digest: "cd".repeat(32),
    reason: "budget_threshold",
    status: "PENDING",
    decision: null,
    operator_id: null,
    successor_nonce: null,
    successor_args_digest: null,
    created_ns: T0 + 4,
    decided_ns: null,
    params_json: null,
    budget_spent_usd: null,
    budget_limit_usd: null,
    budget_remaining_usd: null,
    policy_id: null,
    expires_ns: null,
    comment: null,
    successor_params_json: null,
    ...overrides,
  };
}

/**
 * Inserts the sessions and accounts other records point at, parents first, in one transaction, so a
 * substrate with foreign keys accepts the nonces, reservations and HITL requests the tests then write.
 */
export async function seedWorld(substrate: Substrate): Promise<void> {
  await substrate.transaction(async (tx) => {
    await tx.sessions.insert(makeSession(WORLD.session1));
    await tx.sessions.insert(makeSession(WORLD.session2, { agent_id: "agent-2", status: "PAUSED" }));
    await tx.budgets.insertAccount(
      makeAccount(WORLD.orgAccount, { scope: "organization", limit_usd: "1000" }),
    );
    await tx.budgets.insertAccount(
      makeAccount(WORLD.agentAccount, { scope: "agent", parent_id: WORLD.orgAccount, limit_usd: "100" }),
    );
    await tx.budgets.insertAccount(
      makeAccount(WORLD.sessionAccount, { scope: "session", parent_id: WORLD.agentAccount }),
    );
  });
}

/** `prev_hash` of the first chain entry. */
export const GENESIS_PREV_HASH = "0".repeat(64);

/** A UUIDv7-shaped id that encodes the seq, so a test can tell entries apart at a glance. */
export function chainEntryId(seq: number): string {
  return `01890000-0000-7000-8000-${seq.toString(16).padStart(12, "0")}`;
}

/**
 * A chain entry whose hash really is SHA-256 over its body, and whose body is canonical-JSON-like text
 * with non-ASCII in it. Substrates must not look inside: the body only has to come back byte for byte.
 * Overriding `body` recomputes `entry_hash` unless that is overridden too.
 */
export function makeChainEntry(
  seq: number,
  prevHash: string,
  overrides: Partial<ChainEntryRecord> = {},
): ChainEntryRecord {
  const createdNs = overrides.created_ns ?? T0 + seq * 1_000;
  const sessionId = overrides.session_id === undefined ? WORLD.session1 : overrides.session_id;
  const body =
    overrides.body ??
    `{"created_ns":${createdNs},"data":{"note":"ünï ✓ 😀 \\u2028","tool":"search"},"kind":"decision",` +
      `"prev_hash":"${prevHash}","seq":${seq},"session_id":${JSON.stringify(sessionId)}}`;
  return {
    seq,
    entry_id: chainEntryId(seq),
    entry_hash: createHash("sha256").update(body, "utf8").digest("hex"),
    prev_hash: prevHash,
    body,
    // 86 base64url characters, the length of an Ed25519 signature; not a real one.
    signature: createHash("sha512").update(body, "utf8").digest("base64url"),
    key_id: "key-2026-01",
    kind: "decision",
    session_id: sessionId,
    created_ns: createdNs,
    ...overrides,
  };
}

/** `count` correctly linked entries starting at seq `from` after `prevHash`. */
export function makeChain(count: number, from = 0, prevHash = GENESIS_PREV_HASH): ChainEntryRecord[] {
  const entries: ChainEntryRecord[] = [];
  for (let seq = from; seq < from + count; seq++) {
    const entry = makeChainEntry(seq, entries.at(-1)?.entry_hash ?? prevHash);
    entries.push(entry);
  }
  return entries;
}

/** What the engine enqueues for a chain entry. */
export function outboxItemFor(entry: ChainEntryRecord): {
  seq: number;
  entry_id: string;
  session_id: string | null;
  created_ns: number;
} {
  return {
    seq: entry.seq,
    entry_id: entry.entry_id,
    session_id: entry.session_id,
    created_ns: entry.created_ns,
  };
}
