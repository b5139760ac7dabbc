// @leash/substrate-postgres: the Substrate port on PostgreSQL, for daemons that share one database.
// The engine and the port types live elsewhere (@leash/engine, @leash/core); this is storage only.
export { LATEST_SCHEMA_VERSION } from "./migrations.js";
export type { GroupCommitOptions, PostgresSubstrateOptions, PostgresSubstrateStats } from "./substrate.js";
export { openPostgresSubstrate, PostgresSubstrate } from "./substrate.js";
export { type PostgresUrlOptions, parsePostgresUrl } from "./url.js";
