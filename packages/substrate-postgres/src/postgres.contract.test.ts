// Runs the shared substrate contract suite against PostgreSQL, one fresh schema per test, group commit on and off.
// PostgreSQL must be reachable (CI runs it): a missing server fails these tests, it never skips them.
import { defineSubstrateContract } from "@leash/substrate-contract";
import { DB_URL, pgHarness } from "../test/support.js";
import { openPostgresSubstrate } from "./index.js";

const { admin, freshSchema } = pgHarness("leash_contract");

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
    freshLocation: async () => freshSchema(),
    dispose: async (location) => {
      await admin.query(`DROP SCHEMA IF EXISTS "${location}" CASCADE`);
    },
  });
}
