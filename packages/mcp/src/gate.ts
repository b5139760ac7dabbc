// What the proxy asks Leash before a tool call and tells it after: library mode (@leash/engine) or
// daemon mode (@leash/client), behind one interface. It owns the proxy run's sessions; it speaks no MCP.
import { type HitlOutcome, type Client as LeashClient, waitBudgetMs } from "@leash/client";
import type { Config } from "@leash/core";
import type { Engine, HitlRequestView, HumanDecision } from "@leash/engine";

export interface GateCall {
  tool_name: string;
  params: Record<string, unknown>;
  /** The params as JSON text, sent as given (a modify successor's exact text, so its digest matches). */
  params_json?: string;
  nonce: string | number;
  /** The tool's estimate from the proxy config (daemon mode sends it; the engine reads its own). */
  estimate_usd?: string | number;
  /** The error this tool's previous result reported, for error amplification. */
  previous_error?: string;
  /** The tool's policy is `hitl`: judged in the session whose guard asks a human for every call. */
  always_hitl?: boolean;
  /** The MCP request's `_meta.traceparent`: the engine's span for this call becomes its child. */
  traceparent?: string;
}

export interface GateVerdict {
  verdict: "ALLOW" | "DENY" | "HITL";
  reason: string;
  session_id: string;
  call_number: number;
  /** The decision's signed receipt (compact JWS); null when no decision was recorded. */
  receipt: string | null;
  budget_remaining_usd: string | null;
  /** What the call was held at (exact), the cost settled when the server reports none. */
  estimate_usd: string | null;
  params_hash: string | null;
  /** For a verdict Leash could not reach (daemon mode, fail closed): why. */
  detail?: string;
  /** With HITL, the request it opened, when the engine says (else HitlAnswers.pendingRequestId). */
  hitl_request_id?: string;
}

export interface Settlement {
  actual_cost_usd: string | number;
  success: boolean;
  error_message?: string;
  /** The MCP request's `_meta.traceparent`, for the settlement's span. */
  traceparent?: string;
}

/**
 * How waiting for an operator ended. `pending`: nobody answered within the wait, or it was cancelled
 * (the request stays open; the same call sent again is re-dispatched with its nonce). `answered`: a
 * human answered or the request expired — re-dispatch so Leash judges the call against that: the
 * same call and nonce, or for modify the successor the operator allowed. `failed`: the answer could
 * not be learned (daemon mode, fail closed: a DENY).
 */
export type HitlWaitOutcome =
  | { kind: "pending" }
  | {
      kind: "answered";
      successor?: { nonce: string | number; params: Record<string, unknown>; params_json?: string };
    }
  | { kind: "failed"; reason: string; detail?: string };

/** How a paused call gets its human answer. */
export interface HitlAnswers {
  /** The id of the request the session's paused call opened, or null. */
  pendingRequestId(sessionId: string): Promise<string | null>;
  /**
   * Records the human's answer (the engine's resume), as `operatorId`. Absent in daemon mode: an
   * approver's identity must come from a credential the daemon trusts (a console token), and the
   * agent-side proxy holds none, so an answer given to the agent's client is never recorded there.
   */
  answer?(sessionId: string, requestId: string, decision: HumanDecision, operatorId: string): Promise<void>;
  /**
   * Waits until an operator answered the request or it expired, at most `timeoutMs`, stopping when
   * `signal` aborts; absent when the gate cannot wait (the paused call's id is returned at once).
   */
  wait?(requestId: string, options: { signal: AbortSignal; timeoutMs: number }): Promise<HitlWaitOutcome>;
}

export interface LeashGate {
  readonly mode: "library" | "daemon";
  /** The proxy run's session (the one every `guard` tool is judged in). */
  readonly sessionId: string;
  /**
   * The tools the session's guard config denies (`denied_tools`), when the gate knows its config
   * (library mode); undefined in daemon mode, where the daemon's config decides.
   */
  readonly deniedTools?: ReadonlySet<string>;
  evaluate(call: GateCall): Promise<GateVerdict>;
  settle(verdict: GateVerdict, settlement: Settlement): Promise<void>;
  readonly hitl?: HitlAnswers;
  close(): Promise<void>;
}

export interface EngineGateOptions {
  engine: Engine;
  agent_id: string;
  organization_id?: string;
  /** The guard config of the proxy's session (with the tools' estimates, see sessionGuardConfig). */
  config: Config;
  /** Resume this session instead of registering a new one. */
  session_id?: string;
}

