// Maps what better-sqlite3 throws onto the port's SubstrateError codes, keeping the original as `cause`.
// It does not decide what to do about an error (retry, fail closed): callers and the engine do.

import type { SubstrateErrorCode } from "@leash/core";
import { SubstrateError } from "@leash/core";

/** better-sqlite3 throws this TypeError for any use of a closed connection. */
const CONNECTION_CLOSED = "The database connection is not open";

/** The SQLite result code of an error (extended codes such as SQLITE_CONSTRAINT_PRIMARYKEY included), if any. */
export function sqliteCode(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && code.startsWith("SQLITE_") ? code : undefined;
}

/** True for what the driver throws (SQLite errors, use of a closed connection), as opposed to bad input. */
export function isDriverError(error: unknown): boolean {
  return (
    sqliteCode(error) !== undefined ||
    (error instanceof TypeError && error.message.includes(CONNECTION_CLOSED))
  );
}

function codeFor(error: unknown): SubstrateErrorCode {
  const code = sqliteCode(error);
  if (code === undefined) {
    return error instanceof TypeError && error.message.includes(CONNECTION_CLOSED) ? "closed" : "io";
  }
  // Extended codes share their primary code's prefix (SQLITE_BUSY_SNAPSHOT, SQLITE_CORRUPT_INDEX …).
  if (code.startsWith("SQLITE_CONSTRAINT")) return "conflict";
  if (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED")) return "busy";
  if (code.startsWith("SQLITE_CORRUPT") || code === "SQLITE_NOTADB") return "corrupt";
  return "io";
}

/** Wraps `error` as a SubstrateError naming `action`; a SubstrateError passes through untouched. */
export function toSubstrateError(error: unknown, action: string): SubstrateError {
  if (SubstrateError.isInstance(error)) return error;
  const detail = error instanceof Error ? error.message : String(error);
  return new SubstrateError(codeFor(error), `${action}: ${detail}`, { cause: error });
}
