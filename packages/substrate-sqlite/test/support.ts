// Test support for the SQLite substrate's own tests: temp database files, and the contract suite's
// record fixtures with the plain values these tests count from. It asserts nothing.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { BudgetAccount, HitlRequest, Reservation, SessionRecord } from "@leash/core";
import { makeAccount, makeHitlRequest, makeReservation, makeSession, T0 } from "@leash/substrate-contract";
import { afterEach } from "vitest";

export { T0 };

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

// A session with no calls yet (its state keeps a binary-float leftover: it must come back as the same double).
export const session = (id: string, over: Partial<SessionRecord> = {}): SessionRecord =>
  makeSession(id, {
    config: { budget_usd: 10, max_repeat_calls: 3 },
    state: { total_calls: 0, budget_spent_usd: 0.30000000000000004, repeat_counts: { search: 1 } },
    call_count: 0,
    updated_ns: T0,
    ...over,
  });

export const account = (id: string, over: Partial<BudgetAccount> = {}): BudgetAccount =>
  makeAccount(id, over);

export const reservation = (id: string, over: Partial<Reservation> = {}): Reservation =>
  makeReservation(id, {
    account_ids: ["acct-session", "acct-agent"],
    session_id: "sess-1",
    amount_usd: "0.001",
    expires_ns: T0 + 1_000,
    ...over,
  });

export const hitlRequest = (id: string, over: Partial<HitlRequest> = {}): HitlRequest =>
  makeHitlRequest(id, {
    tool_name: "wire_transfer",
    args_digest: "ab".repeat(32),
    reason: "hitl_all_calls",
    created_ns: T0,
    ...over,
  });
