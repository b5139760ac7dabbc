// The one error family @leash/relay throws: bad options, a corrupt sink file, a sink breaking its contract.
// A delivery that fails is an outcome (retryable, permanent), never one of these errors.
import { LeashBaseError } from "@leash/core";

export type RelayErrorCode =
  /** An option is malformed: a batch size that is not a positive integer, a webhook URL that is not http(s). */
  | "invalid_argument"
  /** A sink's own store is damaged in a way it will not repair silently (a bad line inside an NDJSON file). */
  | "corrupt"
  /** A sink could not reach its destination while opening (a database down, a bad URL, no privilege). */
  | "unavailable"
  /** A sink answered with the wrong number of outcomes, or an outcome that is none of the three. */
  | "sink_contract";

/** Every error this package throws; `code` is stable and meant for programs, `message` for people. */
export class RelayError extends LeashBaseError<RelayErrorCode> {
  static override readonly marker: symbol = Symbol.for("leash.relay.error");
  static override readonly legacyCodes = { invalid_argument: "invalid_input" };
  override readonly name: string = "RelayError";
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
