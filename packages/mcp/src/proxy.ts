// The MCP proxy: an MCP server to the agent, an MCP client to the real server, with Leash deciding
// every tools/call in between. Everything else passes through unchanged; it opens no store itself.
import { randomBytes } from "node:crypto";
import { canonicalHash, canonicalizationError } from "@leash/core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type { RequestOptions } from "@modelcontextprotocol/sdk/shared/protocol.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import {
  type CallToolRequest,
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  ListToolsRequestSchema,
  ListToolsResultSchema,
  McpError,
  type Notification,
  type Request,
  ResultSchema,
  type ServerCapabilities,
  SetLevelRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import type { ToolSettings } from "./config.js";
import { reportedCost } from "./cost.js";
import { McpProxyError } from "./errors.js";
import type { GateVerdict, HitlWaitOutcome, LeashGate } from "./gate.js";
import { denialText, pendingText } from "./words.js";

/** The `_meta` key of a result Leash made (DENY, HITL): the same {verdict, reason, receipt, …}. */
export const DECISION_META_KEY = "leash/decision";

/** setTimeout's ceiling: the agent's own timeout and cancellation bound a forwarded request. */
const NO_TIMEOUT_MS = 2_147_483_647;

/** How long a human has to answer (elicitation, or an operator when the engine can wait). */
export const DEFAULT_HITL_TIMEOUT_MS = 15 * 60 * 1000;

export interface LeashProxyOptions {
  /**
   * The real MCP server: the client side of a transport to it (stdio child, streamable HTTP, …), or
   * a Client connectUpstream already connected (to start the server before anything is registered).
   */
  upstream: Transport | Client;
  gate: LeashGate;
  /** Per tool: its policy (`guard`, `hitl`, `deny`) and its estimate. */
  tools?: Readonly<Record<string, ToolSettings>>;
  /** How long a human has to answer a HITL call. Default 15 minutes. */
  hitlTimeoutMs?: number;
  /** Where the proxy's own notes go (never stdout: that is the agent's MCP stream). Default: none. */
  log?: (line: string) => void;
  /**
   * Runs one tools/call (decision, forwarding, settlement) in the trace context the agent sent in
   * `params._meta.traceparent` (W3C). The hook for OpenTelemetry: an application with an SDK
   * installed extracts the context here so Leash's spans join the agent's trace. Default: runs it.
   * The traceparent is forwarded upstream unchanged either way.
   */
  withTraceContext?: <T>(traceparent: string | undefined, run: () => Promise<T>) => Promise<T>;
  /**
   * What an operator's policy says of each tool (`leash mcp --policy`): tools it never allows are left
   * out of tools/list (a call to one is still judged, and denied, by the gate), and its `estimate_usd`
   * rules give the estimate of tools the proxy config gives none.
   */
  policyView?: PolicyToolView;
}

/** A policy's static view of tools (see @leash/policy neverAllows and toolEstimate). */
export interface PolicyToolView {
  hidden(tool: string): boolean;
  estimate(tool: string): number | undefined;
}

export interface LeashProxy {
  /** The agent-facing MCP server (low-level SDK Server). */
  readonly server: Server;
  /** The upstream-facing MCP client. */
  readonly client: Client;
  /** Serves the agent on `downstream` (stdio for `leash mcp`). */
  connect(downstream: Transport): Promise<void>;
  /** Resolves when either side closed (and the other was closed after it); says which. */
  readonly closed: Promise<{ by: "agent" | "upstream" }>;
  close(): Promise<void>;
}

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

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Capabilities the proxy can mirror: tasks need a task store the proxy does not keep. */
function mirrored(capabilities: ServerCapabilities | undefined): ServerCapabilities {
  const { tasks: _tasks, ...rest } = capabilities ?? {};
  return rest;
}

/**
 * Starts the upstream server's session: the proxy's MCP client, connected and initialized. Its side
 * offers what the agent's client may offer (sampling, elicitation, roots); a request for one the
 * agent's client lacks comes back to the server as that client's error. Rejects with McpProxyError
 * `upstream_unavailable` when the server cannot be started or does not initialize.
 */
export async function connectUpstream(transport: Transport): Promise<Client> {
  const client = new Client(
    { name: "leash-mcp", version: "0.0.0" },
    { capabilities: { sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } } },
  );
  try {
    await client.connect(transport);
  } catch (cause) {
    await client.close().catch(() => undefined);
    throw new McpProxyError("upstream_unavailable", `the MCP server did not start: ${message(cause)}`, {
      cause,
    });
  }
  return client;
}

