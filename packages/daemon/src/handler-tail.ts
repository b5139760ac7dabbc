// The handler's tail requests: the socket's tail_entries (one batch, a bounded long poll) and gRPC's
// TailEntries stream, each scoped to the caller's organization and bounded in number. Not the reader.
import { create } from "@bufbuild/protobuf";
import {
  ErrorCode,
  type Error as ErrorMessage,
  errorPayload,
  type Payload,
  TailBatchSchema,
  type TailEvent,
  type TailRequest,
} from "@leash/wire";
import type { Logger } from "pino";
import type { DaemonConfig } from "./config.js";
import type { AuthContext, HandlerOptions, RequestContext } from "./handler-types.js";
import { answerFor, Refusal } from "./handler-wire.js";
import type { DaemonMetrics } from "./metrics.js";
import type { TailFilter } from "./tail/reader.js";

/** Tails (streams and socket polls) one daemon serves at once; beyond it RATE_LIMITED. */
export const MAX_TAILS = 128;
/** Events in one socket answer, and about the most text it carries (well under the 1 MiB frame). */
const SOCKET_TAIL_EVENTS = 500;
const TAIL_BYTES = 768 * 1024;
/** The socket's long poll: default and longest wait for a new entry. */
const DEFAULT_TAIL_WAIT_MS = 10_000;
const MAX_TAIL_WAIT_MS = 60_000;
/** A follower that hears nothing looks again after this long (the feed's own polls usually wake it first). */
const STREAM_RECHECK_MS = 30_000;
const MAX_TAIL_KINDS = 32;

export interface TailRequests {
  tailBatch(request: TailRequest, context: RequestContext): Promise<Payload>;
  streamTail(
    request: TailRequest,
    context: RequestContext,
    send: (event: TailEvent) => void | Promise<void>,
  ): Promise<ErrorMessage | null>;
}

export interface TailDependencies {
  readonly options: HandlerOptions;
  readonly config: DaemonConfig;
  readonly metrics: DaemonMetrics;
  readonly logger: Logger;
  /** Refuses a session the caller may not touch, as an unknown one. */
  readonly checkSession: (sessionId: string, auth: AuthContext) => Promise<unknown>;
}

export function createTailRequests(deps: TailDependencies): TailRequests {
  const slots = new TailSlots(deps);
  return {
    tailBatch: (request, context) => tailBatch(deps, slots, request, context),
    streamTail: (request, context, send) => streamTail(deps, slots, request, context, send),
  };
}

type Tail = NonNullable<HandlerOptions["tail"]>;

/** The request's filter, checked: the organization is the caller's; a session must be one of its own. */
async function tailFilterOf(
  deps: TailDependencies,
  request: TailRequest,
  context: RequestContext,
): Promise<{ tail: Tail; filter: TailFilter; afterSeq: number | null }> {
  const tail = deps.options.tail;
  if (tail === undefined)
    throw new Refusal(ErrorCode.DAEMON_UNAVAILABLE, "tail_unavailable", "this daemon serves no tail");
  const after = request.afterSeq;
  if (after !== undefined && (after < -1n || after > BigInt(Number.MAX_SAFE_INTEGER))) {
    throw new Refusal(ErrorCode.INVALID_MESSAGE, "invalid_after_seq", "after_seq must be -1 or a chain seq");
  }
  if (
    request.kinds.length > MAX_TAIL_KINDS ||
    request.kinds.some((kind) => !/^[a-z][a-z0-9_]{0,63}$/.test(kind))
  ) {
    throw new Refusal(
      ErrorCode.INVALID_MESSAGE,
      "invalid_kinds",
      `kinds must be at most ${MAX_TAIL_KINDS} entry kinds such as "decision"`,
    );
  }
  if (request.sessionId !== "") await deps.checkSession(request.sessionId, context.auth);
  return {
    tail,
    filter: {
      organizationId: context.auth.organizationId,
      // A key bound to agents sees their sessions only (session ids are how one touches a session).
      agents:
        deps.config.organizations.get(context.auth.organizationId)?.keyAgents.get(context.auth.keyId) ?? null,
      sessionId: request.sessionId === "" ? null : request.sessionId,
      kinds: request.kinds.length === 0 ? null : new Set(request.kinds),
    },
    afterSeq: after === undefined ? null : Number(after),
  };
}

/** The tails open at once: MAX_TAILS for the daemon, and each organization's quota. */
class TailSlots {
  #tails = 0;
  readonly #deps: TailDependencies;

  constructor(deps: TailDependencies) {
    this.#deps = deps;
  }

