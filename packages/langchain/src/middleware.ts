// leashMiddleware(leash, options): a LangChain v1 agent middleware deciding every tool call with Leash.
// A stopped call never reaches the tool: the model gets a ToolMessage (status "error") saying why.

import { ToolMessage } from "@langchain/core/messages";
import { createToolGate, deciderOf, type LeashLike, LeashToolStopped, paramsOf } from "@leash/core";
import { createMiddleware } from "langchain";
import { gateOptions, type LeashLangChainOptions } from "./gate-options.js";
import { randomNonce } from "./nonce.js";

/** The ToolMessage the model reads for a stopped call; verdict, reason and receipt ride in `artifact`. */
export function stoppedMessage(stopped: LeashToolStopped, toolCallId: string): ToolMessage {
  return new ToolMessage({
    content: stopped.message,
    tool_call_id: toolCallId,
    name: stopped.toolName,
    status: "error",
    artifact: {
      leash: {
        verdict: stopped.verdict,
        reason: stopped.reason,
        receipt: stopped.result.receipt,
        request_id: stopped.requestId,
      },
    },
  });
}

export function leashMiddleware(leash: LeashLike, options: LeashLangChainOptions) {
  const gate = createToolGate(deciderOf(leash), gateOptions(options));
  return createMiddleware({
    name: "LeashMiddleware",
    wrapToolCall: async (request, handler) => {
      const { name, args } = request.toolCall;
      // The model's call id keys the decision; a call without one gets its own.
      const callId = request.toolCall.id ?? `leash-${randomNonce()}`;
      try {
        return await gate.run(callId, name, paramsOf(args), async () => handler(request));
      } catch (error) {
        if (LeashToolStopped.isInstance(error)) return stoppedMessage(error, callId);
        throw error;
      }
    },
  });
}