/** The view of an answered request as the proxy's re-dispatch needs it. */
function answeredOutcome(view: HitlRequestView): HitlWaitOutcome {
  if (view.status === "pending") return { kind: "pending" };
  // modify: the successor the operator allowed (its nonce, its params); else the same call again.
  const successor = view.decision === "modify" ? view.successor : null;
  return successor?.params != null
    ? { kind: "answered", successor: { nonce: successor.nonce, params: successor.params } }
    : { kind: "answered" };
}

/** One call, decided by the engine in `session_id`, as the gate's verdict. */
async function engineVerdict(
  options: EngineGateOptions,
  session_id: string,
  call: GateCall,
): Promise<GateVerdict> {
  const result = await options.engine.evaluate({
    session_id,
    tool_name: call.tool_name,
    params: call.params,
    nonce: call.nonce,
    // The engine reads a configured tool's estimate itself; one from elsewhere (a policy) is sent.
    ...(call.estimate_usd === undefined || options.config.tool_estimates_usd?.[call.tool_name] !== undefined
      ? {}
      : { estimated_cost_usd: call.estimate_usd }),
    ...(call.previous_error === undefined ? {} : { previous_error: call.previous_error }),
    ...(call.traceparent === undefined ? {} : { traceparent: call.traceparent }),
  });
  return {
    verdict: result.verdict,
    reason: result.reason,
    session_id,
    call_number: result.call_number,
    receipt: result.receipt,
    budget_remaining_usd: result.budget_remaining_usd,
    estimate_usd: result.estimate_usd,
    params_hash: result.params_hash,
    ...(result.error === undefined ? {} : { detail: result.error }),
    ...(result.hitl_request_id === undefined ? {} : { hitl_request_id: result.hitl_request_id }),
  };
}

/** HITL answers in library mode: the engine's own requests, resumed and waited for in-process. */
function engineHitl(engine: EngineGateOptions["engine"]): HitlAnswers {
  return {
    async pendingRequestId(sessionId) {
      const view = await engine.getSession(sessionId);
      const pending = view.state.pending_request as { request_id?: unknown } | null | undefined;
      return typeof pending?.request_id === "string" ? pending.request_id : null;
    },
    async answer(sessionId, requestId, decision, operatorId) {
      await engine.resume({
        session_id: sessionId,
        decision,
        operator_id: operatorId,
        request_id: requestId,
      });
    },
    async wait(requestId, { signal, timeoutMs }) {
      // Resolves at the answer, the expiry or the timeout; still pending only in the last case.
      try {
        return answeredOutcome(await engine.waitForHitl(requestId, { signal, timeoutMs }));
      } catch (error) {
        if (signal.aborted) return { kind: "pending" };
        throw error;
      }
    },
  };
}

/** Library mode: the engine decides in-process, on the store it was given. */
export async function engineGate(options: EngineGateOptions): Promise<LeashGate> {
  const { engine } = options;
  const identity = {
    agent_id: options.agent_id,
    ...(options.organization_id === undefined ? {} : { organization_id: options.organization_id }),
  };
  const main = await engine.register({
    ...identity,
    ...(options.session_id === undefined ? {} : { session_id: options.session_id }),
    config: options.config,
  });
  // Tools whose policy is `hitl` share a second session whose guard asks a human for every call:
  // the engine decides and records it like any verdict. Registered on first use.
  let hitlSession: Promise<string> | undefined;
  const sessionFor = (call: GateCall): Promise<string> => {
    if (!call.always_hitl) return Promise.resolve(main.session_id);
    hitlSession ??= engine
      .register({ ...identity, config: { ...options.config, hitl_mode: "always" } })
      .then((view) => view.session_id);
    return hitlSession;
  };
  return {
    mode: "library",
    sessionId: main.session_id,
    deniedTools: new Set(options.config.denied_tools ?? []),
    async evaluate(call) {
      return engineVerdict(options, await sessionFor(call), call);
    },
    async settle(verdict, settlement) {
      await engine.postExec({
        session_id: verdict.session_id,
        call_number: verdict.call_number,
        actual_cost_usd: settlement.actual_cost_usd,
        success: settlement.success,
        ...(settlement.error_message === undefined ? {} : { error_message: settlement.error_message }),
        ...(settlement.traceparent === undefined ? {} : { traceparent: settlement.traceparent }),
      });
    },
    hitl: engineHitl(engine),
    async close() {},
  };
}

