// Test support for the PostgreSQL substrate's own tests: the server check, throwaway schemas, and
// fully populated records. It asserts nothing; the shared contract suite has its own fixtures.
import type { BudgetAccount, Reservation, SessionRecord, Substrate } from "@leash/core";
import { Pool } from "pg";
import { afterAll, beforeAll } from "vitest";

export const DB_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
export const T0 = 1_000_000_000_000_000;

/**
 * Per test file: fails fast when the server is unreachable, and afterwards closes every substrate
 * handed to `track` and drops every schema `freshSchema` named.
 */
export function pgHarness(prefix: string) {
  const admin = new Pool({ connectionString: DB_URL, max: 4 });
  const schemas: string[] = [];
  const opened: Substrate[] = [];
  let counter = 0;
  beforeAll(async () => {
    try {
      await admin.query("SELECT 1");
    } catch (error) {
      throw new Error(
        `PostgreSQL is not reachable at ${DB_URL} (set LEASH_TEST_PG_URL, or start it with ` +
          `"pg_ctlcluster --skip-systemctl-redirect 15 main start"): ${String(error)}`,
      );
    }
  });
  afterAll(async () => {
    await Promise.allSettled(opened.map((s) => s.close()));
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });
  return {
    admin,
    freshSchema(): string {
      const schema = `${prefix}_${process.pid}_${Date.now().toString(36)}_${counter++}`;
      schemas.push(schema);
      return schema;
    },
    track<S extends Substrate>(substrate: S): S {
      opened.push(substrate);
      return substrate;
    },
  };
}

export const session = (id: string, over: Partial<SessionRecord> = {}): SessionRecord => ({
  session_id: id,
  agent_id: "agent-1",
  organization_id: "org-1",
  status: "ACTIVE",
  config: { budget_usd: 10 },
  state: { total_calls: 0, repeat_counts: {} },
  call_count: 0,
  created_ns: T0,
  updated_ns: T0,
  last_heartbeat_ns: null,
  ...over,
});

export const account = (id: string, over: Partial<BudgetAccount> = {}): BudgetAccount => ({
  account_id: id,
  scope: "session",
  parent_id: null,
  limit_usd: "1000",
  spent_usd: "0",
  reserved_usd: "0",
  created_ns: T0,
  updated_ns: T0,
  ...over,
});

export const reservation = (id: string, over: Partial<Reservation> = {}): Reservation => ({
  reservation_id: id,
  account_ids: ["a"],
  session_id: "s1",
  call_number: 1,
  amount_usd: "0.25",
  actual_usd: null,
  status: "PENDING",
  idempotency_key: null,
  created_ns: T0,
  expires_ns: T0 + 1000,
  resolved_ns: null,
  ...over,
});
