// The state machine's constants and names that the engine and the replay must agree on, once.
// Values and naming only; no transition reads a clock or a store.

/** The budget hold's TTL when EngineOptions.reservationTtlMs names none (and an entry records none): 300 s. */
export const DEFAULT_HOLD_TTL_NS = 300_000 * 1e6;

/**
 * The longest budget hold a config may ask for (365 days). A hold's expiry is written in epoch
 * nanoseconds, which must stay a 64-bit integer (and exact enough to compare): a TTL of 10^10 s
 * would overflow the stores' columns and 10^308 s is Infinity once in nanoseconds.
 */
export const MAX_RESERVATION_TTL_S = 365 * 24 * 3600;

/** The id of the budget hold call `callNumber` of a session places (call numbers only grow: always new). */
export const holdId = (sessionId: string, callNumber: number): string => `${sessionId}#${callNumber}`;

/** How long a request waits for a human when the guard config has no `hitl_timeout_s`: 15 minutes. */
export const DEFAULT_HITL_TIMEOUT_S = 900;

/** The operator identity recorded when a request expires unanswered. */
export const TIMEOUT_OPERATOR = "system:timeout";
