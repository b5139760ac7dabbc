// The options every framework adapter takes, and how they become a ToolGate's: written once, not per adapter.
// Plain mapping; nonces and defaults come from the adapter (core has no randomness).
import type { DeciderVerdict } from "./decider.js";
import type { ToolGateOptions } from "./tool-gate.js";

export interface LeashAdapterOptions {
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
  /**
   * Who the chain names as approver when the framework's own approval releases a paused call (library
   * mode). `false`: record none here; an operator answers in Leash. The adapter gives the default.
   */
  approver?: string | false;
  /** Told of every verdict, with the tool it was for. */
  onDecision?: (toolName: string, verdict: DeciderVerdict) => void;
  /** A fresh nonce per dispatch. Default: the adapter's (a random uint64 as decimal text). */
  nonce?: () => string;
}

export function toolGateOptions(
  options: LeashAdapterOptions,
  defaults: { nonce: () => string; approver: string | false },
): ToolGateOptions {
  const { estimate } = options;
  return {
    session_id: options.session_id,
    nonce: options.nonce ?? defaults.nonce,
    ...(estimate === undefined
      ? {}
      : { estimate: typeof estimate === "function" ? estimate : () => estimate }),
    ...(options.cost === undefined ? {} : { cost: options.cost }),
    ...(options.costOnError === undefined ? {} : { costOnError: options.costOnError }),
    approver: options.approver ?? defaults.approver,
    ...(options.onDecision === undefined ? {} : { onDecision: options.onDecision }),
  };
}

/** A tool's input as Leash's params: an object as it is; anything else wrapped as `{ input }`. */
export const paramsOf = (input: unknown): Record<string, unknown> =>
  input !== null && typeof input === "object" && !Array.isArray(input)
    ? (input as Record<string, unknown>)
    : { input: input ?? null };
