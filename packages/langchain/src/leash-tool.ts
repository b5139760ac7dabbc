// leashTool(tool, leash, options): one LangChain tool whose every run is decided by Leash first.
// Called with a ToolCall it answers a stopped call with a ToolMessage; called with plain input it throws.

import type { CallbackManagerForToolRun } from "@langchain/core/callbacks/manager";
import {
  DynamicStructuredTool,
  type StructuredToolInterface,
  type ToolRunnableConfig,
} from "@langchain/core/tools";
import { createToolGate, deciderOf, type LeashLike, LeashToolStopped, paramsOf } from "@leash/core";
import { gateOptions, type LeashLangChainOptions } from "./gate-options.js";
import { stoppedMessage } from "./middleware.js";
import { randomNonce } from "./nonce.js";

export function leashTool(tool: StructuredToolInterface, leash: LeashLike, options: LeashLangChainOptions) {
  const gate = createToolGate(deciderOf(leash), gateOptions(options));
  return new DynamicStructuredTool({
    name: tool.name,
    description: tool.description,
    schema: tool.schema,
    responseFormat: "content",
    func: async (input: unknown, _run?: CallbackManagerForToolRun, config?: ToolRunnableConfig) => {
      const toolCallId = config?.toolCall?.id;
      try {
        return await gate.run(toolCallId ?? `leash-${randomNonce()}`, tool.name, paramsOf(input), () =>
          tool.invoke(input as never, config),
        );
      } catch (error) {
        if (LeashToolStopped.isInstance(error) && toolCallId !== undefined) {
          return stoppedMessage(error, toolCallId);
        }
        throw error;
      }
    },
  });
}
