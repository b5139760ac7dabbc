// How large a PreExec answer can be, known before the engine decides: a decision whose answer could not be
// sent in one frame must not be committed. It bounds from what an answer carries; it encodes nothing.
import { PARAMS_INLINE_MAX } from "@leash/engine";
import { MAX_FRAME_BYTES } from "@leash/wire";

/** The longest agent_id or session_id a Register may name (UTF-8 bytes): both are in every receipt. */
export const MAX_ID_BYTES = 256;

/**
 * What an answer carries beyond the caller's texts, at its largest: the entry's keys, numbers, digests,
 * ids (UUIDs, the key id), money (at most 40 characters each), the longest reason and problem text, the
 * JWS header and signature, the answer's other fields, the envelope with its HMAC, protobuf tags and
 * lengths. They add up to a few KiB; the rest is margin for fields to come.
 */
const FIXED_BYTES = 8 * 1024;

/** JSON escaping at its worst: a control character is written \u00XX, 6 bytes for 1. */
const ESCAPED = 6;

const utf8 = (text: string) => Buffer.byteLength(text, "utf8");

export interface AnswerTexts {
  readonly sessionId: string;
  readonly toolName: string;
  readonly organizationId: string;
}

/**
 * The most params bytes an entry carries inline: shorter than PARAMS_INLINE_MAX UTF-16 units, at
 * most 3 bytes each. Longer params are stored by digest beside the chain, and a receipt names
 * only their digest: an answer's size does not depend on the params, whatever max_params_bytes says.
 */
const INLINE_PARAMS_BYTES = 3 * PARAMS_INLINE_MAX;

/**
 * An upper bound, in bytes, of the frame that answers a PreExec with these texts. The receipt is the
 * entry as base64url (4 bytes for 3); inside the entry the session id is written twice (the session,
 * the hold's id), the tool name up to three times (the call, an estimate problem naming it), the agent
 * id once (at most MAX_ID_BYTES), inline params once as a JSON string (each `"` or `\` escaped: 2 for 1;
 * at most INLINE_PARAMS_BYTES of them).
 * The answer repeats the session id beside the receipt.
 */
export function preExecAnswerBound(texts: AnswerTexts): number {
  const session = utf8(texts.sessionId);
  const entry =
    ESCAPED * (2 * session + 3 * utf8(texts.toolName) + MAX_ID_BYTES + utf8(texts.organizationId)) +
    2 * INLINE_PARAMS_BYTES;
  return FIXED_BYTES + Math.ceil(entry / 3) * 4 + session;
}

/** Whether a PreExec with these texts is answered in one frame whatever the engine decides. */
export function answerFits(texts: AnswerTexts): boolean {
  return preExecAnswerBound(texts) <= MAX_FRAME_BYTES;
}

/** Why a Register's ids could not be carried in every answer, or null. */
export function idProblem(agentId: string, sessionId: string): string | null {
  if (utf8(agentId) > MAX_ID_BYTES) return `agent_id is longer than ${MAX_ID_BYTES} bytes`;
  if (utf8(sessionId) > MAX_ID_BYTES) return `session_id is longer than ${MAX_ID_BYTES} bytes`;
  return null;
}
