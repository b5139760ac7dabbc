// Secret files the daemon and its CLI read (HMAC keys, console tokens): refused when group or others
// may access them, as the signing key is. Checks the mode only; reading and parsing are the callers'.
import { type Stats, statSync } from "node:fs";

/** Why `path` is too open to hold a secret (with the chmod that fixes it), or null when it is 0600-like. */
export function looseSecretProblem(path: string, info: Stats = statSync(path)): string | null {
  if (process.platform === "win32" || (info.mode & 0o077) === 0) return null;
  const mode = (info.mode & 0o777).toString(8).padStart(4, "0");
  return `${path} is readable by group or others (mode ${mode}); run: chmod 600 ${path}`;
}
