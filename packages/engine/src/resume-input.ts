// Checks a human's answer (resume) before anything is read or written: one clear error for bad input.
// It decides nothing about the session; which request the answer lands on is the machine's (answeredRequest).
import { canonicalizationError, type Nonce } from "@leash/core";
import { LeashError } from "./errors.js";
import type { HitlAnswer, HumanDecision, ResumeRequest } from "./types.js";

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

/** An operator's answer (answerHitl) checked before anything is read: one clear error for bad input. */
export function checkHitlAnswer(
  requestId: unknown,
  answer: HitlAnswer,
): {
  decision: HumanDecision;
  operator_id: string;
  comment: string | null;
  params: Record<string, unknown> | null;
} {
  if (!isText(requestId)) invalid(`the request id must be a non-empty string (got ${shown(requestId)})`);
  if (answer === null || typeof answer !== "object") invalid("answerHitl needs an answer object");
  const raw: unknown = answer.decision;
  const decision = (typeof raw === "string" ? raw.trim().toLowerCase() : "") as HumanDecision;
  if (!DECISIONS.includes(decision)) {
    invalid(`decision must be one of ${DECISIONS.join(", ")} (got ${shown(raw)})`);
  }
  if (!isText(answer.operatorId)) {
    invalid(`operatorId must be a non-empty string naming who decided (got ${shown(answer.operatorId)})`);
  }
  if (answer.comment !== undefined && answer.comment !== null && typeof answer.comment !== "string") {
    invalid(`comment must be text when given (got ${shown(answer.comment)})`);
  }
  if (typeof answer.comment === "string" && LONE_SURROGATE.test(answer.comment)) {
    invalid("comment contains a lone surrogate, which the audit chain cannot record");
  }
  const params: unknown = answer.params;
  if (decision === "modify") {
    if (params === null || typeof params !== "object" || Array.isArray(params)) {
      invalid(`modify needs the params the operator allows, as an object (got ${shown(params)})`);
    }
    const problem = canonicalizationError(params);
    if (problem !== null) invalid(`the modified params are not canonical JSON: ${problem}`);
  } else if (params !== undefined && params !== null) {
    invalid(`params apply only to modify, not to ${decision}`);
  }
  const successorNonce: unknown = answer.successorNonce;
  if (successorNonce !== undefined) {
    if (decision !== "modify") invalid(`a successor nonce applies only to modify, not to ${decision}`);
    const ok =
      (typeof successorNonce === "number" && Number.isFinite(successorNonce)) || isText(successorNonce);
    if (!ok)
      invalid(
        `the successor nonce must be a finite number or a non-empty string (got ${shown(successorNonce)})`,
      );
  }
  const comment = typeof answer.comment === "string" && answer.comment !== "" ? answer.comment : null;
  return {
    decision,
    operator_id: answer.operatorId,
    comment,
    params: decision === "modify" ? (params as Record<string, unknown>) : null,
  };
}
