// client.tail(): the organization's audit chain entries as an async iterator — gRPC's TailEntries stream,
// or the socket's tail_entries long poll asked again from each batch's position. Not a verifier.
import { create } from "@bufbuild/protobuf";
import { errorCodeName, type TailEvent, type TailRequest, TailRequestSchema, Verdict } from "@leash/wire";
import { LeashError, type LeashErrorCode } from "./errors.js";
import { GrpcConnection } from "./grpc-connection.js";
import type { RequestOutcome, Transport } from "./transport.js";
import type { TailEntry, TailOptions } from "./types.js";

/** The socket's long poll: how long the daemon may hold one request while nothing new arrives. */
export const TAIL_POLL_WAIT_MS = 10_000;
/** Beyond the poll's wait: time for the daemon to find the start and read a batch. */
const TAIL_ANSWER_MS = 30_000;

const VERDICTS: Partial<Record<Verdict, TailEntry["verdict"]>> = {
  [Verdict.ALLOW]: "ALLOW",
  [Verdict.DENY]: "DENY",
  [Verdict.HITL]: "HITL",
};

const FAILURES: Record<string, LeashErrorCode> = {
  daemon_unavailable: "daemon_unavailable",
  timeout: "timeout",
  bad_response: "bad_response",
  auth_failed: "auth_failed",
};

function invalid(message: string): LeashError {
  return new LeashError("invalid_argument", `tail: ${message}`);
}

/** The request the options ask for; a bad option is invalid_argument. */
export function tailRequestOf(options: TailOptions): TailRequest {
  const { afterSeq, last, sessionId, kinds, limit } = options;
  if (afterSeq !== undefined && (!Number.isSafeInteger(afterSeq) || afterSeq < -1))
    throw invalid("afterSeq must be an integer ≥ -1");
  if (last !== undefined && (!Number.isSafeInteger(last) || last < 0 || last > 0xffffffff))
    throw invalid("last must be an integer ≥ 0");
  if (limit !== undefined && (!Number.isSafeInteger(limit) || limit < 1 || limit > 0xffffffff))
    throw invalid("limit must be an integer ≥ 1");
  if (sessionId !== undefined && (typeof sessionId !== "string" || sessionId === ""))
    throw invalid("sessionId must be a non-empty string");
  if (kinds !== undefined && (!Array.isArray(kinds) || kinds.some((k) => typeof k !== "string" || k === "")))
    throw invalid("kinds must be non-empty strings");
  // Neither afterSeq nor last: the whole chain (of this organization).
  const from = afterSeq ?? (last === undefined ? -1 : undefined);
  return create(TailRequestSchema, {
    ...(from === undefined ? {} : { afterSeq: BigInt(from) }),
    last: last ?? 0,
    sessionId: sessionId ?? "",
    kinds: [...(kinds ?? [])],
    follow: options.follow === true,
    limit: limit ?? 0,
  });
}

/** The event as the client's entry; an event that cannot be one the request asked for is bad_response. */
function entryOf(event: TailEvent, request: TailRequest, after: bigint | undefined): TailEntry {
  const bad = (why: string) => new LeashError("bad_response", `the daemon sent a tail event ${why}`);
  if (after !== undefined && event.seq <= after) throw bad(`out of order (seq ${event.seq} after ${after})`);
  if (!/^[0-9a-f]{64}$/.test(event.entryHash)) throw bad("without an entry hash");
  if (event.kind === "" || event.sessionId === "") throw bad("without its kind or session");
  if (request.sessionId !== "" && event.sessionId !== request.sessionId) throw bad("of another session");
  if (request.kinds.length > 0 && !request.kinds.includes(event.kind)) throw bad(`of kind ${event.kind}`);
  return {
    seq: Number(event.seq),
    entry_hash: event.entryHash,
    entry_id: event.entryId,
    time_ns: event.timeNs,
    kind: event.kind,
    session_id: event.sessionId,
    agent_id: event.agentId ?? null,
    call_number: event.callNumber === undefined ? null : Number(event.callNumber),
    tool_name: event.toolName ?? null,
    verdict: VERDICTS[event.verdict] ?? null,
    reason: event.reason ?? null,
    budget_after_usd: event.budgetAfterUsdDecimal ?? null,
  };
}

/** Resolves with the outcome, or with null as soon as `signal` aborts. */
function unlessAborted(work: Promise<RequestOutcome>, signal?: AbortSignal): Promise<RequestOutcome | null> {
  if (signal === undefined) return work;
  if (signal.aborted) return Promise.resolve(null);
  return new Promise((resolve) => {
    const onAbort = () => resolve(null);
    signal.addEventListener("abort", onAbort, { once: true });
    void work.then((outcome) => {
      signal.removeEventListener("abort", onAbort);
      resolve(outcome);
    });
  });
}

/** The socket: one tail_entries request per batch, each from the last batch's position. */
async function* socketTail(
  connection: Transport,
  request: TailRequest,
  signal: AbortSignal | undefined,
): AsyncGenerator<TailEntry> {
  let after = request.afterSeq;
  let left = request.limit === 0 ? Number.POSITIVE_INFINITY : request.limit;
  for (;;) {
    const ask = create(TailRequestSchema, {
      ...request,
      ...(after === undefined ? {} : { afterSeq: after }),
      limit: Number.isFinite(left) ? left : 0,
      waitMs: TAIL_POLL_WAIT_MS,
    });
    const outcome = await unlessAborted(
      connection.request({ case: "tailEntries", value: ask }, TAIL_POLL_WAIT_MS + TAIL_ANSWER_MS),
      signal,
    );
    if (outcome === null) return;
    if (!outcome.ok) throw new LeashError(FAILURES[outcome.failure] ?? "bad_response", outcome.message);
    const payload = outcome.answer;
    if (payload.case === "error") {
      const e = payload.value;
      throw new LeashError(
        "daemon_error",
        `the daemon refused: ${errorCodeName(e.code)} ${e.detail}: ${e.message}`,
      );
    }
    if (payload.case !== "tailBatch")
      throw new LeashError("bad_response", `the daemon answered ${payload.case} to a tail_entries`);
    const batch = payload.value;
    if (after !== undefined && batch.afterSeq < after)
      throw new LeashError("bad_response", "the daemon's tail position went backwards");
    for (const event of batch.events) {
      const entry = entryOf(event, request, after);
      after = event.seq;
      yield entry;
      if (--left <= 0) return;
    }
    after = batch.afterSeq;
    if (!batch.more && !request.follow) return;
  }
}

/** gRPC: the TailEntries stream as it comes. */
async function* grpcTail(
  connection: GrpcConnection,
  request: TailRequest,
  signal: AbortSignal | undefined,
): AsyncGenerator<TailEntry> {
  let after = request.afterSeq;
  for await (const event of connection.tailStream(request, signal)) {
    const entry = entryOf(event, request, after);
    after = event.seq;
    yield entry;
  }
}

/** client.tail(): entries until done (or, with follow, until `signal`); a lost daemon is a thrown LeashError. */
export function tailOn(connection: Transport, options: TailOptions = {}): AsyncGenerator<TailEntry> {
  const request = tailRequestOf(options);
  return connection instanceof GrpcConnection
    ? grpcTail(connection, request, options.signal)
    : socketTail(connection, request, options.signal);
}
