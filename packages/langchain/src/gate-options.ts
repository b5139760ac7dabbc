// The LangChain adapter's options: core's, with LangChain's defaults (no approval of its own here).
// It holds no state; the gate each entry point creates does.
import { type LeashAdapterOptions, type ToolGateOptions, toolGateOptions } from "@leash/core";
import { randomNonce } from "./nonce.js";

export type LeashLangChainOptions = Omit<LeashAdapterOptions, "approver">;

// LangChain has no approval of its own wired here: a paused call is released by an operator in Leash.
export const gateOptions = (options: LeashLangChainOptions): ToolGateOptions =>
  toolGateOptions({ ...options, approver: false }, { nonce: randomNonce, approver: false });
