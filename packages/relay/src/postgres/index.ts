// @leash/relay/postgres: the PostgreSQL audit-table sink, apart so that only its users need `pg` installed.
// The relay loop and the other sinks are in @leash/relay; this entry point adds nothing else.

export { openPostgresSink, PostgresSink, type PostgresSinkOptions } from "./sink.js";