/** Daemon mode: the daemon decides (its config holds the policy); the client fails closed. */
export async function clientGate(
  client: LeashClient,
  options: { session_id?: string } = {},
): Promise<LeashGate> {
  const registered = await client.register(
    options.session_id === undefined ? {} : { session_id: options.session_id },
  );
  const sessionId = registered.session_id;
  /** When each request this gate saw open expires (daemon clock): a wait never outlasts it. */
  const expiries = new Map<string, bigint | null>();
  return {
    mode: "daemon",
    sessionId,
    async evaluate(call) {
      const result = await client.preExec({
        session_id: sessionId,
        tool_name: call.tool_name,
        params: call.params_json ?? call.params,
        nonce: call.nonce,
        ...(call.estimate_usd === undefined ? {} : { estimated_cost_usd: call.estimate_usd }),
      });
      const requestId = result.verdict === "HITL" ? (result.hitl_request_id ?? null) : null;
      if (requestId !== null) expiries.set(requestId, result.hitl_expires_ns ?? null);
      return {
        verdict: result.verdict,
        reason: result.reason,
        session_id: result.session_id,
        call_number: result.call_number,
        receipt: result.receipt,
        budget_remaining_usd: result.budget_remaining_usd,
        estimate_usd: call.estimate_usd === undefined ? null : String(call.estimate_usd),
        params_hash: result.params_hash,
        ...(result.detail === undefined ? {} : { detail: result.detail }),
        ...(requestId === null ? {} : { hitl_request_id: requestId }),
      };
    },
    async settle(verdict, settlement) {
      await client.postExec({
        session_id: verdict.session_id,
        call_number: verdict.call_number,
        actual_cost_usd: settlement.actual_cost_usd,
        success: settlement.success,
        ...(settlement.error_message === undefined ? {} : { error_message: settlement.error_message }),
      });
    },
    // No `answer`: only an operator on the daemon (console token) answers; the proxy waits for it.
    hitl: {
      async pendingRequestId() {
        return null; // the daemon names the request in its HITL verdict
      },
      async wait(requestId, { signal, timeoutMs }) {
        const expires = expiries.get(requestId) ?? null;
        const bound = Math.min(timeoutMs, waitBudgetMs(expires));
        // The wire has no cancel for a wait: an abort stops this side waiting (the daemon's long
        // poll, which holds no in-flight slot, ends at the answer, the expiry or when newer polls
        // supersede it; its late answer is dropped).
        let onAbort: () => void = () => undefined;
        const cancelled = new Promise<"cancelled">((resolve) => {
          onAbort = () => resolve("cancelled");
          if (signal.aborted) onAbort();
          else signal.addEventListener("abort", onAbort, { once: true });
        });
        let outcome: HitlOutcome | "cancelled";
        try {
          outcome = await Promise.race([
            client.waitForHitl(requestId, { session_id: sessionId, timeoutMs: bound }),
            cancelled,
          ]);
        } finally {
          signal.removeEventListener("abort", onAbort);
        }
        if (outcome === "cancelled") return { kind: "pending" };
        expiries.delete(requestId);
        return outcomeOfWait(outcome);
      },
    },
    async close() {
      client.close();
    },
  };
}

/** The client's HitlOutcome as the proxy's: what to re-dispatch, or why nothing can run. */
function outcomeOfWait(outcome: HitlOutcome): HitlWaitOutcome {
  // No answer within the proxy's own bound: the request may still be open on the daemon.
  if (outcome.kind === "fail_closed" && outcome.reason === "fail_closed:timeout") return { kind: "pending" };
  if (outcome.kind === "fail_closed")
    return {
      kind: "failed",
      reason: outcome.reason,
      ...(outcome.detail === undefined ? {} : { detail: outcome.detail }),
    };
  // Expired, approve, reject, defer, escalate: the daemon judges the same call and nonce again.
  if (outcome.decision !== "modify" || outcome.successor === undefined) return { kind: "answered" };
  const { nonce, params_json } = outcome.successor;
  return {
    kind: "answered",
    successor: { nonce, params: JSON.parse(params_json) as Record<string, unknown>, params_json },
  };
}
