// Test support for the PostgreSQL substrate's own tests: the server check, throwaway schemas, and the
// contract suite's record fixtures with the plain values these tests count from. It asserts nothing.
import type { BudgetAccount, Reservation, SessionRecord, Substrate } from "@leash/core";
import { makeAccount, makeReservation, makeSession, T0 } from "@leash/substrate-contract";
import { Pool } from "pg";
import { afterAll, afterEach, beforeAll } from "vitest";

export const DB_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
export { T0 };

/**
 * Per test file: fails fast when the server is unreachable, closes every substrate handed to `track`
 * once its test is over (test files run in parallel against one server, and pools kept open until
 * the end of a file took it to its 100-connection limit), and drops every schema `freshSchema` named.
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
  afterEach(async () => {
    await Promise.allSettled(opened.splice(0).map((s) => s.close()));
  });
  afterAll(async () => {
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

// The contract suite's fixtures with the plain values these tests count from: a fresh session
// (no calls yet), a roomy account, and a hold on account "a" for session "s1".
export const session = (id: string, over: Partial<SessionRecord> = {}): SessionRecord =>
  makeSession(id, {
    config: { budget_usd: 10 },
    state: { total_calls: 0, repeat_counts: {} },
    call_count: 0,
    updated_ns: T0,
    ...over,
  });

export const account = (id: string, over: Partial<BudgetAccount> = {}): BudgetAccount =>
  makeAccount(id, { limit_usd: "1000", ...over });

export const reservation = (id: string, over: Partial<Reservation> = {}): Reservation =>
  makeReservation(id, { account_ids: ["a"], session_id: "s1", expires_ns: T0 + 1000, ...over });
