// Public surface of @leash/test-stores: fresh real stores, stores at an older schema version, plausible chain
// entries, a hand-moved clock, `leash serve` child processes and an openssl-made PKI.
// Private test infrastructure (never published); no runtime package may depend on it.

export { manualClock } from "./clock.js";
export { type AppendEntries, type Enqueue, entryAppender, makeEntry } from "./entries.js";
export { type SqlStoreAt, storeAtVersion } from "./older-schema.js";
export { makeTestPki, type TestLeaf } from "./pki.js";
export {
  type CliRun,
  ensureBuilt,
  type Listening,
  leashCli,
  type ServeProcess,
  STATE_DIR,
  serve,
  writeConfig,
} from "./serve.js";
export { type ServeFixture, type ServeFixtureOptions, startServeFixture } from "./serve-fixture.js";
export {
  freshLocation,
  openStore,
  PG_URL,
  STORE_KINDS,
  type StoreKind,
  type StoreLocation,
  type StoreOptions,
  sqlInFile,
  sqlInSchema,
  type TestStore,
  withPg,
} from "./stores.js";