/**
 * Connects to the upstream server (unless given a connected Client), then returns the proxy ready to serve an agent. Rejects with
 * McpProxyError `upstream_unavailable` when the server cannot be started or does not initialize.
 */
export async function createLeashProxy(options: LeashProxyOptions): Promise<LeashProxy> {
  const { gate } = options;
  const tools = options.tools ?? {};
  // A deny policy is the engine's (denied_tools): refused and recorded like every verdict. A gate
  // whose guard does not list the tool would let it through, so that is refused before anything starts.
  for (const [name, settings] of Object.entries(tools)) {
    if (settings.policy === "deny" && gate.deniedTools?.has(name) !== true)
      throw new McpProxyError(
        "invalid_argument",
        gate.mode === "daemon"
          ? `tools.${name}.policy deny: with a daemon its config decides; list "${name}" in denied_tools of the agent's guard there`
          : `tools.${name}.policy deny: the gate's guard config must list "${name}" in denied_tools (sessionGuardConfig does)`,
      );
  }
  const log = options.log ?? (() => undefined);
  const hitlTimeoutMs = options.hitlTimeoutMs ?? DEFAULT_HITL_TIMEOUT_MS;
  const withTrace = options.withTraceContext ?? ((_traceparent, run) => run());

  // Upstream first: the agent's initialize is answered with the real server's capabilities.
  const client =
    options.upstream instanceof Client ? options.upstream : await connectUpstream(options.upstream);
  const upstreamInfo = client.getServerVersion() ?? { name: "leash-mcp", version: "0.0.0" };
  const instructions = client.getInstructions();
  const server = new Server(upstreamInfo, {
    capabilities: mirrored(client.getServerCapabilities()),
    ...(instructions === undefined ? {} : { instructions }),
  });

  let upstreamGone: string | null = null;
  const inFlight = new Set<Promise<unknown>>();
  /** Tools whose listing declares an outputSchema: a client validates structuredContent against it. */
  const withOutputSchema = new Set<string>();
  /** The error each tool's last result reported, for error amplification; cleared by a success. */
  const lastError = new Map<string, string>();
  /** A paused call's nonce by tool and argument digest: re-sending the same call re-dispatches it. */
  const paused = new Map<string, string>();

  const forwardOptions = (
    extra: { signal: AbortSignal; sendNotification: (n: Notification) => Promise<void> },
    request: Request,
  ): RequestOptions => {
    const token = (request.params?._meta as { progressToken?: string | number } | undefined)?.progressToken;
    return {
      signal: extra.signal,
      timeout: NO_TIMEOUT_MS,
      ...(token === undefined
        ? {}
        : {
            resetTimeoutOnProgress: true,
            // The client puts its own token upstream; progress goes back under the agent's token.
            onprogress: (progress) => {
              extra
                .sendNotification({
                  method: "notifications/progress",
                  params: { ...progress, progressToken: token },
                })
                .catch((error) => log(`progress notification not delivered: ${message(error)}`));
            },
          }),
    };
  };

  const gone = (): McpError =>
    new McpError(ErrorCode.InternalError, `the upstream MCP server is gone (${upstreamGone})`);

  // Everything but tools/call (and what the SDK answers itself: initialize, ping) is forwarded as is.
  server.fallbackRequestHandler = async (request, extra) => {
    if (upstreamGone !== null) throw gone();
    return client.request(
      { method: request.method, params: request.params },
      ResultSchema,
      forwardOptions(extra, request),
    );
  };
  if (client.getServerCapabilities()?.logging) {
    // The SDK's Server would answer setLevel itself; the level is the real server's business.
    server.setRequestHandler(SetLevelRequestSchema, (request, extra) =>
      client.request(
        { method: request.method, params: request.params },
        ResultSchema,
        forwardOptions(extra, request),
      ),
    );
  }
  if (client.getServerCapabilities()?.tools) {
    server.setRequestHandler(ListToolsRequestSchema, async (request, extra) => {
      if (upstreamGone !== null) throw gone();
      const result = await client.request(
        { method: request.method, params: request.params },
        ListToolsResultSchema,
        forwardOptions(extra, request),
      );
      for (const tool of result.tools) if (tool.outputSchema !== undefined) withOutputSchema.add(tool.name);
      const view = options.policyView;
      return view === undefined
        ? result
        : { ...result, tools: result.tools.filter((t) => !view.hidden(t.name)) };
    });
  }
  server.fallbackNotificationHandler = async (notification) => {
    await client
      .notification(notification)
      .catch((error) => log(`notification to the server lost: ${message(error)}`));
  };
  client.fallbackRequestHandler = async (request, extra) =>
    server.request({ method: request.method, params: request.params }, ResultSchema, {
      signal: extra.signal,
      timeout: NO_TIMEOUT_MS,
    });
  client.fallbackNotificationHandler = async (notification) => {
    await server
      .notification(notification)
      .catch((error) => log(`notification to the agent lost: ${message(error)}`));
  };

  /** A result Leash made: isError, the words for the model, and the decision as data. */
  const leashResult = (tool: string, text: string, decision: Record<string, unknown>): CallToolResult => ({
    content: [{ type: "text", text }],
    isError: true,
    // A tool with an outputSchema would have its client validate this against it; there the same
    // object is only in _meta.
    ...(withOutputSchema.has(tool) ? {} : { structuredContent: decision }),
    _meta: { [DECISION_META_KEY]: decision },
  });

  const decisionData = (verdict: GateVerdict, extra: Record<string, unknown> = {}) => ({
    verdict: verdict.verdict,
    reason: verdict.reason,
    receipt: verdict.receipt,
    session_id: verdict.session_id,
    call_number: verdict.call_number,
    budget_remaining_usd: verdict.budget_remaining_usd,
    ...extra,
  });

  /** Asks the agent's user (MCP elicitation); the answer, or null when there was none. */
  async function askUser(
    tool: string,
    args: Record<string, unknown>,
    verdict: GateVerdict,
    signal: AbortSignal,
  ): Promise<"approve" | "reject" | null> {
    const shown = JSON.stringify(args);
    const params = shown.length > 2000 ? `${shown.slice(0, 2000)}…` : shown;
    try {
      const answer = await server.elicitInput(
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
        { signal, timeout: hitlTimeoutMs },
      );
      if (answer.action === "decline") return "reject";
      if (answer.action !== "accept") return null;
      const decision = (answer.content as { decision?: unknown } | undefined)?.decision;
      return decision === "approve" ? "approve" : decision === "reject" ? "reject" : null;
    } catch (error) {
      log(`elicitation for ${tool} got no answer: ${message(error)}`);
      return null;
    }
  }

  /**
   * A HITL verdict: a human answers — the agent's user through elicitation where the gate can record
   * that answer (library mode), else an operator on the engine or the daemon, waited for up to the
   * HITL timeout — and the call is re-dispatched so Leash judges it against the answer: the same call
   * and nonce (approve runs it once; reject and expiry are recorded DENYs), or for modify the
   * successor the operator allowed. Returns the final verdict (still HITL when nobody answered), the
   * params that verdict is for, and whether it waited.
   */
  async function throughHuman(
    call: {
      tool: string;
      args: Record<string, unknown>;
      nonce: string;
      always_hitl: boolean;
      traceparent?: string;
    },
    verdict: GateVerdict,
    signal: AbortSignal,
  ): Promise<{
    verdict: GateVerdict;
    args: Record<string, unknown>;
    requestId: string | null;
    waited: boolean;
  }> {
    const hitl = gate.hitl;
    const unchanged = { verdict, args: call.args };
    if (hitl === undefined) return { ...unchanged, requestId: null, waited: false };
    const requestId = verdict.hitl_request_id ?? (await hitl.pendingRequestId(verdict.session_id));
    if (requestId === null) return { ...unchanged, requestId, waited: false };
    const redispatch = (successor?: {
      nonce: string | number;
      params: Record<string, unknown>;
      params_json?: string;
    }) =>
      gate.evaluate({
        tool_name: call.tool,
        params: successor?.params ?? call.args,
        ...(successor?.params_json === undefined ? {} : { params_json: successor.params_json }),
        nonce: successor?.nonce ?? call.nonce,
        always_hitl: call.always_hitl,
        ...(call.traceparent === undefined ? {} : { traceparent: call.traceparent }),
      });
    if (hitl.answer !== undefined && server.getClientCapabilities()?.elicitation) {
      const decision = await askUser(call.tool, call.args, verdict, signal);
      if (decision === null) return { ...unchanged, requestId, waited: false };
      const clientName = server.getClientVersion()?.name ?? "unknown";
      try {
        await hitl.answer(verdict.session_id, requestId, decision, `mcp-elicitation:${clientName}`);
      } catch (error) {
        // Another operator answered first, or the request expired: the re-dispatch meets that answer.
        log(`recording the user's ${decision} of request ${requestId}: ${message(error)}`);
      }
      return { verdict: await redispatch(), args: call.args, requestId, waited: false };
    }
    if (hitl.wait === undefined) return { ...unchanged, requestId, waited: false };
    let outcome: HitlWaitOutcome;
    try {
      outcome = await hitl.wait(requestId, { signal, timeoutMs: hitlTimeoutMs });
    } catch (error) {
      log(`waiting for an operator on request ${requestId}: ${message(error)}`);
      return { ...unchanged, requestId, waited: true };
    }
    // Cancelled by the agent: nothing is re-dispatched (the same call sent again is, with its nonce).
    if (signal.aborted) {
      log(`the agent cancelled the call to "${call.tool}": stopped waiting for request ${requestId}`);
      return { ...unchanged, requestId, waited: true };
    }
    if (outcome.kind === "pending") return { ...unchanged, requestId, waited: true };
    if (outcome.kind === "failed") {
      // The answer could not be learned (daemon mode): fail closed, nothing runs.
      const denied: GateVerdict = {
        ...verdict,
        verdict: "DENY",
        reason: outcome.reason,
        receipt: null,
        ...(outcome.detail === undefined ? {} : { detail: outcome.detail }),
      };
      return { verdict: denied, args: call.args, requestId, waited: true };
    }
    const successor = outcome.successor;
    return {
      verdict: await redispatch(successor),
      args: successor?.params ?? call.args,
      requestId,
      waited: true,
    };
  }

  async function callTool(
    request: CallToolRequest,
    extra: { signal: AbortSignal; sendNotification: (n: Notification) => Promise<void> },
  ): Promise<CallToolResult> {
    const tool = request.params.name;
    const args = request.params.arguments ?? {};
    const configured = tools[tool] ?? {};
    const fromPolicy = configured.estimate_usd === undefined ? options.policyView?.estimate(tool) : undefined;
    const settings = fromPolicy === undefined ? configured : { ...configured, estimate_usd: fromPolicy };
    // The engine's spans for this call are children of the agent's trace, when it sent one.
    const traceparent = (request.params._meta as { traceparent?: unknown } | undefined)?.traceparent;
    const traced = typeof traceparent === "string" ? { traceparent } : {};
    if (upstreamGone !== null) throw gone();
    const always_hitl = settings.policy === "hitl";
    const key = `${always_hitl ? "h" : "g"}\u0000${tool}\u0000${canonicalizationError(args) === null ? canonicalHash(args) : ""}`;
    const nonce = paused.get(key) ?? newNonce();
    let verdict = await gate.evaluate({
      tool_name: tool,
      params: args,
      nonce,
      always_hitl,
      ...traced,
      ...(settings.estimate_usd === undefined ? {} : { estimate_usd: settings.estimate_usd }),
      ...(lastError.has(tool) ? { previous_error: lastError.get(tool) as string } : {}),
    });
    let pending: { requestId: string | null; waited: boolean } = { requestId: null, waited: false };
    /** The params of the call that runs: the agent's, or those an operator's modify allowed instead. */
    let runArgs = args;
    if (verdict.verdict === "HITL") {
      const answered = await throughHuman(
        { tool, args, nonce, always_hitl, ...traced },
        verdict,
        extra.signal,
      );
      verdict = answered.verdict;
      runArgs = answered.args;
      pending = answered;
    }
    if (verdict.verdict === "HITL") {
      paused.set(key, nonce); // the same call sent again re-dispatches this one (same nonce)
      const text = pendingText(tool, verdict.reason, {
        sessionId: verdict.session_id,
        mode: gate.mode,
        ...pending,
      });
      return leashResult(tool, text, decisionData(verdict, { hitl_request_id: pending.requestId }));
    }
    paused.delete(key);
    if (verdict.verdict === "DENY") {
      return leashResult(tool, denialText(tool, verdict.reason, verdict.detail), decisionData(verdict));
    }

    const estimate = verdict.estimate_usd ?? settings.estimate_usd ?? 0;
    let result: CallToolResult;
    try {
      const params = runArgs === args ? request.params : { ...request.params, arguments: runArgs };
      result = (await client.request(
        { method: request.method, params },
        ResultSchema,
        forwardOptions(extra, request),
      )) as CallToolResult;
    } catch (error) {
      // The call may have run: the estimate is what it is taken to have cost.
      await settle(verdict, {
        actual_cost_usd: estimate,
        success: false,
        error_message: message(error),
        ...traced,
      });
      if (upstreamGone !== null) throw gone();
      throw error;
    }
    const failed = result.isError === true;
    const reported = reportedCost(result);
    if (reported?.ok === false) log(`${tool}: ${reported.problem}; settled at the estimate`);
    const actual = reported?.ok === true ? reported.cost : estimate;
    const errorText = failed ? textOf(result) || "tool error" : undefined;
    await settle(verdict, {
      actual_cost_usd: actual,
      success: !failed,
      ...traced,
      ...(errorText === undefined ? {} : { error_message: errorText }),
    });
    if (errorText !== undefined) lastError.set(tool, errorText);
    else lastError.delete(tool);
    return result;
  }

  async function settle(verdict: GateVerdict, settlement: Parameters<LeashGate["settle"]>[1]): Promise<void> {
    try {
      await gate.settle(verdict, settlement);
    } catch (error) {
      // The tool ran; its answer still goes to the agent. The hold expires after its TTL.
      log(`settling call ${verdict.call_number} of session ${verdict.session_id} failed: ${message(error)}`);
    }
  }

  server.setRequestHandler(CallToolRequestSchema, (request, extra) => {
    const traceparent = (request.params._meta as { traceparent?: unknown } | undefined)?.traceparent;
    const run = withTrace(typeof traceparent === "string" ? traceparent : undefined, () =>
      callTool(request, extra),
    );
    inFlight.add(run);
    run.then(
      () => inFlight.delete(run),
      () => inFlight.delete(run),
    );
    return run;
  });

  let resolveClosed: (value: { by: "agent" | "upstream" }) => void = () => undefined;
  const closed = new Promise<{ by: "agent" | "upstream" }>((resolve) => {
    resolveClosed = resolve;
  });
  let closing = false;
  const shutDown = async (by: "agent" | "upstream") => {
    if (closing) return;
    closing = true;
    if (by === "upstream") {
      // Answers to calls in flight (errors, by now) go out before the agent's side closes.
      await Promise.race([
        Promise.allSettled([...inFlight]),
        new Promise((resolve) => setTimeout(resolve, 5000).unref()),
      ]);
    }
    await Promise.allSettled([server.close(), client.close()]);
    await gate.close().catch((error) => log(`closing Leash: ${message(error)}`));
    resolveClosed({ by });
  };
  client.onclose = () => {
    if (closing) return; // the proxy closed it
    upstreamGone ??= "its connection closed";
    log(`the upstream MCP server is gone (${upstreamGone})`);
    void shutDown("upstream");
  };
  server.onclose = () => {
    void shutDown("agent");
  };

  return {
    server,
    client,
    connect: (downstream) => server.connect(downstream),
    closed,
    close: () => shutDown("agent"),
  };
}
