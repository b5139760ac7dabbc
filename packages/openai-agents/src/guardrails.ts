// leashGuardrails(leash, options): Leash as the OpenAI Agents SDK's own hooks — a tool input guardrail
// that rejects with the reason, needsApproval for HITL, an output guardrail that settles the cost.
import {
  createToolGate,
  type DeciderVerdict,
  deciderOf,
  type LeashAdapterOptions,
  type LeashLike,
  LeashToolStopped,
  paramsOf,
  toolGateOptions,
} from "@leash/core";
import {
  defineToolInputGuardrail,
  defineToolOutputGuardrail,
  type RunContext,
  type RunToolApprovalItem,
  ToolGuardrailFunctionOutputFactory,
  type ToolInputGuardrailDefinition,
  type ToolOutputGuardrailDefinition,
} from "@openai/agents";
import { randomNonce } from "./nonce.js";

// No `costOnError`: the SDK reports a failed tool as output (its errorFunction), settled like any other.
export interface LeashAgentsOptions extends Omit<LeashAdapterOptions, "costOnError"> {
  /**
   * The approver the chain records when `state.approve()` releases a paused call (library mode).
   * `false`: record none here, an operator answers in Leash. Default "openai-agents:state.approve".
   */
  approver?: string | false;
}

/** Leash's side of an SDK interruption: the paused decision and the request a human answers. */
export interface LeashPendingRequest {
  request_id: string | null;
  reason: string;
  call_number: number;
  receipt: string | null;
}

export interface LeashGuardrails {
  /**
   * A `needsApproval` for the tool named `toolName` (the SDK does not pass the name): true exactly when
   * Leash says HITL. It decides the call; the input guardrail then reuses that decision.
   */
  needsApproval(
    toolName: string,
  ): (runContext: RunContext, input: unknown, callId?: string) => Promise<boolean>;
  /** Rejects a call Leash denies (the model reads the reason); releases one the SDK's state approved. */
  inputGuardrail: ToolInputGuardrailDefinition;
  /** Settles an allowed call's cost once the tool has returned. */
  outputGuardrail: ToolOutputGuardrailDefinition;
  /** What Leash is waiting on behind `result.interruptions[i]`, or null for a call it did not pause. */
  pendingRequest(interruption: RunToolApprovalItem): LeashPendingRequest | null;
}

const argsOf = (json: string): Record<string, unknown> => {
  try {
    const value: unknown = JSON.parse(json === "" ? "{}" : json);
    return value !== null && typeof value === "object" && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : { input: value };
  } catch {
    // Not JSON: Leash judges the text as given (and the SDK reports the parse error to the model).
    return { input: json };
  }
};

export function leashGuardrails(leash: LeashLike, options: LeashAgentsOptions): LeashGuardrails {
  const defaults = { nonce: randomNonce, approver: "openai-agents:state.approve" };
  const gate = createToolGate(deciderOf(leash), toolGateOptions(options, defaults));
  // Calls our needsApproval paused: the SDK will interrupt for them, so the guardrail that runs
  // before the approval request must let them through to it.
  const awaitingApproval = new Set<string>();
  const info = (verdict: DeciderVerdict, callId: string) => ({
    leash: {
      verdict: verdict.verdict,
      reason: verdict.reason,
      receipt: verdict.receipt,
      request_id: gate.requestIdOf(callId),
    },
  });

  return {
    needsApproval: (toolName) => async (_runContext, input, callId) => {
      // Without a call id the guardrail decides alone (and rejects a HITL it cannot route to a human).
      if (callId === undefined) return false;
      const verdict = await gate.check(callId, toolName, paramsOf(input));
      if (verdict.verdict !== "HITL") return false;
      awaitingApproval.add(callId);
      return true;
    },
    inputGuardrail: defineToolInputGuardrail({
      name: "leash",
      run: async ({ context, toolCall }) => {
        const { callId, name } = toolCall;
        const params = argsOf(toolCall.arguments);
        let verdict = await gate.check(callId, name, params);
        if (verdict.verdict === "HITL") {
          if (context.isToolApproved({ toolName: name, callId }) === true) {
            awaitingApproval.delete(callId);
            verdict = await gate.release(callId, name, params);
          } else if (awaitingApproval.has(callId)) {
            return ToolGuardrailFunctionOutputFactory.allow(info(verdict, callId));
          }
        }
        if (verdict.verdict === "ALLOW")
          return ToolGuardrailFunctionOutputFactory.allow(info(verdict, callId));
        const stopped = new LeashToolStopped(name, verdict, gate.requestIdOf(callId));
        const details = info(verdict, callId);
        gate.forget(callId);
        return ToolGuardrailFunctionOutputFactory.rejectContent(stopped.message, details);
      },
    }),
    outputGuardrail: defineToolOutputGuardrail({
      name: "leash",
      run: async ({ toolCall, output }) => {
        await gate.settle(toolCall.callId, output);
        return ToolGuardrailFunctionOutputFactory.allow();
      },
    }),
    pendingRequest(interruption) {
      const raw = interruption.rawItem;
      if (raw.type !== "function_call") return null;
      const verdict = gate.peek(raw.callId);
      if (verdict === null || verdict.verdict !== "HITL") return null;
      return {
        request_id: gate.requestIdOf(raw.callId),
        reason: verdict.reason,
        call_number: verdict.call_number,
        receipt: verdict.receipt,
      };
    },
  };
}
