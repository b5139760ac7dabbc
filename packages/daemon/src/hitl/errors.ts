// Errors of the daemon's human-in-the-loop desk (hitl/queue.ts): one family on the core base, snake_case codes.
// A refused answer changes nothing; these are never verdicts (a DENY is a result, not an error).
import { LeashBaseError } from "@leash/core";

export type HitlErrorCode =
  | "hitl_request_not_found"
  | "hitl_already_decided"
  | "hitl_expired"
  | "hitl_invalid_decision"
  | "hitl_invalid_params"
  | "hitl_read_only"
  | "hitl_closing"
  | "hitl_cancelled";

export class HitlError extends LeashBaseError<HitlErrorCode> {
  static override readonly marker = Symbol.for("leash.daemon.HitlError");
  override name = "HitlError";
}
