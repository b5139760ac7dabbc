// What the daemon's request handler takes and gives, shared by its transports (socket, gRPC) and its
// modules: who asked, what they asked with, and the handler's interface. No behaviour.
import type { Clock } from "@leash/core";
import type { Engine } from "@leash/engine";
import type {
  Error as ErrorMessage,
  HitlUpdate,
  Payload,
  TailEvent,
  TailRequest,
  WaitHitlRequest,
} from "@leash/wire";
import type { Logger } from "pino";
import type { CallGate } from "./call-gate.js";
import type { DaemonConfig } from "./config.js";
import type { HitlQueue } from "./hitl/queue.js";
import type { DaemonMetrics } from "./metrics.js";
import type { OrganizationQuotaBook } from "./org-quotas.js";
import type { TailFeed } from "./tail/feed.js";
import type { TailReader } from "./tail/reader.js";

/** Who sent a request, as its transport established it (the socket: the key that verified its HMAC). */
export interface AuthContext {
  readonly organizationId: string;
  readonly keyId: string;
}

/** What a transport knows of the request besides its payload. */
export interface RequestContext {
  readonly auth: AuthContext;
  /** The envelope's protocol_version (a Register negotiates from it). */
  readonly protocolVersion: string;
  /** Aborted when the caller is gone (its connection closed, its call cancelled): long waits stop. */
  readonly signal?: AbortSignal;
  /**
   * The signed envelope's id and timestamp (the socket's; gRPC has no envelope). A PreExec carrying
   * one is decided once per store: a copy that reaches another daemon, or this one after a restart,
   * gets the recorded answer.
   */
  readonly message?: { readonly id: string; readonly sentNs: bigint };
}

/** One answer: a response payload, or null when the request takes none (a recorded PostExec). */
export type Answer = Payload | null;

export interface RequestHandler {
  /** Never throws: a refusal is an Error payload. */
  handle(payload: Payload, context: RequestContext): Promise<Answer>;
  /**
   * gRPC's WaitHitl stream: sends the request's current view, then (unless it already was) the final
   * one. Never throws: resolves with the Error that ended it, or null once the final update was sent.
   */
  streamHitl(
    request: WaitHitlRequest,
    context: RequestContext,
    send: (update: HitlUpdate) => void,
  ): Promise<ErrorMessage | null>;
  /**
   * gRPC's TailEntries stream: the caller organization's entries, then (with follow) each new one, until
   * `context.signal` aborts or the daemon closes. `send` may return a promise (back-pressure). Never
   * throws: resolves with the Error that ended it, or null when the stream is complete.
   */
  streamTail(
    request: TailRequest,
    context: RequestContext,
    send: (event: TailEvent) => void | Promise<void>,
  ): Promise<ErrorMessage | null>;
}

export interface HandlerOptions {
  readonly engine: Engine;
  readonly config: DaemonConfig;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: DaemonMetrics;
  readonly daemonVersion: string;
  /** The HITL desk: keeps recent verdicts and answers wait_hitl. Without it wait_hitl is refused. */
  readonly hitl?: HitlQueue;
  /** `hitl_timeout_s` for policies that set none (the engine's default applies when this is absent too). */
  readonly hitlTimeoutS?: number;
  /** Serves TailEntries / tail_entries from the store's chain. Without it they are refused. */
  readonly tail?: { readonly reader: TailReader; readonly feed: TailFeed };
  /** Per-organization quotas: each organization's tails count against its own (as well as MAX_TAILS). */
  readonly quotas?: OrganizationQuotaBook;
  /** Holds a PreExec a moment for sessions about to call too (call-gate.ts); null: every call goes at once. */
  readonly gate?: CallGate | null;
}
