// @leash/core: the pure SP/1.0 decision surface — decide, feedback, canonical JSON, types and ports.
// No I/O, no clock, no randomness: it runs unchanged in a browser. Schemas live in @leash/core/schema.

export * from "./adapters/index.js";
export * from "./canonical/index.js";
export { sha256Hex } from "./crypto/sha256.js";
export { decide } from "./decide.js";
export { isLeashError, LeashBaseError } from "./errors/leash-error.js";
export { denyProbability, ERROR_SIGNALS, hasErrorSignal } from "./extensions/index.js";
export * from "./feedback/index.js";
export * from "./ports/index.js";
export { ALL_REASONS, CERTIFIED_REASONS, EXTENSION_DENY_REASONS, TERMINAL_STATUSES } from "./reasons.js";
export * from "./types.js";
export { redactUrlPassword } from "./util/redact-url.js";
