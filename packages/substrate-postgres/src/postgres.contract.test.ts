// Runs the shared substrate contract suite against PostgreSQL, one fresh schema per test, group commit on and off.
// PostgreSQL must be reachable (CI runs it): a missing server fails these tests, it never skips them.
import { defineSubstrateContract } from "@leash/substrate-contract";
import { Pool } from "pg";
import { afterAll, beforeAll } from "vitest";
import { openPostgresSubstrate } from "./index.js";

const DB_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const admin = new Pool({ connectionString: DB_URL, max: 2 });
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

afterAll(() => admin.end());

// Once as configured by default (group commit on), once with every transaction committing alone.
for (const groupCommit of [undefined, false] as const) {
  defineSubstrateContract({
    name: groupCommit === false ? "postgres (groupCommit: false)" : "postgres",
    // A small pool per handle: the suite opens several handles per test and other test files run alongside.
    open: (location) =>
      openPostgresSubstrate({
        url: DB_URL,
        schema: location,
        poolSize: 5,
        ...(groupCommit === undefined ? {} : { groupCommit }),
      }),
    freshLocation: async () => `leash_contract_${process.pid}_${Date.now().toString(36)}_${counter++}`,
    dispose: async (location) => {
      await admin.query(`DROP SCHEMA IF EXISTS "${location}" CASCADE`);
    },
  });
}
