// @leash/engine: library mode (SHACKLE SP/1.0 Model A) — evaluate, postExec, HITL, resets, guard().
// Bring a substrate (@leash/substrate-sqlite, -postgres or -memory); the engine owns no storage.

export {
  DEFAULT_CONFIG,
  type LeashConfigFile,
  loadConfigFile,
  parseConfigObject,
  readConfigDocument,
} from "./config-file.js";
export { createEngine, type Engine, systemClock } from "./engine.js";
export {
  LeashAlreadyDecided,
  LeashDenied,
  LeashError,
  type LeashErrorCode,
  LeashHitl,
  LeashHitlExpired,
} from "./errors.js";
export { type GuardOptions, guard } from "./guard.js";
export { DEFAULT_HITL_TIMEOUT_S, hitlView, TIMEOUT_OPERATOR } from "./hitl-view.js";
export { MAX_RESERVATION_TTL_S } from "./limits.js";
export {
  type OpenStoreOptions,
  openStore,
  redactStoreUrl,
  type StoreKind,
  storeKindOf,
} from "./open-store.js";
export type * from "./types.js";
