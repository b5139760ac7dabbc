// leashTools(tools, leash, options): the AI SDK tool set with every execute decided by Leash first.
// DENY throws (the SDK turns it into a tool-error the model reads); HITL is the SDK's own needsApproval.
import {
  createToolGate,
  deciderOf,
  type LeashAdapterOptions,
  type LeashLike,
  paramsOf,
  type ToolGate,
  toolGateOptions,
} from "@leash/core";
import type { Tool, ToolExecutionOptions, ToolSet } from "ai";
import { randomNonce } from "./nonce.js";

export interface LeashToolsOptions extends LeashAdapterOptions {
  /**
   * HITL as the SDK's tool approval ("approval", default: the step ends with a tool-approval-request;
   * answering it approved releases the call), or as a tool error the model reads ("error").
   */
  hitl?: "approval" | "error";
  /**
   * The approver the chain records when an SDK approval releases a paused call (library mode).
   * `false`: record none here, an operator answers in Leash. Default "ai-sdk:tool-approval".
   */
  approver?: string | false;
}

const isAsyncIterable = (value: unknown): value is AsyncIterable<unknown> =>
  value !== null && typeof value === "object" && Symbol.asyncIterator in value;

/** The last value of a streaming execute (the SDK's final output); earlier ones are preliminary. */
async function lastOf(stream: AsyncIterable<unknown>): Promise<unknown> {
  let last: unknown;
  for await (const value of stream) last = value;
  return last;
}

function wrap(name: string, original: Tool, gate: ToolGate, hitl: "approval" | "error"): Tool {
  const execute = original.execute;
  if (typeof execute !== "function") return original; // runs on the client: nothing to guard here
  const ownApproval = original.needsApproval;
  const wrapped: Tool = {
    ...original,
    execute: async (input: unknown, callOptions: ToolExecutionOptions) => {
      const params = paramsOf(input);
      // Called for a paused call only after the SDK's approval response said yes.
      await gate.release(callOptions.toolCallId, name, params);
      // A streaming execute is settled at its end; the model sees its final output only.
      return gate.run(callOptions.toolCallId, name, params, async () => {
        const output = await execute(input as never, callOptions);
        return isAsyncIterable(output) ? lastOf(output) : output;
      });
    },
  };
  if (hitl === "approval") {
    wrapped.needsApproval = async (input, approvalOptions) => {
      const own =
        typeof ownApproval === "function" ? await ownApproval(input as never, approvalOptions) : ownApproval;
      const verdict = await gate.check(approvalOptions.toolCallId, name, paramsOf(input));
      return own === true || verdict.verdict === "HITL";
    };
  }
  return wrapped;
}

/**
 * Wraps every tool of `tools` that has an execute; tools without one (run by the client) are kept as
 * they are. `leash` is an @leash/engine Engine (library mode) or an @leash/client Client (daemon).
 */
export function leashTools<TOOLS extends ToolSet>(
  tools: TOOLS,
  leash: LeashLike,
  options: LeashToolsOptions,
): TOOLS {
  const defaults = { nonce: randomNonce, approver: "ai-sdk:tool-approval" };
  const gate = createToolGate(deciderOf(leash), toolGateOptions(options, defaults));
  const hitl = options.hitl ?? "approval";
  return Object.fromEntries(
    Object.entries(tools).map(([name, tool]) => [name, wrap(name, tool as Tool, gate, hitl)]),
  ) as TOOLS;
}
