// The one error family @leash/relay throws: bad options, a corrupt sink file, a sink breaking its contract.
// A delivery that fails is an outcome (retryable, permanent), never one of these errors.

export type RelayErrorCode =
  /** An option is malformed: a batch size that is not a positive integer, a webhook URL that is not http(s). */
  | "invalid_input"
  /** A sink's own store is damaged in a way it will not repair silently (a bad line inside an NDJSON file). */
  | "corrupt"
  /** A sink could not reach its destination while opening (a database down, a bad URL, no privilege). */
  | "unavailable"
  /** A sink answered with the wrong number of outcomes, or an outcome that is none of the three. */
  | "sink_contract";

// Symbol.for, not a module-local Symbol: two copies of this package in one process must still
// recognise each other's errors.
const MARKER = Symbol.for("leash.relay.error");

/** Every error @leash/relay throws itself; `code` is stable and meant for programs, `message` for people. */
export class RelayError extends Error {
  readonly [MARKER] = true;
  override readonly name = "RelayError";
  readonly code: RelayErrorCode;

  constructor(code: RelayErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }

  static isInstance(error: unknown): error is RelayError {
    return typeof error === "object" && error !== null && (error as Record<symbol, unknown>)[MARKER] === true;
  }
}

/** The message of anything thrown, with the cause's code when there is one (ECONNREFUSED, 57P01, …). */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  const code = (error as { code?: unknown }).code ?? (cause as { code?: unknown } | undefined)?.code;
  const causeText = cause instanceof Error && cause.message !== error.message ? ` (${cause.message})` : "";
  const codeText = typeof code === "string" && !error.message.includes(code) ? ` [${code}]` : "";
  return `${error.message}${causeText}${codeText}`;
}