  /** Runs `fn` holding one of the MAX_TAILS slots and one of its organization's. */
  async with<T>(org: string, fn: () => Promise<T>): Promise<T> {
    const { metrics, options } = this.#deps;
    if (this.#tails >= MAX_TAILS) {
      metrics.rateLimited.inc();
      throw new Refusal(ErrorCode.RATE_LIMITED, "too_many_tails", `more than ${MAX_TAILS} tails at once`);
    }
    const quotas = options.quotas;
    if (quotas !== undefined && !quotas.takeTail(org)) {
      metrics.rateLimited.inc();
      metrics.limitRefusals.inc({ limit: "org_tails" });
      throw new Refusal(
        ErrorCode.RATE_LIMITED,
        "org_tails",
        `organization ${org} has ${quotas.quotas.tails} tails open`,
      );
    }
    this.#tails++;
    try {
      return await fn();
    } finally {
      this.#tails--;
      quotas?.releaseTail(org);
    }
  }
}

const shuttingDown = () =>
  new Refusal(ErrorCode.DAEMON_UNAVAILABLE, "shutting_down", "the daemon is shutting down");

/** The socket's tail_entries: one batch; with follow, waits (bounded) until there is something to send. */
async function tailBatch(
  deps: TailDependencies,
  slots: TailSlots,
  request: TailRequest,
  context: RequestContext,
): Promise<Payload> {
  const { tail, filter, afterSeq } = await tailFilterOf(deps, request, context);
  return slots.with(context.auth.organizationId, async () => {
    const signal = context.signal;
    let after = afterSeq ?? (await tail.reader.startBefore(request.last, filter, signal));
    const maxEvents = request.limit === 0 ? SOCKET_TAIL_EVENTS : Math.min(request.limit, SOCKET_TAIL_EVENTS);
    const waitMs = Math.min(request.waitMs === 0 ? DEFAULT_TAIL_WAIT_MS : request.waitMs, MAX_TAIL_WAIT_MS);
    const deadline = Date.now() + waitMs;
    for (;;) {
      const page = await tail.reader.page(after, filter, { maxEvents, maxBytes: TAIL_BYTES });
      if (page.afterSeq >= 0) tail.feed.observe(page.afterSeq);
      after = page.afterSeq;
      const left = deadline - Date.now();
      if (page.events.length > 0 || page.more || !request.follow || left <= 0) {
        return {
          case: "tailBatch",
          value: create(TailBatchSchema, { events: page.events, afterSeq: BigInt(after), more: page.more }),
        };
      }
      const why = await tail.feed.wait(after, signal, left);
      if (why === "closed") throw shuttingDown();
      if (why === "aborted")
        throw new Refusal(ErrorCode.DAEMON_UNAVAILABLE, "cancelled", "the caller went away");
    }
  });
}

/** gRPC's TailEntries stream (RequestHandler.streamTail): never throws. */
async function streamTail(
  deps: TailDependencies,
  slots: TailSlots,
  request: TailRequest,
  context: RequestContext,
  send: (event: TailEvent) => void | Promise<void>,
): Promise<ErrorMessage | null> {
  try {
    const { tail, filter, afterSeq } = await tailFilterOf(deps, request, context);
    return await slots.with(context.auth.organizationId, () =>
      follow(tail, filter, afterSeq, request, context, send),
    );
  } catch (error) {
    const known = answerFor(error);
    if (known === undefined)
      deps.logger.warn({ rpc: "TailEntries", err: error }, "request failed inside the daemon");
    return (known ?? errorPayload(new Error("internal"))).value as ErrorMessage;
  }
}

/** Sends the stream's events until its limit, its end (without follow), an abort or the daemon's close. */
async function follow(
  tail: Tail,
  filter: TailFilter,
  afterSeq: number | null,
  request: TailRequest,
  context: RequestContext,
  send: (event: TailEvent) => void | Promise<void>,
): Promise<null> {
  const signal = context.signal;
  let after = afterSeq ?? (await tail.reader.startBefore(request.last, filter, signal));
  let left = request.limit === 0 ? Number.POSITIVE_INFINITY : request.limit;
  for (;;) {
    if (signal?.aborted) return null;
    const page = await tail.reader.page(after, filter, {
      maxEvents: Math.min(left, SOCKET_TAIL_EVENTS),
      maxBytes: TAIL_BYTES,
    });
    for (const event of page.events) {
      if (signal?.aborted) return null;
      await send(event);
    }
    left -= page.events.length;
    after = page.afterSeq;
    if (after >= 0) tail.feed.observe(after);
    if (left <= 0) return null;
    if (page.more) continue;
    if (!request.follow) return null;
    const why = await tail.feed.wait(after, signal, STREAM_RECHECK_MS);
    if (why === "closed") throw shuttingDown();
    if (why === "aborted") return null;
  }
}
