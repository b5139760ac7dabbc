// The CLI's own helpers (arguments, errors, stores, keys, engine settings) for the repository's
// private @leash/bench package, which `leash bench` loads. Not an API: it may change in any release.

export { nonNegativeNumber, positiveInteger, positiveNumber } from "./args.js";
export {
  addStoreOptions,
  checkSigner,
  engineFailure,
  loadSettings,
  newEngine,
  type Settings,
  type StoreOptions,
} from "./context.js";
export { loadFixtureFile, type Vector } from "./fixtures.js";
export { CliError, EXIT_BAD_INPUT, firstLine, type Io } from "./io.js";
export { addKeyOptions, type KeyOptions, type ResolvedSigner, resolveSigner } from "./keys.js";
export {
  connectStore,
  dropPostgresSchema,
  migrateStore,
  parseStoreUrl,
  removeSqliteFiles,
  resolveStoreUrl,
  type StoreTarget,
} from "./store.js";
