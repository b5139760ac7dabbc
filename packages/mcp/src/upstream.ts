// The transport to the real MCP server: a child process on stdio, or a streamable HTTP endpoint.
// It connects nothing itself (the proxy's SDK Client does) and passes the child no Leash secrets.
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { McpProxyError } from "./errors.js";

export type UpstreamSpec =
  | {
      command: string;
      args?: readonly string[];
      env?: Readonly<Record<string, string | undefined>>;
      cwd?: string;
    }
  | { url: string };

/**
 * The child's environment: the proxy's own (an MCP host configures the server through it), minus
 * every `LEASH_*` variable — the signing key, the store URL with its password — which the server
 * must never see.
 */
function childEnvironment(env: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value !== undefined && !name.startsWith("LEASH_")) out[name] = value;
  }
  return out;
}

export function upstreamTransport(spec: UpstreamSpec): Transport {
  if ("url" in spec) {
    let url: URL;
    try {
      url = new URL(spec.url);
    } catch {
      throw new McpProxyError("invalid_argument", `--url ${spec.url} is not a URL`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:")
      throw new McpProxyError(
        "invalid_argument",
        `--url ${spec.url}: only http: and https: MCP servers are supported`,
      );
    return new StreamableHTTPClientTransport(url);
  }
  if (spec.command === "") throw new McpProxyError("invalid_argument", "the MCP server command is empty");
  return new StdioClientTransport({
    command: spec.command,
    args: [...(spec.args ?? [])],
    env: childEnvironment(spec.env ?? process.env),
    stderr: "inherit",
    ...(spec.cwd === undefined ? {} : { cwd: spec.cwd }),
  });
}
