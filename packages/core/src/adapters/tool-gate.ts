// What every framework adapter does around one tool call, keyed by the framework's call id: decide once,
// run only on ALLOW, settle after, and retry a paused call with its own nonce once the framework approves it.
// It knows no framework and does no I/O of its own (the decider does); nonces come in from the caller.
import { canonicalHash } from "../canonical/hash.js";
import { LeashBaseError } from "../errors/leash-error.js";
import type { Decider, DeciderVerdict } from "./decider.js";
import { verdictMessage } from "./verdict-message.js";

/** A tool call Leash did not allow: the tool did not run. `message` is written for the model. */
export class LeashToolStopped extends LeashBaseError<"denied" | "hitl_required"> {
  static override readonly marker: symbol = Symbol.for("leash.core.LeashToolStopped");
  override name = "LeashToolStopped";
  readonly verdict: "DENY" | "HITL";
  readonly reason: string;
  readonly toolName: string;
  constructor(
    toolName: string,
    readonly result: DeciderVerdict,
    /** The open HITL request, when the decider can say (library mode). */
    readonly requestId: string | null = null,
  ) {
    super(
      result.verdict === "HITL" ? "hitl_required" : "denied",
      verdictMessage(toolName, result, requestId),
    );
    this.verdict = result.verdict === "HITL" ? "HITL" : "DENY";
    this.reason = result.reason;
    this.toolName = toolName;
  }
}

export interface ToolGateOptions {
  session_id: string;
  /** A fresh replay token per dispatch (decimal text of a uint64 fits both the engine and the daemon). */
  nonce: () => string;
  /** The call's estimated cost; absent (or undefined for a tool), the session's configured estimates apply. */
  estimate?: (toolName: string, params: Record<string, unknown>) => number | string | undefined;
  /** The actual cost after the tool returned. Default: the estimate the call was held at, else 0. */
  cost?: (toolName: string, output: unknown, params: Record<string, unknown>) => number | string;
  /** The actual cost when the tool throws. Default 0. */
  costOnError?: number | string;
  /**
   * Who the chain names as approver when the framework's own approval releases a paused call (library
   * mode only; over the daemon its operators answer). `false`: never record one here.
   */
  approver?: string | false;
  /** Told of every verdict, with the tool it was for. */
  onDecision?: (toolName: string, verdict: DeciderVerdict) => void;
}

interface Pending {
  readonly nonce: string;
  readonly toolName: string;
  readonly params: Record<string, unknown>;
  readonly estimate: number | string | undefined;
  verdict: DeciderVerdict;
  requestId: string | null;
}

export interface ToolGate {
  /** The verdict for this call id: decided on first ask, the same verdict on every later ask. */
  check(callId: string, toolName: string, params: Record<string, unknown>): Promise<DeciderVerdict>;
  /**
   * The framework approved the paused call `callId`: record the approval (library mode, unless
   * `approver: false`) and decide again with the call's own nonce. A call not paused is just checked.
   */
  release(callId: string, toolName: string, params: Record<string, unknown>): Promise<DeciderVerdict>;
  /** The open request id of a paused call, when known. */
  requestIdOf(callId: string): string | null;
  /** The verdict remembered for a call id (not yet run or forgotten), or null. */
  peek(callId: string): DeciderVerdict | null;
  /**
   * Runs `tool` when the call's verdict is ALLOW (deciding first if nobody asked yet), then settles;
   * otherwise throws LeashToolStopped. The call id is forgotten either way.
   */
  run<T>(
    callId: string,
    toolName: string,
    params: Record<string, unknown>,
    tool: () => Promise<T>,
  ): Promise<T>;
  /**
   * For a framework that reports a tool's end apart from its start (an output guardrail): settles the
   * call's ALLOW with the cost of `output` (or `costOnError` when `failed`) and forgets it. Not allowed
   * or unknown: nothing to settle.
   */
  settle(callId: string, output: unknown, failed?: boolean): Promise<void>;
  /** Forgets a call the framework will not run (a settled hold of an ALLOW is released by expiry). */
  forget(callId: string): void;
}

/** Calls remembered at once; past it the oldest are dropped (their holds expire in the store). */
const MAX_PENDING = 10_000;

/** Which paused call a dispatch repeats: tool and canonical args digest; null when it has no digest. */
function callKey(toolName: string, params: Record<string, unknown>): string | null {
  try {
    return `${toolName}\u0000${canonicalHash(params)}`;
  } catch {
    return null;
  }
}

/** What one gate keeps: the decider, its options, the calls it judged and the calls Leash paused. */
interface GateState {
  readonly decider: Decider;
  readonly options: ToolGateOptions;
  /** The verdict of each call id the gate judged and has not settled or forgotten (at most MAX_PENDING). */
  readonly pending: Map<string, Pending>;
  /**
   * The nonce of each call Leash paused, by tool and args (callKey; at most MAX_PENDING). A model that
   * asks for the same call again (a new call id, after a human answered in Leash) re-dispatches that
   * paused call, as SP/1.0's HITL flow expects: the same nonce, so an approval releases it and a
   * rejection refuses it.
   */
  readonly paused: Map<string, string>;
}

