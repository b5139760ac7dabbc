// leashTool(tool, guardrails): a FunctionTool with Leash's input guardrail first, its output guardrail
// last and its needsApproval beside the tool's own. The tool's code and schema stay as they are.
import type { FunctionTool } from "@openai/agents";
import type { LeashGuardrails } from "./guardrails.js";

// biome-ignore lint/suspicious/noExplicitAny: FunctionTool's own defaults; any tool's parameters fit.
export function leashTool<T extends FunctionTool<any, any, any>>(tool: T, guardrails: LeashGuardrails): T {
  const own = tool.needsApproval;
  const leash = guardrails.needsApproval(tool.name);
  return {
    ...tool,
    // The tool's own policy may ask a human too; Leash's decision is made either way (it counts the call).
    needsApproval: async (runContext, input, callId) => {
      const byLeash = await leash(runContext, input, callId);
      return (await own(runContext, input, callId)) || byLeash;
    },
    inputGuardrails: [guardrails.inputGuardrail, ...(tool.inputGuardrails ?? [])],
    outputGuardrails: [...(tool.outputGuardrails ?? []), guardrails.outputGuardrail],
  };
}
