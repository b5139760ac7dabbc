// The MCP proxy's errors: a bad proxy config, an upstream MCP server that cannot be started or is gone.
// Verdicts are not errors: a DENY or a HITL is a tool result the model reads.
import { LeashBaseError } from "@leash/core";

export type McpProxyErrorCode =
  /** The proxy's config file (its `tools` section, or the Leash config beside it) is invalid. */
  | "config_invalid"
  /** Bad options handed to the proxy (no upstream, both a command and a URL, …). */
  | "invalid_argument"
  /** The upstream MCP server could not be started or did not complete the MCP handshake. */
  | "upstream_unavailable";

export class McpProxyError extends LeashBaseError<McpProxyErrorCode> {
  static override readonly marker: symbol = Symbol.for("leash.mcp.McpProxyError");
  override name = "McpProxyError";
}
