// Bounds on the engine's numeric settings that the stores' integer columns impose.
// Constants only; the config file's schema and createEngine both check against them.

/**
 * The longest budget hold a config may ask for (365 days). A hold's expiry is written in epoch
 * nanoseconds, which must stay a 64-bit integer (and exact enough to compare): a TTL of 10^10 s
 * would overflow the stores' columns and 10^308 s is Infinity once in nanoseconds.
 */
export const MAX_RESERVATION_TTL_S = 365 * 24 * 3600;
