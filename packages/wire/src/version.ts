// Protocol version negotiation (spec §9.4): the highest version both sides speak, same MAJOR only.
// It does not look at envelopes' other fields; openEnvelope applies it to protocol_version.

import { WireError } from "./errors.js";

/** The version Leash speaks: SP/1.0 (spec §9.2). */
export const PROTOCOL_VERSION = "1.0.0";

/** Every version this package speaks, highest first. */
export const SUPPORTED_PROTOCOL_VERSIONS: readonly string[] = [PROTOCOL_VERSION];

export interface ProtocolVersion {
  major: number;
  minor: number;
  patch: number;
}

const SEMVER = /^(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})$/;

/** "MAJOR.MINOR.PATCH" (decimal, no leading zeros, no pre-release or build suffix), or null. */
export function parseProtocolVersion(text: string): ProtocolVersion | null {
  const m = typeof text === "string" ? SEMVER.exec(text) : null;
  return m === null ? null : { major: Number(m[1]), minor: Number(m[2]), patch: Number(m[3]) };
}

function compare(a: ProtocolVersion, b: ProtocolVersion): number {
  return a.major - b.major || a.minor - b.minor || a.patch - b.patch;
}

function mismatch(message: string, supported: readonly string[]): WireError {
  return new WireError("protocol_version_mismatch", message, { supportedVersions: supported });
}

/**
 * The version to use with a peer that asked for `requested` (its highest): the highest of `supported`
 * with the same MAJOR that is not above `requested` (§9.4: a 1.2.0 client with a 1.0.0 daemon gets
 * "1.0.0"). A newer MINOR only adds backward-compatible messages (§9.1), so talking down is safe; a
 * different MAJOR never is.
 * @throws WireError `protocol_version_mismatch` (with supportedVersions) when there is none, or when
 *   `requested` is not a MAJOR.MINOR.PATCH version.
 */
export function negotiateProtocolVersion(
  requested: string,
  supported: readonly string[] = SUPPORTED_PROTOCOL_VERSIONS,
): string {
  const want = parseProtocolVersion(requested);
  if (want === null) throw mismatch(`"${String(requested)}" is not a MAJOR.MINOR.PATCH version`, supported);
  let best: { text: string; version: ProtocolVersion } | null = null;
  for (const text of supported) {
    const v = parseProtocolVersion(text);
    if (v === null) throw new WireError("invalid_argument", `supported version "${text}" is malformed`);
    if (v.major !== want.major || compare(v, want) > 0) continue;
    if (best === null || compare(v, best.version) > 0) best = { text, version: v };
  }
  if (best === null) {
    throw mismatch(
      `no supported version for ${requested} (this side speaks ${supported.join(", ")})`,
      supported,
    );
  }
  return best.text;
}

/**
 * Checks the protocol_version of an envelope after registration: it must be one this side speaks
 * (normally the negotiated one).
 * @throws WireError `protocol_version_mismatch`.
 */
export function requireSupportedVersion(
  version: string,
  supported: readonly string[] = SUPPORTED_PROTOCOL_VERSIONS,
): void {
  if (!supported.includes(version)) {
    throw mismatch(`protocol version "${version}" is not spoken here (${supported.join(", ")})`, supported);
  }
}
