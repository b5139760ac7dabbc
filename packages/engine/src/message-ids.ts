// One request message, one decision: the store's record of which message a decision answered, and the
// recorded answer for a copy delivered again (to this engine or another on the same store). It decides nothing.
import {
  type ChainEntryRecord,
  canonicalizationError,
  type MessageRecord,
  type Substrate,
  SubstrateError,
} from "@leash/core";
import { LeashError } from "./errors.js";
import type { ProjectionTx } from "./projection.js";
import { canonicalParamsText, nodeSha256Hex } from "./replay-inputs.js";
import type { Steps } from "./steps.js";
import type { EvaluateMessage, EvaluateRequest, EvaluateResult } from "./types.js";

/** What a message id may be: printable ASCII without spaces (a UUIDv7 is 36 of them), at most 128. */
const MESSAGE_ID = /^[\x21-\x7e]{1,128}$/;

/** What evaluate computes for a call: its result, the entry that records it, the HITL events it raised. */
export interface Decided<H> {
  result: Omit<EvaluateResult, "receipt">;
  entry: ChainEntryRecord;
  hitl: H[];
}

/** Whether a chain entry read back on its own is as its signer wrote it (ChainTrust.signedByKnownKey). */
export type EntryCheck = (entry: ChainEntryRecord) => boolean;

/** The request's message, checked; null when it names none (library mode). */
export function messageOf(request: EvaluateRequest): EvaluateMessage | null {
  const message = request.message;
  if (message === undefined || message === null) return null;
  if (typeof message !== "object" || typeof message.id !== "string" || !MESSAGE_ID.test(message.id)) {
    throw new LeashError(
      "invalid_argument",
      "message.id must be 1 to 128 printable ASCII characters without spaces (an SP/1.0 message_id)",
    );
  }
  if (!Number.isInteger(message.sent_ns) || message.sent_ns <= 0 || message.sent_ns >= 2 ** 63) {
    throw new LeashError("invalid_argument", "message.sent_ns must be a positive integer of nanoseconds");
  }
  return message;
}

/** The (session, message id) pairs of a batch, for one prefetch. Malformed ones are left to their calls. */
export function messagePairs(
  requests: readonly EvaluateRequest[],
): Array<{ sessionId: string; messageId: string }> {
  const pairs: Array<{ sessionId: string; messageId: string }> = [];
  for (const request of requests) {
    const id = request.message?.id;
    if (typeof id === "string" && MESSAGE_ID.test(id) && typeof request.session_id === "string") {
      pairs.push({ sessionId: request.session_id, messageId: id });
    }
  }
  return pairs;
}

/**
 * Runs `decide` unless the request's message was decided already, in which case it answers with the
 * recorded decision (nothing is written). A new decision records its message in the same
 * transaction as its entry, so the store never holds one without the other.
 */
export function* decideOnce<H>(
  ptx: ProjectionTx,
  request: EvaluateRequest,
  decide: () => Steps<Decided<H>>,
  signed: EntryCheck,
): Steps<Decided<H>> {
  const message = messageOf(request);
  if (message === null || typeof request.session_id !== "string" || request.session_id === "") {
    return yield* decide();
  }
  const recorded: MessageRecord | null =
    ptx.messageNow(request.session_id, message.id) ??
    (yield ptx.messages.get(request.session_id, message.id));
  if (recorded !== null) {
    const [entry]: ChainEntryRecord[] = yield ptx.chain.range(recorded.entry_seq, 1);
    return { result: recordedResult(request, recorded, entry, signed), entry: entry!, hitl: [] };
  }
  const decided = yield* decide();
  ptx.recordMessageNow({
    session_id: request.session_id,
    message_id: message.id,
    entry_seq: decided.entry.seq,
    sent_ns: message.sent_ns,
  });
  return decided;
}

/**
 * After a transaction failed with "conflict" (another writer recorded the message first, or spent
 * the nonce of the same request): the winner's recorded answer, or null when the request's message
 * was not recorded (the conflict was something else, and stands).
 */
export async function recordedAfterConflict<H>(
  substrate: Substrate,
  request: EvaluateRequest,
  error: unknown,
  signed: EntryCheck,
): Promise<Decided<H> | null> {
  if (!SubstrateError.isInstance(error) || error.code !== "conflict") return null;
  const message = request.message;
  if (typeof message?.id !== "string" || typeof request.session_id !== "string") return null;
  const found = await substrate.transaction(async (tx) => {
    const recorded = await tx.messages.get(request.session_id, message.id);
    if (recorded === null) return null;
    const [entry] = await tx.chain.range(recorded.entry_seq, 1);
    return { recorded, entry };
  });
  if (found === null) return null;
  return {
    result: recordedResult(request, found.recorded, found.entry, signed),
    entry: found.entry!,
    hitl: [],
  };
}

/**
 * The answer a decision entry records, as evaluate gave it. The entry is checked first (hash, seq,
 * signature): an edited row is never served as a verdict. A different call under the same message
 * id (another tool, other params) is refused: the sender reused an id, and the recorded verdict is
 * not about this call.
 */
function recordedResult(
  request: EvaluateRequest,
  recorded: MessageRecord,
  entry: ChainEntryRecord | undefined,
  signed: EntryCheck,
): Omit<EvaluateResult, "receipt"> {
  if (entry === undefined || entry.kind !== "decision" || entry.session_id !== request.session_id) {
    throw new SubstrateError(
      "corrupt",
      `message ${JSON.stringify(recorded.message_id)} names entry ${recorded.entry_seq}, which is not a decision of its session`,
    );
  }
  if (!signed(entry)) {
    throw new SubstrateError(
      "corrupt",
      `entry ${entry.seq}, the recorded answer to message ${JSON.stringify(recorded.message_id)}, is not as its signer wrote it`,
    );
  }
  const data = (JSON.parse(entry.body) as { data: Record<string, unknown> }).data;
  const paramsHash = (data.params_hash ?? null) as string | null;
  if (data.tool_name !== null && (data.tool_name !== request.tool_name || paramsHash !== hashOf(request))) {
    throw new LeashError(
      "invalid_argument",
      `message id ${JSON.stringify(recorded.message_id)} was already decided for a different call`,
    );
  }
  const hitlRequestId = data.hitl_request_id;
  return {
    session_id: entry.session_id,
    call_number: data.call_number as number,
    verdict: data.verdict as EvaluateResult["verdict"],
    reason: data.reason as EvaluateResult["reason"],
    budget_remaining_usd: (data.budget_after_usd ?? null) as string | null,
    reservation_id: (data.reservation_id ?? null) as string | null,
    estimate_usd: (data.estimate_usd ?? null) as string | null,
    rng: (data.rng ?? null) as number | null,
    params_hash: paramsHash,
    // Decision entries do not record what rule 6 counted: a redelivered answer says 0.
    repeat_count: 0,
    entry_seq: entry.seq,
    entry_hash: entry.entry_hash,
    ...(typeof hitlRequestId === "string" ? { hitl_request_id: hitlRequestId } : {}),
    redelivered: true,
  };
}

/** The request's params digest as a decision records it; null for params with no canonical form. */
function hashOf(request: EvaluateRequest): string | null {
  const params = request.params ?? {};
  return canonicalizationError(params) === null ? nodeSha256Hex(canonicalParamsText(params)) : null;
}
