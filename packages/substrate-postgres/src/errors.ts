// Translates what pg and PostgreSQL throw into the port's SubstrateError codes, keeping the cause.
// It does not decide whether to retry; transaction() does, from the code this returns.
import { SubstrateError } from "@leash/core";

/** The parts of a pg DatabaseError we read; duck-typed so a pool from another copy of pg still works. */
interface PgServerError {
  readonly code: string;
  readonly severity: string;
  readonly message: string;
}

function isServerError(error: unknown): error is PgServerError {
  if (typeof error !== "object" || error === null) return false;
  const { code, severity } = error as { code?: unknown; severity?: unknown };
  // Node's socket errors also carry a `code` (EPIPE is five letters too); only server errors have a severity.
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) && typeof severity === "string";
}

/** The SQLSTATE of a server error, or undefined for anything else (socket errors, our own). */
export function sqlState(error: unknown): string | undefined {
  return isServerError(error) ? error.code : undefined;
}

/**
 * Maps any failure of a statement (or of getting a connection) to a SubstrateError.
 * SubstrateErrors pass through; everything that is not a server error is treated as a broken connection.
 */
export function toSubstrateError(error: unknown, doing: string): SubstrateError {
  if (SubstrateError.isInstance(error)) return error;
  const state = sqlState(error);
  if (state === undefined) {
    const message = error instanceof Error ? error.message : String(error);
    if (/after calling end on the pool/i.test(message)) {
      return new SubstrateError("closed", `${doing}: the pg pool has been ended`, { cause: error });
    }
    return new SubstrateError("io", `${doing}: connection to PostgreSQL failed: ${message}`, {
      cause: error,
    });
  }
  const detail = `${doing}: PostgreSQL error ${state}: ${(error as PgServerError).message}`;
  switch (state) {
    case "40001": // serialization_failure
    case "40P01": // deadlock_detected
      return new SubstrateError("serialization", detail, { cause: error });
    case "23505": // unique_violation (inserts use ON CONFLICT, so this is a race we did not foresee)
      return new SubstrateError("conflict", detail, { cause: error });
    case "55P03": // lock_not_available (lock_timeout)
    case "57014": // query_canceled (statement_timeout)
    case "53300": // too_many_connections
      return new SubstrateError("busy", detail, { cause: error });
    case "42P01": // undefined_table
    case "42703": // undefined_column
    case "3F000": // invalid_schema_name
      return new SubstrateError("corrupt", `${detail} (has migrate() been run on this schema?)`, {
        cause: error,
      });
  }
  // Class 22 (bad data, e.g. U+0000 in text or JSONB), 23 (a constraint) and XX (internal, e.g.
  // data_corrupted): the record cannot be stored or read back faithfully.
  if (state.startsWith("22") || state.startsWith("23") || state.startsWith("XX")) {
    return new SubstrateError("corrupt", detail, { cause: error });
  }
  // Class 08 (connection), 57P0x (server shutting down), 53 (disk full, out of memory) and the rest.
  return new SubstrateError("io", detail, { cause: error });
}
