// Public surface of @leash/test-stores: fresh real stores, plausible chain entries and a hand-moved clock.
// Private test infrastructure (never published); no runtime package may depend on it.

export { manualClock } from "./clock.js";
export { type AppendEntries, type Enqueue, entryAppender, makeEntry } from "./entries.js";
export {
  freshLocation,
  openStore,
  PG_URL,
  STORE_KINDS,
  type StoreKind,
  type StoreLocation,
  type StoreOptions,
  sqlInSchema,
  type TestStore,
  withPg,
} from "./stores.js";
