// Start-up refusals of a daemon configuration that parses but is unsafe to serve with: guessable HMAC
// keys, an empty organization id, a hold TTL under a second. Reads nothing; config.ts calls it last.

/** Shortest hold TTL the daemon accepts: holds shorter than a round trip expire before their postExec. */
export const MIN_RESERVATION_TTL_S = 1;

/** Fewer distinct byte values than this in a 32-byte or longer key is not chance (p < 10⁻¹⁵). */
const MIN_DISTINCT_BYTES = 16;

/**
 * Why `key` is not a random key, or null when nothing says so: all zeros, a few byte values, a short
 * pattern repeated, or printable text (a password hex-encoded). 32 random bytes pass each with
 * overwhelming probability ((95/256)³² ≈ 2·10⁻¹⁴ for the text test).
 */
export function weakKeyProblem(key: Uint8Array): string | null {
  if (key.every((b) => b === 0)) return "the key is all zeros";
  const distinct = new Set(key).size;
  if (distinct < MIN_DISTINCT_BYTES) {
    return `the key has only ${distinct} distinct byte value${distinct === 1 ? "" : "s"}: not random (make one with \`head -c 32 /dev/urandom | xxd -p -c 64\`)`;
  }
  for (let period = 1; period <= key.length / 2; period++) {
    if (key.every((b, i) => i < period || b === key[i - period])) {
      return `the key repeats a ${period}-byte pattern: not random (make one with \`head -c 32 /dev/urandom | xxd -p -c 64\`)`;
    }
  }
  if (key.every((b) => b >= 0x20 && b <= 0x7e)) {
    return "the key is printable text (a password?), not random bytes (make one with `head -c 32 /dev/urandom | xxd -p -c 64`)";
  }
  return null;
}

/** What checkConfigSafety reads: the parsed config's organizations and hold TTL. */
export interface SafetyView {
  readonly reservationTtlS: number;
  readonly organizations: ReadonlyMap<string, { readonly hmacKeys: ReadonlyMap<string, Uint8Array> }>;
}

/** The first reason this configuration must not be served, as "field: problem", or null. */
export function configSafetyProblem(config: SafetyView): string | null {
  if (config.reservationTtlS < MIN_RESERVATION_TTL_S) {
    return `/reservation_ttl_s is ${config.reservationTtlS}: at least ${MIN_RESERVATION_TTL_S} second is needed (a hold must outlive its call's postExec)`;
  }
  for (const [orgId, org] of config.organizations) {
    if (orgId.trim() === "") {
      return `/organizations: an organization id must not be empty (got ${JSON.stringify(orgId)})`;
    }
    for (const [keyId, key] of org.hmacKeys) {
      const weak = weakKeyProblem(key);
      if (weak !== null) return `/organizations/${orgId}/hmac_keys/${keyId}: ${weak}`;
    }
  }
  return null;
}
