// How large a PreExec answer can be, known before the engine decides: a decision whose answer could not be
// sent in one frame must not be committed. It bounds from what an answer carries; it encodes nothing.
import { maxParamsBytes } from "@leash/engine";
import { MAX_FRAME_BYTES } from "@leash/wire";
import type { OrganizationConfig } from "./config.js";

/** The longest agent_id or session_id a Register may name (UTF-8 bytes): both are in every receipt. */
export const MAX_ID_BYTES = 256;

/**
 * What an answer carries beyond the caller's texts, at its largest: the entry's keys, numbers, digests,
 * ids (UUIDs, the key id), money (at most 40 characters each), the longest reason and problem text, the
 * JWS header and signature, the answer's other fields, the envelope with its HMAC, protobuf tags and
 * lengths. About 2.5 KiB at most today; the rest is margin for fields to come.
 */
const FIXED_BYTES = 8 * 1024;

/** JSON escaping at its worst: a control character is written \u00XX, 6 bytes for 1. */
const ESCAPED = 6;

const utf8 = (text: string) => Buffer.byteLength(text, "utf8");

export interface AnswerTexts {
  readonly sessionId: string;
  readonly toolName: string;
  readonly organizationId: string;
  /** The most params bytes the entry may carry inline (the session policy's max_params_bytes). */
  readonly paramsBytes: number;
}

/**
 * An upper bound, in bytes, of the frame that answers a PreExec with these texts. The receipt is the
 * entry as base64url (4 bytes for 3); inside the entry the session id is written twice (the session,
 * the hold's id), the tool name up to three times (the call, an estimate problem naming it), the agent
 * id once (at most MAX_ID_BYTES), inline params once as a JSON string (each `"` or `\` escaped: 2 for 1).
 * The answer repeats the session id beside the receipt.
 */
export function preExecAnswerBound(texts: AnswerTexts): number {
  const session = utf8(texts.sessionId);
  const entry =
    ESCAPED * (2 * session + 3 * utf8(texts.toolName) + MAX_ID_BYTES + utf8(texts.organizationId)) +
    2 * texts.paramsBytes;
  return FIXED_BYTES + Math.ceil(entry / 3) * 4 + session;
}

/** Whether a PreExec with these texts is answered in one frame whatever the engine decides. */
export function answerFits(texts: AnswerTexts): boolean {
  return preExecAnswerBound(texts) <= MAX_FRAME_BYTES;
}

const caps = new WeakMap<object, number>();

/** The largest params cap any policy of `org` names (the default when none names one), worked out once. */
export function largestParamsCap(org: Pick<OrganizationConfig, "defaultGuard" | "agents">): number {
  let cap = caps.get(org);
  if (cap === undefined) {
    cap = maxParamsBytes(org.defaultGuard);
    for (const guard of org.agents.values()) cap = Math.max(cap, maxParamsBytes(guard));
    caps.set(org, cap);
  }
  return cap;
}

/** Why a Register's ids could not be carried in every answer, or null. */
export function idProblem(agentId: string, sessionId: string): string | null {
  if (utf8(agentId) > MAX_ID_BYTES) return `agent_id is longer than ${MAX_ID_BYTES} bytes`;
  if (utf8(sessionId) > MAX_ID_BYTES) return `session_id is longer than ${MAX_ID_BYTES} bytes`;
  return null;
}

/**
 * The largest max_params_bytes whose answers fit a frame for an organization named `organizationId`
 * (with a longest session id and a one-byte tool name): a config naming more is refused at load.
 */
export function paramsCapLimit(organizationId: string): number {
  const texts = { sessionId: "s".repeat(MAX_ID_BYTES), toolName: "t", organizationId };
  let low = 0;
  let high = MAX_FRAME_BYTES;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (answerFits({ ...texts, paramsBytes: mid })) low = mid;
    else high = mid - 1;
  }
  return low;
}