/** Asks the decider about one call; remembers a HITL verdict's nonce and names its request. */
async function decideCall(state: GateState, entry: Omit<Pending, "verdict" | "requestId">): Promise<Pending> {
  const { decider, options, paused } = state;
  const verdict = await decider.evaluate({
    session_id: options.session_id,
    tool_name: entry.toolName,
    params: entry.params,
    nonce: entry.nonce,
    ...(entry.estimate === undefined ? {} : { estimated_cost_usd: entry.estimate }),
  });
  options.onDecision?.(entry.toolName, verdict);
  const key = callKey(entry.toolName, entry.params);
  if (key !== null) {
    paused.delete(key);
    if (verdict.verdict === "HITL") {
      paused.set(key, entry.nonce);
      if (paused.size > MAX_PENDING) paused.delete(paused.keys().next().value as string);
    }
  }
  // The verdict names its request (engine and daemon client alike); the session's open one otherwise.
  const requestId =
    verdict.verdict !== "HITL"
      ? null
      : typeof verdict.hitl_request_id === "string" && verdict.hitl_request_id !== ""
        ? verdict.hitl_request_id
        : await decider.pendingRequestId(options.session_id);
  return { ...entry, verdict, requestId };
}

/** Keeps a call's verdict as the newest, dropping the oldest past MAX_PENDING. */
function remember(state: GateState, callId: string, entry: Pending): void {
  const { pending } = state;
  pending.delete(callId);
  pending.set(callId, entry);
  if (pending.size > MAX_PENDING) pending.delete(pending.keys().next().value as string);
}

/** Settles an allowed call: its cost (or the error cost) and whether it succeeded. */
async function settleEntry(
  state: GateState,
  entry: Pending,
  output: unknown,
  failed: boolean,
): Promise<void> {
  const { decider, options } = state;
  const actual = failed
    ? (options.costOnError ?? 0)
    : options.cost
      ? options.cost(entry.toolName, output, entry.params)
      : (entry.estimate ?? entry.verdict.estimate_usd ?? 0);
  await decider.settle({
    session_id: options.session_id,
    call_number: entry.verdict.call_number,
    actual_cost_usd: actual,
    success: !failed,
  });
}

export function createToolGate(decider: Decider, options: ToolGateOptions): ToolGate {
  const pending = new Map<string, Pending>();
  const state: GateState = { decider, options, pending, paused: new Map() };

  const check: ToolGate["check"] = async (callId, toolName, params) => {
    const known = pending.get(callId);
    if (known !== undefined && known.toolName === toolName) return known.verdict;
    const key = callKey(toolName, params);
    const entry = await decideCall(state, {
      nonce: (key === null ? undefined : state.paused.get(key)) ?? options.nonce(),
      toolName,
      params,
      estimate: options.estimate?.(toolName, params),
    });
    remember(state, callId, entry);
    return entry.verdict;
  };

  const release: ToolGate["release"] = async (callId, toolName, params) => {
    const known = pending.get(callId);
    if (known === undefined || known.verdict.verdict !== "HITL" || known.toolName !== toolName) {
      return check(callId, toolName, params);
    }
    if (decider.approve !== undefined && options.approver !== false) {
      await decider.approve({
        session_id: options.session_id,
        operator_id: options.approver ?? "framework-approval",
        ...(known.requestId === null ? {} : { request_id: known.requestId }),
      });
    }
    // The paused call's own nonce and params: the approval is bound to exactly them.
    const entry = await decideCall(state, {
      nonce: known.nonce,
      toolName,
      params: known.params,
      estimate: known.estimate,
    });
    remember(state, callId, entry);
    return entry.verdict;
  };

  const run: ToolGate["run"] = async (callId, toolName, params, tool) => {
    await check(callId, toolName, params);
    const entry = pending.get(callId) as Pending;
    pending.delete(callId);
    if (entry.verdict.verdict !== "ALLOW")
      throw new LeashToolStopped(toolName, entry.verdict, entry.requestId);
    let output: Awaited<ReturnType<typeof tool>>;
    try {
      output = await tool();
    } catch (error) {
      await settleEntry(state, entry, undefined, true);
      throw error;
    }
    await settleEntry(state, entry, output, false);
    return output;
  };

  const settle: ToolGate["settle"] = async (callId, output, failed = false) => {
    const entry = pending.get(callId);
    if (entry === undefined || entry.verdict.verdict !== "ALLOW") return;
    pending.delete(callId);
    await settleEntry(state, entry, output, failed);
  };

  return {
    check,
    release,
    run,
    settle,
    requestIdOf: (callId) => pending.get(callId)?.requestId ?? null,
    peek: (callId) => pending.get(callId)?.verdict ?? null,
    forget: (callId) => {
      pending.delete(callId);
    },
  };
}
