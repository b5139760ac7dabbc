// @leash/substrate-postgres: the Substrate port on PostgreSQL, for daemons that share one database.
// The engine and the port types live elsewhere (@leash/engine, @leash/core); this is storage only.
export { type TableNames, tableNames } from "./codec.js";
// With a target version, the migrations also build an older schema: what migration tests start from.
export { LATEST_SCHEMA_VERSION, MIGRATIONS, type Migration, runMigrations } from "./migrations.js";
export type { GroupCommitOptions, PostgresSubstrateOptions, PostgresSubstrateStats } from "./substrate.js";
export { openPostgresSubstrate, PostgresSubstrate } from "./substrate.js";
export { type PostgresUrlOptions, parsePostgresUrl } from "./url.js";
