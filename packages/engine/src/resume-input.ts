// Checks a human's answer (resume) before anything is read or written: one clear error for bad input.
// It decides nothing about the session; which request the answer lands on is engine.ts's resume.
import type { Nonce } from "@leash/core";
import { LeashError } from "./errors.js";
import type { HumanDecision, ResumeRequest } from "./types.js";

const DECISIONS: readonly HumanDecision[] = ["approve", "reject", "modify", "defer", "escalate"];
const DIGEST = /^[0-9a-f]{64}$/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** A value shown in an error: JSON keeps it on one line; what JSON cannot show is named by its type; a long one is cut. */
function shown(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? typeof value;
  } catch {
    text = typeof value; // a bigint, a cycle
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

function invalid(message: string): never {
  throw new LeashError("invalid_argument", message);
}

/** A non-empty string the chain can record (canonical JSON refuses lone surrogates). */
function isText(value: unknown): value is string {
  return typeof value === "string" && value.trim() !== "" && !LONE_SURROGATE.test(value);
}

/** The request with its decision normalized (trimmed, lowercased), or a LeashError invalid_argument. */
export function checkResumeRequest(request: ResumeRequest): ResumeRequest & { decision: HumanDecision } {
  if (request === null || typeof request !== "object") invalid("resume needs a request object");
  const raw: unknown = request.decision;
  const decision = (typeof raw === "string" ? raw.trim().toLowerCase() : "") as HumanDecision;
  if (!DECISIONS.includes(decision)) {
    invalid(`decision must be one of ${DECISIONS.join(", ")} (got ${shown(raw)})`);
  }
  if (!isText(request.operator_id)) {
    invalid(`operator_id must be a non-empty string naming who decided (got ${shown(request.operator_id)})`);
  }
  if (request.request_id !== undefined && !isText(request.request_id)) {
    invalid(`request_id must be a non-empty string when given (got ${shown(request.request_id)})`);
  }
  const successor = request.successor;
  if (decision === "modify") {
    if (successor === undefined || successor === null) {
      invalid("modify needs the successor call's nonce and args_digest");
    }
    const nonce: unknown = successor.nonce;
    const nonceOk = (typeof nonce === "number" && Number.isFinite(nonce)) || isText(nonce);
    if (!nonceOk)
      invalid(`the successor's nonce must be a finite number or a non-empty string (got ${shown(nonce)})`);
    if (typeof successor.args_digest !== "string" || !DIGEST.test(successor.args_digest)) {
      invalid(
        `the successor's args_digest must be 64 lowercase hex digits (canonical_hash of its params; got ${shown(successor.args_digest)})`,
      );
    }
  } else if (successor !== undefined && successor !== null) {
    invalid(`a successor applies only to modify, not to ${decision}`);
  }
  return {
    ...request,
    decision,
    ...(decision === "modify" ? { successor: successor as { nonce: Nonce; args_digest: string } } : {}),
  };
}
