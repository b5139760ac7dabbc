// What one MCP proxy's handlers share: its two SDK ends, the gate, its settings and its small per-tool
// memory; and the helpers every forwarded request uses. It registers no handler itself.
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type { RequestOptions } from "@modelcontextprotocol/sdk/shared/protocol.js";
import { ErrorCode, McpError, type Notification, type Request } from "@modelcontextprotocol/sdk/types.js";
import type { ToolSettings } from "./config.js";
import type { LeashGate } from "./gate.js";

/** setTimeout's ceiling: the agent's own timeout and cancellation bound a forwarded request. */
export const NO_TIMEOUT_MS = 2_147_483_647;

/** A policy's static view of tools (see @leash/policy neverAllows and toolEstimate). */
export interface PolicyToolView {
  hidden(tool: string): boolean;
  estimate(tool: string): number | undefined;
}

/** What the SDK hands a request handler, of what the proxy uses. */
export interface HandlerExtra {
  signal: AbortSignal;
  sendNotification: (n: Notification) => Promise<void>;
}

/** The state of one proxy, shared by its handlers. */
export interface ProxyContext {
  readonly gate: LeashGate;
  /** The agent-facing server. */
  readonly server: Server;
  /** The upstream-facing client. */
  readonly client: Client;
  readonly tools: Readonly<Record<string, ToolSettings>>;
  readonly policyView: PolicyToolView | undefined;
  readonly hitlTimeoutMs: number;
  readonly log: (line: string) => void;
  /** Why the upstream server is gone, or null while it is there. */
  upstreamGone: string | null;
  /** Tools whose listing declares an outputSchema: a client validates structuredContent against it. */
  readonly withOutputSchema: Set<string>;
  /** The error each tool's last result reported, for error amplification; cleared by a success. */
  readonly lastError: Map<string, string>;
  /** A paused call's nonce by tool and argument digest: re-sending the same call re-dispatches it. */
  readonly paused: Map<string, string>;
}

export function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The error a request gets once the upstream server is gone. */
export function gone(ctx: ProxyContext): McpError {
  return new McpError(ErrorCode.InternalError, `the upstream MCP server is gone (${ctx.upstreamGone})`);
}

/** Options for a request forwarded upstream: the agent's signal, and its progress token mapped back. */
export function forwardOptions(ctx: ProxyContext, extra: HandlerExtra, request: Request): RequestOptions {
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
              .catch((error) => ctx.log(`progress notification not delivered: ${message(error)}`));
          },
        }),
  };
}
