// The one interface the framework adapters decide through: @leash/engine (library mode) or @leash/client
// (the daemon). It decides nothing and imports neither: both fit it by shape, and deciderOf() adapts them.
import { LeashBaseError } from "../errors/leash-error.js";
import type { Verdict } from "../types.js";

/** One dispatch of a tool, as an adapter asks about it. */
export interface DeciderCall {
  session_id: string;
  tool_name: string;
  params: Record<string, unknown>;
  /** A fresh token per dispatch; the same one again only for the retry of a call a human approved. */
  nonce: string;
  /** A number or exact decimal text; absent, the session's configured estimates apply. */
  estimated_cost_usd?: number | string;
}

/** The fields an adapter reads from either package's verdict (both have more). */
export interface DeciderVerdict {
  session_id: string;
  call_number: number;
  verdict: Verdict;
  reason: string;
  budget_remaining_usd: string | null;
  params_hash: string | null;
  entry_seq: number | null;
  entry_hash: string | null;
  receipt: string | null;
  /** The estimate judged against the budget (the engine says; the daemon client does not). */
  estimate_usd?: string | null;
  /** With HITL: the request a human answers (both the engine and the daemon client name it). */
  hitl_request_id?: string | null;
}

export interface DeciderSettlement {
  session_id: string;
  call_number: number;
  actual_cost_usd: number | string;
  success?: boolean;
}

/** A human's approval of the session's paused call, recorded in the chain with who gave it. */
export interface DeciderApproval {
  session_id: string;
  operator_id: string;
  /** The request answered; absent, the session's open one. */
  request_id?: string;
}

export interface Decider {
  /** "engine": this process decides and may record approvals; "daemon": the sidecar does both. */
  readonly mode: "engine" | "daemon";
  evaluate(call: DeciderCall): Promise<DeciderVerdict>;
  settle(settlement: DeciderSettlement): Promise<void>;
  /**
   * The id of the session's open HITL request, or null. Asked only when a HITL verdict does not name its
   * request itself (`hitl_request_id`); over the daemon it cannot say (null).
   */
  pendingRequestId(sessionId: string): Promise<string | null>;
  /** Records a human's approval. Only in library mode: over the daemon, operators answer at the daemon. */
  approve?(approval: DeciderApproval): Promise<void>;
}

/** What @leash/engine's Engine offers, by shape. */
export interface EngineLike {
  evaluate(request: {
    session_id: string;
    tool_name: string;
    params?: Record<string, unknown> | null;
    nonce?: string | number | null;
    estimated_cost_usd?: number | string | null;
  }): Promise<DeciderVerdict>;
  postExec(request: DeciderSettlement): Promise<unknown>;
  resume(request: {
    session_id: string;
    decision: "approve";
    operator_id: string;
    request_id?: string;
  }): Promise<unknown>;
  getSession(sessionId: string): Promise<{ state: { pending_request?: unknown } }>;
}

/** What @leash/client's Client offers, by shape. */
export interface ClientLike {
  preExec(call: {
    session_id?: string;
    tool_name: string;
    params?: Record<string, unknown> | string | null;
    estimated_cost_usd?: number | string;
    nonce?: string | number | bigint;
  }): Promise<DeciderVerdict>;
  postExec(settlement: DeciderSettlement): Promise<unknown>;
}

export type LeashLike = EngineLike | ClientLike | Decider;

/** A bad argument to an adapter (not a verdict: a DENY is a result, never this). */
export class DeciderError extends LeashBaseError<"invalid_argument"> {
  static override readonly marker: symbol = Symbol.for("leash.core.DeciderError");
  override name = "DeciderError";
}

const isDecider = (leash: LeashLike): leash is Decider =>
  typeof (leash as Decider).settle === "function" &&
  typeof (leash as Decider).pendingRequestId === "function";

/** The decider for an engine, a daemon client, or a decider already (returned as it is). */
export function deciderOf(leash: LeashLike): Decider {
  if (isDecider(leash)) return leash;
  if (typeof (leash as ClientLike).preExec === "function") {
    const client = leash as ClientLike;
    return {
      mode: "daemon",
      // The client's own default estimate is 0; passing none keeps it, as its guard() does.
      evaluate: (call) => client.preExec(call),
      settle: async (settlement) => {
        await client.postExec(settlement);
      },
      pendingRequestId: async () => null,
    };
  }
  const engine = leash as EngineLike;
  if (typeof engine.evaluate !== "function" || typeof engine.postExec !== "function") {
    throw new DeciderError(
      "invalid_argument",
      "deciderOf: expected a Leash engine (@leash/engine) or daemon client (@leash/client)",
    );
  }
  return {
    mode: "engine",
    evaluate: (call) => engine.evaluate(call),
    settle: async (settlement) => {
      await engine.postExec(settlement);
    },
    pendingRequestId: async (sessionId) => {
      const pending = (await engine.getSession(sessionId)).state.pending_request as
        | { request_id?: unknown }
        | null
        | undefined;
      return typeof pending?.request_id === "string" ? pending.request_id : null;
    },
    approve: async (approval) => {
      await engine.resume({ ...approval, decision: "approve" });
    },
  };
}
