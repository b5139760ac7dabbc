// One tools/call through the proxy: Leash decides (ALLOW / DENY / HITL), an allowed call is forwarded
// upstream, and its cost and outcome are settled. Other requests pass through (proxy-passthrough.ts).
import { randomBytes } from "node:crypto";
import { canonicalHash, canonicalizationError } from "@leash/core";
import { type CallToolRequest, type CallToolResult, ResultSchema } from "@modelcontextprotocol/sdk/types.js";
import type { ToolSettings } from "./config.js";
import { reportedCost } from "./cost.js";
import type { GateVerdict, LeashGate } from "./gate.js";
import { forwardOptions, gone, type HandlerExtra, message, type ProxyContext } from "./proxy-context.js";
import { throughHuman } from "./proxy-human.js";
import { denialText, pendingText } from "./words.js";

/** The `_meta` key of a result Leash made (DENY, HITL): the same {verdict, reason, receipt, …}. */
export const DECISION_META_KEY = "leash/decision";

/** A replay token per dispatch: a random uint63 as decimal text (the wire's nonce form, too). */
function newNonce(): string {
  const value = randomBytes(8).readBigUInt64BE() >> 1n;
  return (value === 0n ? 1n : value).toString();
}

function textOf(result: CallToolResult): string {
  const parts: string[] = [];
  for (const item of result.content ?? []) if (item.type === "text") parts.push(item.text);
  return parts.join("\n");
}

/** A result Leash made: isError, the words for the model, and the decision as data. */
function leashResult(
  ctx: ProxyContext,
  tool: string,
  text: string,
  decision: Record<string, unknown>,
): CallToolResult {
  return {
    content: [{ type: "text", text }],
    isError: true,
    // A tool with an outputSchema would have its client validate this against it; there the same
    // object is only in _meta.
    ...(ctx.withOutputSchema.has(tool) ? {} : { structuredContent: decision }),
    _meta: { [DECISION_META_KEY]: decision },
  };
}

function decisionData(verdict: GateVerdict, extra: Record<string, unknown> = {}) {
  return {
    verdict: verdict.verdict,
    reason: verdict.reason,
    receipt: verdict.receipt,
    session_id: verdict.session_id,
    call_number: verdict.call_number,
    budget_remaining_usd: verdict.budget_remaining_usd,
    ...extra,
  };
}

/** A tool's settings: the proxy config's, with the policy's estimate where the config gives none. */
function settingsFor(ctx: ProxyContext, tool: string): ToolSettings {
  const configured = ctx.tools[tool] ?? {};
  const fromPolicy = configured.estimate_usd === undefined ? ctx.policyView?.estimate(tool) : undefined;
  return fromPolicy === undefined ? configured : { ...configured, estimate_usd: fromPolicy };
}

async function settle(
  ctx: ProxyContext,
  verdict: GateVerdict,
  settlement: Parameters<LeashGate["settle"]>[1],
): Promise<void> {
  try {
    await ctx.gate.settle(verdict, settlement);
  } catch (error) {
    // The tool ran; its answer still goes to the agent. The hold expires after its TTL.
    ctx.log(
      `settling call ${verdict.call_number} of session ${verdict.session_id} failed: ${message(error)}`,
    );
  }
}

/** The verdict a call ends with, after a human where it was HITL, and the params that verdict is for. */
interface Judged {
  verdict: GateVerdict;
  /** The params of the call that runs: the agent's, or those an operator's modify allowed instead. */
  runArgs: Record<string, unknown>;
  pending: { requestId: string | null; waited: boolean };
}

/** Asks the gate about the call and, for a HITL verdict, a human; the paused-call memory is kept by the caller. */
async function judge(
  ctx: ProxyContext,
  call: { tool: string; args: Record<string, unknown>; nonce: string; always_hitl: boolean },
  settings: ToolSettings,
  traced: { traceparent?: string },
  signal: AbortSignal,
): Promise<Judged> {
  const { tool, args, nonce, always_hitl } = call;
  const verdict = await ctx.gate.evaluate({
    tool_name: tool,
    params: args,
    nonce,
    always_hitl,
    ...traced,
    ...(settings.estimate_usd === undefined ? {} : { estimate_usd: settings.estimate_usd }),
    ...(ctx.lastError.has(tool) ? { previous_error: ctx.lastError.get(tool) as string } : {}),
  });
  if (verdict.verdict !== "HITL")
    return { verdict, runArgs: args, pending: { requestId: null, waited: false } };
  const answered = await throughHuman(ctx, { tool, args, nonce, always_hitl, ...traced }, verdict, signal);
  return { verdict: answered.verdict, runArgs: answered.args, pending: answered };
}

