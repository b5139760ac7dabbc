// The MCP proxy: an MCP server to the agent, an MCP client to the real server, with Leash deciding
// every tools/call in between. Everything else passes through unchanged; it opens no store itself.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { CallToolRequestSchema, type ServerCapabilities } from "@modelcontextprotocol/sdk/types.js";
import type { ToolSettings } from "./config.js";
import { McpProxyError } from "./errors.js";
import type { LeashGate } from "./gate.js";
import { callTool } from "./proxy-call.js";
import { message, type PolicyToolView, type ProxyContext } from "./proxy-context.js";
import { forwardAgentToServer, forwardServerToAgent } from "./proxy-passthrough.js";

export { DECISION_META_KEY } from "./proxy-call.js";
export type { PolicyToolView } from "./proxy-context.js";

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
  refuseUnlistedDenies(gate, tools);
  const log = options.log ?? (() => undefined);
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
  const ctx: ProxyContext = {
    gate,
    server,
    client,
    tools,
    policyView: options.policyView,
    hitlTimeoutMs: options.hitlTimeoutMs ?? DEFAULT_HITL_TIMEOUT_MS,
    log,
    upstreamGone: null,
    withOutputSchema: new Set(),
    lastError: new Map(),
    paused: new Map(),
  };
  forwardAgentToServer(ctx);
  forwardServerToAgent(ctx);

  const inFlight = new Set<Promise<unknown>>();
  server.setRequestHandler(CallToolRequestSchema, (request, extra) => {
    const traceparent = (request.params._meta as { traceparent?: unknown } | undefined)?.traceparent;
    const run = withTrace(typeof traceparent === "string" ? traceparent : undefined, () =>
      callTool(ctx, request, extra),
    );
    inFlight.add(run);
    run.then(
      () => inFlight.delete(run),
      () => inFlight.delete(run),
    );
    return run;
  });
  return { server, client, connect: (downstream) => server.connect(downstream), ...closing(ctx, inFlight) };
}

/**
 * A deny policy is the engine's (denied_tools): refused and recorded like every verdict. A gate
 * whose guard does not list the tool would let it through, so that is refused before anything starts.
 */
function refuseUnlistedDenies(gate: LeashGate, tools: Readonly<Record<string, ToolSettings>>): void {
  for (const [name, settings] of Object.entries(tools)) {
    if (settings.policy === "deny" && gate.deniedTools?.has(name) !== true)
      throw new McpProxyError(
        "invalid_argument",
        gate.mode === "daemon"
          ? `tools.${name}.policy deny: with a daemon its config decides; list "${name}" in denied_tools of the agent's guard there`
          : `tools.${name}.policy deny: the gate's guard config must list "${name}" in denied_tools (sessionGuardConfig does)`,
      );
  }
}

/** The proxy's ending: whichever side closes first closes the other, then the gate. */
function closing(ctx: ProxyContext, inFlight: Set<Promise<unknown>>): Pick<LeashProxy, "closed" | "close"> {
  const { server, client, gate, log } = ctx;
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
    ctx.upstreamGone ??= "its connection closed";
    log(`the upstream MCP server is gone (${ctx.upstreamGone})`);
    void shutDown("upstream");
  };
  server.onclose = () => {
    void shutDown("agent");
  };
  return { closed, close: () => shutDown("agent") };
}
