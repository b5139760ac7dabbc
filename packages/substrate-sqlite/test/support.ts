// Test support for the SQLite substrate's own tests: temp database files and fully populated records.
// It asserts nothing; the shared contract suite (@leash/substrate-contract) has its own fixtures.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { BudgetAccount, HitlRequest, Reservation, SessionRecord } from "@leash/core";
import { afterEach } from "vitest";

export const T0 = 1_000_000_000_000_000;

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A path to a database file that does not exist yet, in a temp dir removed after the test. */
export function freshDbPath(name = "leash.db"): string {
  const dir = mkdtempSync(join(tmpdir(), "leash-sqlite-"));
  dirs.push(dir);
  return join(dir, name);
}

export function session(id: string, overrides: Partial<SessionRecord> = {}): SessionRecord {
  return {
    session_id: id,
    agent_id: "agent-1",
    organization_id: "org-1",
    status: "ACTIVE",
    config: { budget_usd: 10, max_repeat_calls: 3 },
    state: { total_calls: 0, budget_spent_usd: 0.30000000000000004, repeat_counts: { search: 1 } },
    call_count: 0,
    created_ns: T0,
    updated_ns: T0,
    last_heartbeat_ns: null,
    ...overrides,
  };
}

export function account(id: string, overrides: Partial<BudgetAccount> = {}): BudgetAccount {
  return {
    account_id: id,
    scope: "session",
    parent_id: null,
    limit_usd: "10.00",
    spent_usd: "0",
    reserved_usd: "0",
    created_ns: T0,
    updated_ns: T0,
    ...overrides,
  };
}

export function reservation(id: string, overrides: Partial<Reservation> = {}): Reservation {
  return {
    reservation_id: id,
    account_ids: ["acct-session", "acct-agent"],
    session_id: "sess-1",
    call_number: 1,
    amount_usd: "0.001",
    actual_usd: null,
    status: "PENDING",
    idempotency_key: null,
    created_ns: T0,
    expires_ns: T0 + 1_000,
    resolved_ns: null,
    ...overrides,
  };
}

export function hitlRequest(id: string, overrides: Partial<HitlRequest> = {}): HitlRequest {
  return {
    request_id: id,
    session_id: "sess-1",
    call_number: 4,
    tool_name: "wire_transfer",
    nonce: 7,
    args_digest: "ab".repeat(32),
    reason: "hitl_all_calls",
    status: "PENDING",
    decision: null,
    operator_id: null,
    successor_nonce: null,
    successor_args_digest: null,
    created_ns: T0,
    decided_ns: null,
    ...overrides,
  };
}
