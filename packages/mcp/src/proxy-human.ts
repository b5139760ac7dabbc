// A HITL verdict through a human: the agent's user by MCP elicitation where the gate can record the
// answer, else an operator the gate waits for; then the call is judged again. Forwarding is not here.
import type { GateVerdict, HitlAnswers, HitlWaitOutcome } from "./gate.js";
import { message, type ProxyContext } from "./proxy-context.js";

/** The call a HITL verdict paused, as the proxy dispatched it. */
export interface PausedCall {
  tool: string;
  args: Record<string, unknown>;
  nonce: string;
  always_hitl: boolean;
  traceparent?: string;
}

/** What a human's answer (or its absence) led to. */
export interface HumanOutcome {
  verdict: GateVerdict;
  args: Record<string, unknown>;
  requestId: string | null;
  waited: boolean;
}

/** The call an operator's modify allowed instead of the paused one. */
interface Successor {
  nonce: string | number;
  params: Record<string, unknown>;
  params_json?: string;
}

/** Asks the agent's user (MCP elicitation); the answer, or null when there was none. */
async function askUser(
  ctx: ProxyContext,
  tool: string,
  args: Record<string, unknown>,
  verdict: GateVerdict,
  signal: AbortSignal,
): Promise<"approve" | "reject" | null> {
  const shown = JSON.stringify(args);
  const params = shown.length > 2000 ? `${shown.slice(0, 2000)}…` : shown;
  try {
    const answer = await ctx.server.elicitInput(
      {
        message: `Leash: the agent wants to call "${tool}" with ${params}. It needs a human's approval (${verdict.reason}). Approve this exact call once?`,
        requestedSchema: {
          type: "object",
          properties: {
            decision: {
              type: "string",
              title: "Decision",
              enum: ["approve", "reject"],
              description: "approve runs this exact call once; reject refuses it",
            },
          },
          required: ["decision"],
        },
      },
      { signal, timeout: ctx.hitlTimeoutMs },
    );
    if (answer.action === "decline") return "reject";
    if (answer.action !== "accept") return null;
    const decision = (answer.content as { decision?: unknown } | undefined)?.decision;
    return decision === "approve" ? "approve" : decision === "reject" ? "reject" : null;
  } catch (error) {
    ctx.log(`elicitation for ${tool} got no answer: ${message(error)}`);
    return null;
  }
}

/** Judges the paused call again (same call and nonce), or the successor an operator allowed. */
function redispatch(ctx: ProxyContext, call: PausedCall, successor?: Successor): Promise<GateVerdict> {
  return ctx.gate.evaluate({
    tool_name: call.tool,
    params: successor?.params ?? call.args,
    ...(successor?.params_json === undefined ? {} : { params_json: successor.params_json }),
    nonce: successor?.nonce ?? call.nonce,
    always_hitl: call.always_hitl,
    ...(call.traceparent === undefined ? {} : { traceparent: call.traceparent }),
  });
}

/** The user answers by elicitation; the gate records the answer and the call is judged against it. */
async function throughElicitation(
  ctx: ProxyContext,
  hitl: HitlAnswers,
  call: PausedCall,
  verdict: GateVerdict,
  requestId: string,
  signal: AbortSignal,
): Promise<HumanOutcome> {
  const decision = await askUser(ctx, call.tool, call.args, verdict, signal);
  if (decision === null) return { verdict, args: call.args, requestId, waited: false };
  const clientName = ctx.server.getClientVersion()?.name ?? "unknown";
  try {
    await hitl.answer?.(verdict.session_id, requestId, decision, `mcp-elicitation:${clientName}`);
  } catch (error) {
    // Another operator answered first, or the request expired: the re-dispatch meets that answer.
    ctx.log(`recording the user's ${decision} of request ${requestId}: ${message(error)}`);
  }
  return { verdict: await redispatch(ctx, call), args: call.args, requestId, waited: false };
}

/** An operator answers on the engine or the daemon, waited for up to the HITL timeout (if the gate can wait). */
async function throughOperator(
  ctx: ProxyContext,
  hitl: HitlAnswers,
  call: PausedCall,
  verdict: GateVerdict,
  requestId: string,
  signal: AbortSignal,
): Promise<HumanOutcome> {
  if (hitl.wait === undefined) return { verdict, args: call.args, requestId, waited: false };
  const unchanged = { verdict, args: call.args, requestId, waited: true };
  let outcome: HitlWaitOutcome;
  try {
    outcome = await hitl.wait(requestId, { signal, timeoutMs: ctx.hitlTimeoutMs });
  } catch (error) {
    ctx.log(`waiting for an operator on request ${requestId}: ${message(error)}`);
    return unchanged;
  }
  // Cancelled by the agent: nothing is re-dispatched (the same call sent again is, with its nonce).
  if (signal.aborted) {
    ctx.log(`the agent cancelled the call to "${call.tool}": stopped waiting for request ${requestId}`);
    return unchanged;
  }
  if (outcome.kind === "pending") return unchanged;
  if (outcome.kind === "failed") {
    // The answer could not be learned (daemon mode): fail closed, nothing runs.
    const denied: GateVerdict = {
      ...verdict,
      verdict: "DENY",
      reason: outcome.reason,
      receipt: null,
      ...(outcome.detail === undefined ? {} : { detail: outcome.detail }),
    };
    return { ...unchanged, verdict: denied };
  }
  const successor = outcome.successor;
  return {
    verdict: await redispatch(ctx, call, successor),
    args: successor?.params ?? call.args,
    requestId,
    waited: true,
  };
}

/**
 * A HITL verdict: a human answers — the agent's user through elicitation where the gate can record
 * that answer (library mode), else an operator on the engine or the daemon, waited for up to the
 * HITL timeout — and the call is re-dispatched so Leash judges it against the answer: the same call
 * and nonce (approve runs it once; reject and expiry are recorded DENYs), or for modify the
 * successor the operator allowed. Returns the final verdict (still HITL when nobody answered), the
 * params that verdict is for, and whether it waited.
 */
export async function throughHuman(
  ctx: ProxyContext,
  call: PausedCall,
  verdict: GateVerdict,
  signal: AbortSignal,
): Promise<HumanOutcome> {
  const hitl = ctx.gate.hitl;
  if (hitl === undefined) return { verdict, args: call.args, requestId: null, waited: false };
  const requestId = verdict.hitl_request_id ?? (await hitl.pendingRequestId(verdict.session_id));
  if (requestId === null) return { verdict, args: call.args, requestId, waited: false };
  if (hitl.answer !== undefined && ctx.server.getClientCapabilities()?.elicitation) {
    return throughElicitation(ctx, hitl, call, verdict, requestId, signal);
  }
  return throughOperator(ctx, hitl, call, verdict, requestId, signal);
}
