// Public surface of canonical JSON: the structural check, the serializer, the two digests, lossless parsing.
// Implementation details (number printing, string helpers) stay unexported.

export { CANONICAL_MAX_DEPTH, canonicalizationError } from "./check.js";
export { CanonicalizationError, type CanonicalizationErrorCode } from "./errors.js";
export { canonicalHash, vectorHash } from "./hash.js";
export { JsonNumberText } from "./number.js";
export { parseJsonKeepingNumberText, parseJsonPreservingNumbers } from "./parse.js";
export { type CanonicalJsonOptions, canonicalJson } from "./serialize.js";
