// What the proxy asks Leash before a tool call and tells it after: library mode (@leash/engine) or
// daemon mode (@leash/client), behind one interface. It owns the proxy run's sessions; it speaks no MCP.
import type { Client as LeashClient } from "@leash/client";
import type { Config } from "@leash/core";
import type { Engine, HumanDecision } from "@leash/engine";

export interface GateCall {
  tool_name: string;
  params: Record<string, unknown>;
  nonce: string;
  /** The tool's estimate from the proxy config (daemon mode sends it; the engine reads its own). */
  estimate_usd?: string | number;
  /** The error this tool's previous result reported, for error amplification. */
  previous_error?: string;
  /** The tool's policy is `hitl`: judged in the session whose guard asks a human for every call. */
  always_hitl?: boolean;
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
}

/** How a paused call gets its human answer, where the gate can record one. */
export interface HitlAnswers {
  /** The id of the request the session's paused call opened, or null. */
  pendingRequestId(sessionId: string): Promise<string | null>;
  /** Records the human's answer (the engine's resume), as `operatorId`. */
  answer(sessionId: string, requestId: string, decision: HumanDecision, operatorId: string): Promise<void>;
  /**
   * Waits until an operator answered the request or it expired, when the engine can wait
   * (`engine.waitForHitl`); absent otherwise, and the paused call's id is returned at once.
   */
  wait?(
    requestId: string,
    options: { signal: AbortSignal; timeoutMs: number },
  ): Promise<"answered" | "pending">;
}

export interface LeashGate {
  readonly mode: "library" | "daemon";
  /** The proxy run's session (the one every `guard` tool is judged in). */
  readonly sessionId: string;
  evaluate(call: GateCall): Promise<GateVerdict>;
  settle(verdict: GateVerdict, settlement: Settlement): Promise<void>;
  /** Absent in daemon mode: the wire has no operator answers (an operator answers on the daemon). */
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

/** The waiting API another part of the engine adds (`engine.waitForHitl`); used when present. */
type MaybeWaitingEngine = Engine & {
  waitForHitl?: (
    requestId: string,
    options: { signal?: AbortSignal; timeoutMs?: number },
  ) => Promise<{ status?: unknown }>;
};

/** The request a HITL verdict opened, where the engine's result names it (`hitl_request_id`). */
function hitlRequestIdOf(result: object): { hitl_request_id?: string } {
  const id = (result as { hitl_request_id?: unknown }).hitl_request_id;
  return typeof id === "string" && id !== "" ? { hitl_request_id: id } : {};
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
  const waiting = engine as MaybeWaitingEngine;
  const waitForHitl = waiting.waitForHitl?.bind(engine);
  return {
    mode: "library",
    sessionId: main.session_id,
    async evaluate(call) {
      const session_id = await sessionFor(call);
      const result = await engine.evaluate({
        session_id,
        tool_name: call.tool_name,
        params: call.params,
        nonce: call.nonce,
        ...(call.previous_error === undefined ? {} : { previous_error: call.previous_error }),
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
        ...hitlRequestIdOf(result),
      };
    },
    async settle(verdict, settlement) {
      await engine.postExec({
        session_id: verdict.session_id,
        call_number: verdict.call_number,
        actual_cost_usd: settlement.actual_cost_usd,
        success: settlement.success,
        ...(settlement.error_message === undefined ? {} : { error_message: settlement.error_message }),
      });
    },
    hitl: {
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
      ...(waitForHitl === undefined
        ? {}
        : {
            async wait(requestId: string, { signal, timeoutMs }: { signal: AbortSignal; timeoutMs: number }) {
              // Resolves at the answer, the expiry or the timeout; still pending only in the last case.
              const view = await waitForHitl(requestId, { signal, timeoutMs });
              return String(view.status).toLowerCase() === "pending" ? "pending" : "answered";
            },
          }),
    },
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
  return {
    mode: "daemon",
    sessionId,
    async evaluate(call) {
      const result = await client.preExec({
        session_id: sessionId,
        tool_name: call.tool_name,
        params: call.params,
        nonce: call.nonce,
        ...(call.estimate_usd === undefined ? {} : { estimated_cost_usd: call.estimate_usd }),
      });
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
    async close() {
      client.close();
    },
  };
}