/** Forwards an allowed call upstream and settles it: the reported cost, else the estimate. */
async function forwardAndSettle(
  ctx: ProxyContext,
  request: CallToolRequest,
  extra: HandlerExtra,
  judged: Judged,
  settings: ToolSettings,
  traced: { traceparent?: string },
): Promise<CallToolResult> {
  const tool = request.params.name;
  const args = request.params.arguments ?? {};
  const { verdict, runArgs } = judged;
  const estimate = verdict.estimate_usd ?? settings.estimate_usd ?? 0;
  let result: CallToolResult;
  try {
    const params = runArgs === args ? request.params : { ...request.params, arguments: runArgs };
    result = (await ctx.client.request(
      { method: request.method, params },
      ResultSchema,
      forwardOptions(ctx, extra, request),
    )) as CallToolResult;
  } catch (error) {
    // The call may have run: the estimate is what it is taken to have cost.
    await settle(ctx, verdict, {
      actual_cost_usd: estimate,
      success: false,
      error_message: message(error),
      ...traced,
    });
    if (ctx.upstreamGone !== null) throw gone(ctx);
    throw error;
  }
  const failed = result.isError === true;
  const reported = reportedCost(result);
  if (reported?.ok === false) ctx.log(`${tool}: ${reported.problem}; settled at the estimate`);
  const actual = reported?.ok === true ? reported.cost : estimate;
  const errorText = failed ? textOf(result) || "tool error" : undefined;
  await settle(ctx, verdict, {
    actual_cost_usd: actual,
    success: !failed,
    ...traced,
    ...(errorText === undefined ? {} : { error_message: errorText }),
  });
  if (errorText !== undefined) ctx.lastError.set(tool, errorText);
  else ctx.lastError.delete(tool);
  return result;
}

/** Handles one tools/call: judged, then answered by Leash (DENY, HITL) or forwarded and settled. */
export async function callTool(
  ctx: ProxyContext,
  request: CallToolRequest,
  extra: HandlerExtra,
): Promise<CallToolResult> {
  const tool = request.params.name;
  const args = request.params.arguments ?? {};
  const settings = settingsFor(ctx, tool);
  // The engine's spans for this call are children of the agent's trace, when it sent one.
  const traceparent = (request.params._meta as { traceparent?: unknown } | undefined)?.traceparent;
  const traced = typeof traceparent === "string" ? { traceparent } : {};
  if (ctx.upstreamGone !== null) throw gone(ctx);
  const always_hitl = settings.policy === "hitl";
  const key = `${always_hitl ? "h" : "g"}\u0000${tool}\u0000${canonicalizationError(args) === null ? canonicalHash(args) : ""}`;
  const nonce = ctx.paused.get(key) ?? newNonce();
  const judged = await judge(ctx, { tool, args, nonce, always_hitl }, settings, traced, extra.signal);
  const { verdict, pending } = judged;
  if (verdict.verdict === "HITL") {
    ctx.paused.set(key, nonce); // the same call sent again re-dispatches this one (same nonce)
    const text = pendingText(tool, verdict.reason, {
      sessionId: verdict.session_id,
      mode: ctx.gate.mode,
      ...pending,
    });
    return leashResult(ctx, tool, text, decisionData(verdict, { hitl_request_id: pending.requestId }));
  }
  ctx.paused.delete(key);
  if (verdict.verdict === "DENY") {
    return leashResult(ctx, tool, denialText(tool, verdict.reason, verdict.detail), decisionData(verdict));
  }
  return forwardAndSettle(ctx, request, extra, judged, settings, traced);
}
