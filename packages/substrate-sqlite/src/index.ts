// Public surface of @leash/substrate-sqlite: the embedded, durable, multi-process Substrate on better-sqlite3.
// Table layouts, the statement cache and the transaction queue stay internal.
export type { GroupCommitOptions, SqliteSubstrateOptions } from "./options.js";
export type { Migration } from "./schema.js";
export { MIGRATIONS, SCHEMA_VERSION } from "./schema.js";
export type { SqliteSubstrateStats } from "./substrate.js";
export { openSqliteSubstrate, SqliteSubstrate } from "./substrate.js";
export { parseSqliteUrl } from "./url.js";
