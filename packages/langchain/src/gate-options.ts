// The adapter's options and how they become the core ToolGate's: one place for both entry points.
// It holds no state; the gate each entry point creates does.
import type { DeciderVerdict, ToolGateOptions } from "@leash/core";
import { randomNonce } from "./nonce.js";

export interface LeashLangChainOptions {
  session_id: string;
  /** Estimated cost per call: one amount for every tool, or per tool and args. Default: the session's. */
  estimate?:
    | number
    | string
    | ((toolName: string, args: Record<string, unknown>) => number | string | undefined);
  /** Actual cost after a call, from what the tool returned. Default: the estimate the call was held at. */
  cost?: (toolName: string, output: unknown, args: Record<string, unknown>) => number | string;
  /** Actual cost when the tool throws. Default 0. */
  costOnError?: number | string;
  /** Told of every verdict, with the tool it was for. */
  onDecision?: (toolName: string, verdict: DeciderVerdict) => void;
  /** A fresh nonce per dispatch. Default: a random uint64 as decimal text. */
  nonce?: () => string;
}

export function gateOptions(options: LeashLangChainOptions): ToolGateOptions {
  const { estimate } = options;
  return {
    session_id: options.session_id,
    nonce: options.nonce ?? randomNonce,
    ...(estimate === undefined
      ? {}
      : { estimate: typeof estimate === "function" ? estimate : () => estimate }),
    ...(options.cost === undefined ? {} : { cost: options.cost }),
    ...(options.costOnError === undefined ? {} : { costOnError: options.costOnError }),
    // LangChain has no approval of its own here: a paused call is released by an operator in Leash.
    approver: false,
    ...(options.onDecision === undefined ? {} : { onDecision: options.onDecision }),
  };
}

/** A tool call's args as Leash's params: an object (a string tool's input is wrapped). */
export const paramsOf = (args: unknown): Record<string, unknown> =>
  args !== null && typeof args === "object" && !Array.isArray(args)
    ? (args as Record<string, unknown>)
    : { input: args ?? null };
