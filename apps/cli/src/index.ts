// The programmatic face of @leash/cli: run the `leash` command in-process with your own streams.
// It adds nothing the binary lacks; domain logic lives in @leash/core and friends.

export { type FixtureFile, loadFixtureFile, parseFixtureText, type Vector } from "./fixtures.js";
export type { Io } from "./io.js";
export { CliError } from "./io.js";
export { buildProgram, EXIT_INTERNAL, run } from "./program.js";
export { openStore, parseStoreUrl, redactStoreUrl, resolveStoreUrl } from "./store.js";
