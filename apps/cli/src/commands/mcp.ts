// `leash mcp`: runs an MCP server (a command on stdio, or --url) behind Leash and speaks MCP to the agent on stdio.
// The proxy is @leash/mcp's; this reads flags, the config file, the key and the store (or the daemon's address).
import { readFileSync } from "node:fs";
import { loadPublicKey } from "@leash/chain";
import { createClient } from "@leash/client";
import { createEngine } from "@leash/engine";
import {
  clientGate,
  connectUpstream,
  createLeashProxy,
  engineGate,
  type LeashGate,
  loadMcpConfig,
  type McpProxyConfig,
  type PolicyToolView,
  parseMcpConfig,
  sessionGuardConfig,
  upstreamTransport,
} from "@leash/mcp";
import { type CompiledPolicy, neverAllows, toolEstimate } from "@leash/policy";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { Command } from "commander";
import { positiveNumber } from "../args.js";
import { checkSigner, engineFailure } from "../context.js";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine, type Io } from "../io.js";
import { addKeyOptions, type KeyOptions, resolveSigner } from "../keys.js";
import { connectStore, migrateStore, parseStoreUrl, resolveStoreUrl } from "../store.js";
import { loadPolicyFile } from "./policy.js";

export interface McpOptions extends KeyOptions {
  readonly config?: string;
  readonly store?: string;
  readonly daemon?: string;
  readonly url?: string;
  readonly agent?: string;
  readonly org?: string;
  readonly session?: string;
  readonly hmacKeyFile?: string;
  readonly hmacKeyId?: string;
  readonly daemonPubkey?: string;
  readonly hitlTimeout?: number;
  readonly daemonTimeout?: number;
  /** An operator's policy: judged in library mode; hides tools it never allows and gives estimates in both. */
  readonly policy?: string;
}

/** The policy's view of tools for this agent (tools/list filtering, per-tool estimates). */
function policyViewOf(policy: CompiledPolicy, options: McpOptions): PolicyToolView {
  const who = (tool: string) => ({
    tool,
    agent: options.agent ?? "mcp-proxy",
    ...(options.org === undefined ? {} : { org: options.org }),
  });
  return {
    hidden: (tool) => neverAllows(policy, who(tool)),
    estimate: (tool) => toolEstimate(policy, who(tool)),
  };
}

/** Where the proxy's own notes go: stderr, one line each (stdout is the agent's MCP stream). */
function logger(io: Io): (line: string) => void {
  return (line) => io.stderr(`leash mcp: ${line.replace(/\s*\n\s*/g, " ")}\n`);
}

async function readConfig(options: McpOptions): Promise<McpProxyConfig> {
  if (options.config === undefined) return parseMcpConfig({});
  try {
    return await loadMcpConfig(options.config);
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
}

function upstreamOf(command: readonly string[], options: McpOptions, io: Io) {
  if (options.url !== undefined && command.length > 0)
    throw new CliError("give an MCP server command after -- or --url URL, not both", EXIT_BAD_INPUT);
  if (options.url === undefined && command.length === 0)
    throw new CliError(
      "leash mcp needs the MCP server to run: -- COMMAND [ARGS…] or --url URL (see `leash mcp --help`)",
      EXIT_BAD_INPUT,
    );
  try {
    return upstreamTransport(
      options.url !== undefined
        ? { url: options.url }
        : { command: command[0] as string, args: command.slice(1), env: io.env },
    );
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
}

function checkModeFlags(options: McpOptions): void {
  const daemonOnly = [
    ["--hmac-key-file", options.hmacKeyFile],
    ["--hmac-key-id", options.hmacKeyId],
    ["--daemon-pubkey", options.daemonPubkey],
    ["--daemon-timeout", options.daemonTimeout],
  ] as const;
  if (options.daemon === undefined) {
    const given = daemonOnly.find(([, value]) => value !== undefined);
    if (given !== undefined)
      throw new CliError(`${given[0]} applies only with --daemon SOCKET`, EXIT_BAD_INPUT);
    return;
  }
  if (options.store !== undefined)
    throw new CliError("give --store URL (library mode) or --daemon SOCKET, not both", EXIT_BAD_INPUT);
  if (options.keyFile !== undefined || options.ephemeralKey === true)
    throw new CliError(
      "--key-file and --ephemeral-key are for library mode: the daemon signs",
      EXIT_BAD_INPUT,
    );
  for (const [flag, value] of [
    ["--org", options.org],
    ["--agent", options.agent],
    ["--hmac-key-file", options.hmacKeyFile],
  ] as const) {
    if (value === undefined) throw new CliError(`--daemon needs ${flag}`, EXIT_BAD_INPUT);
  }
}

function readHmacKey(path: string): string {
  try {
    return readFileSync(path, "utf8").trim();
  } catch (err) {
    throw new CliError(`--hmac-key-file ${path}: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
  }
}

/** Daemon mode: the daemon's policy for --org/--agent decides; nothing is opened or signed here. */
async function daemonGate(options: McpOptions, config: McpProxyConfig): Promise<LeashGate> {
  if (Object.values(config.tools).some((tool) => tool.policy === "hitl"))
    throw new CliError(
      "tools.<name>.policy hitl needs library mode: with --daemon the daemon's policy decides (hitl_mode there)",
      EXIT_BAD_INPUT,
    );
  if (Object.values(config.tools).some((tool) => tool.policy === "deny"))
    throw new CliError(
      "tools.<name>.policy deny needs library mode: with --daemon the daemon's policy decides (denied_tools in the agent's guard there)",
      EXIT_BAD_INPUT,
    );
  let daemonPublicKey: string | undefined;
  if (options.daemonPubkey !== undefined) {
    try {
      daemonPublicKey = loadPublicKey(options.daemonPubkey).publicKeyHex;
    } catch (err) {
      throw new CliError(`--daemon-pubkey: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
    }
  }
  let client: ReturnType<typeof createClient>;
  try {
    client = createClient({
      socketPath: options.daemon as string,
      organizationId: options.org as string,
      agentId: options.agent as string,
      hmacKey: readHmacKey(options.hmacKeyFile as string),
      keyId: options.hmacKeyId ?? "",
      framework: "mcp",
      ...(options.daemonTimeout === undefined
        ? {}
        : { timeoutMs: options.daemonTimeout, controlTimeoutMs: Math.max(1000, options.daemonTimeout) }),
      ...(daemonPublicKey === undefined ? {} : { daemonPublicKey }),
    });
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
  try {
    return await clientGate(client, options.session === undefined ? {} : { session_id: options.session });
  } catch (err) {
    client.close();
    throw new CliError(
      `cannot register with the daemon at ${options.daemon}: ${firstLine(err)}`,
      EXIT_REFUSED,
      {
        cause: err,
      },
    );
  }
}

/** Library mode: the store opened, migrated and checked against the key, and an engine over it. */
async function libraryGate(
  options: McpOptions,
  config: McpProxyConfig,
  policy: Awaited<ReturnType<typeof loadPolicyFile>> | undefined,
  library: { target: ReturnType<typeof parseStoreUrl>; signer: ReturnType<typeof resolveSigner>["signer"] },
  stopUpstream: () => Promise<unknown>,
): Promise<{ gate: LeashGate; closeStore: () => Promise<void> }> {
  const { target, signer } = library;
  let substrate: Awaited<ReturnType<typeof connectStore>>;
  try {
    substrate = await connectStore(target);
  } catch (err) {
    await stopUpstream();
    throw err;
  }
  const closeStore = () => substrate.close().catch(() => undefined);
  let gate: LeashGate;
  try {
    await migrateStore(target, substrate);
    await checkSigner(substrate, target, signer);
    const engine = createEngine({
      substrate,
      signer,
      reservationTtlMs: config.leash.reservation_ttl_s * 1000,
      ...(policy === undefined ? {} : { policy }),
    });
    gate = await engineGate({
      engine,
      agent_id: options.agent ?? "mcp-proxy",
      ...(options.org === undefined ? {} : { organization_id: options.org }),
      ...(options.session === undefined ? {} : { session_id: options.session }),
      config: sessionGuardConfig(config),
    });
  } catch (err) {
    await closeStore();
    await stopUpstream();
    throw engineFailure(err, target.url) ?? err;
  }
  return { gate, closeStore };
}

export async function runMcp(command: readonly string[], options: McpOptions, io: Io): Promise<number> {
  checkModeFlags(options);
  const config = await readConfig(options);
  const policy = options.policy === undefined ? undefined : await loadPolicyFile(options.policy, io);
  const transport = upstreamOf(command, options, io);
  const log = logger(io);
  // Flags, store URL and key are checked before the server starts (they change nothing).
  const library =
    options.daemon !== undefined
      ? undefined
      : {
          target: parseStoreUrl(
            resolveStoreUrl(
              options.store,
              io.env,
              options.config === undefined ? undefined : config.leash.store,
            ),
          ),
          signer: resolveSigner(options, io).signer,
        };
  // The server starts before anything is registered: a server that cannot start changes nothing.
  let upstream: Awaited<ReturnType<typeof connectUpstream>>;
  try {
    upstream = await connectUpstream(transport);
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_REFUSED, { cause: err });
  }
  const stopUpstream = () => upstream.close().catch(() => undefined);
  let gate: LeashGate;
  let closeStore: () => Promise<void> = async () => undefined;
  if (library === undefined) {
    gate = await daemonGate(options, config).catch(async (err) => {
      await stopUpstream();
      throw err;
    });
  } else {
    ({ gate, closeStore } = await libraryGate(options, config, policy, library, stopUpstream));
  }
  let proxy: Awaited<ReturnType<typeof createLeashProxy>>;
  try {
    proxy = await createLeashProxy({
      upstream,
      gate,
      tools: config.tools,
      log,
      ...(policy === undefined ? {} : { policyView: policyViewOf(policy, options) }),
      ...(options.hitlTimeout === undefined ? {} : { hitlTimeoutMs: options.hitlTimeout * 1000 }),
    });
  } catch (err) {
    await stopUpstream();
    await gate.close().catch(() => undefined);
    await closeStore();
    throw err;
  }
  log(`session ${gate.sessionId} (${gate.mode} mode); serving MCP on stdio`);
  return serveOnStdio(proxy, io, log, closeStore);
}

/** Serves the agent on stdio until either side closes; exit 1 when it was the MCP server that went. */
async function serveOnStdio(
  proxy: Awaited<ReturnType<typeof createLeashProxy>>,
  io: Io,
  log: (line: string) => void,
  closeStore: () => Promise<void>,
): Promise<number> {
  const stopListening = io.onStop(() => {
    void proxy.close();
  });
  // The SDK's stdio transport never notices the agent closing stdin; that is a disconnect too.
  const onEnd = () => void proxy.close();
  process.stdin.once("end", onEnd);
  await proxy.connect(new StdioServerTransport());
  const { by } = await proxy.closed;
  process.stdin.off("end", onEnd);
  stopListening();
  await closeStore();
  if (by === "upstream") {
    log("the MCP server exited; stopping");
    return EXIT_REFUSED;
  }
  return 0;
}

export function registerMcp(program: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    program
      .command("mcp")
      .description(
        "run an MCP server behind Leash: every tools/call is decided and recorded before the server sees it",
      )
      .argument("[command...]", "the MCP server to start, after --: COMMAND [ARGS…] (stdio)")
      .option("--url <url>", "an MCP server over streamable HTTP, in place of a command")
      .option(
        "--policy <file>",
        "an operator's policy (YAML/JSON): judges each call (library mode; with --daemon the daemon's decides), hides from tools/list the tools it never allows, gives tools its estimate_usd",
      )
      .option(
        "--config <file>",
        "JSON or YAML: {store, guard, reservation_ttl_s, tools: {NAME: {estimate_usd, policy: guard|hitl|deny}}}",
      )
      .option(
        "--store <url>",
        "library mode: where state lives, sqlite:PATH, postgres://… or memory: (default: $LEASH_STORE, else the config file's store, else sqlite:./leash.db)",
      )
      .option("--daemon <socket>", "daemon mode: ask the Leash daemon on this Unix socket instead of a store")
      .option("--agent <id>", "the agent id of the proxy's session (library mode default: mcp-proxy)")
      .option("--org <id>", "the organization id (daemon mode: required)")
      .option("--session <id>", "resume this session instead of starting a new one")
      .option("--hmac-key-file <file>", "daemon mode: the organization's HMAC key (hex)")
      .option("--hmac-key-id <id>", "daemon mode: which of the organization's keys it is")
      .option(
        "--daemon-pubkey <key>",
        "daemon mode: the daemon's public key (hex or file): every receipt is checked",
      )
      .option(
        "--daemon-timeout <ms>",
        "daemon mode: how long a call waits for the daemon's verdict before it is denied (fail closed; default 50)",
        positiveNumber,
      )
      .option(
        "--hitl-timeout <seconds>",
        "how long a HITL call waits for a human (elicitation, or an operator on the store or the daemon) (default: 900)",
        positiveNumber,
      ),
  )
    .addHelpText(
      "after",
      `
Examples:
  leash mcp --config mcp.yaml --key-file leash.key -- npx -y @modelcontextprotocol/server-filesystem ~/notes
  leash mcp --store sqlite:./leash.db --ephemeral-key --url http://127.0.0.1:3000/mcp
  leash mcp --daemon /run/leash/leash.sock --org acme --agent notes-bot --hmac-key-file acme-k1.hmac --hmac-key-id k1 -- ./server

mcp.yaml:
  store: sqlite:./leash.db
  guard: { budget_usd: 1, max_repeat_calls: 3, error_amplification: true, default_estimate_usd: 0.001 }
  tools:
    search: { estimate_usd: "0.01" }
    write_file: { policy: hitl }     # a human approves every call
    delete_file: { policy: deny }    # never forwarded: a recorded DENY policy_violation:tool_denied

Everything but tools/call passes through unchanged. ALLOW forwards the call and settles its cost (the
result's _meta["leash/cost_usd"], else the estimate); DENY and HITL answer with an isError result whose
text tells the model what happened and what to do, with {verdict, reason, receipt} in structuredContent.
HITL, library mode: asks the agent's user through MCP elicitation when the client supports it
(recorded as operator mcp-elicitation:<client>); otherwise waits for an operator (\`leash hitl approve\`)
up to --hitl-timeout. HITL, daemon mode: waits for an operator on the daemon (its web console, or
\`leash hitl approve ID --console URL\`) up to the request's expiry or --hitl-timeout; approve runs the call
once, modify runs the operator's params, reject and expiry are recorded DENYs. Elicitation is not used
there: the proxy holds no credential the daemon trusts, so an answer given to the agent's client would
not be an approver's. If nobody answered in time the result names the pending request; the same call
sent again runs once approved. With --daemon, tools' hitl and deny policies are the daemon's
(hitl_mode, denied_tools in the agent's guard).
stdout carries MCP only; notes go to stderr. The server gets this environment minus LEASH_* variables.
Exit status: 0 when the agent disconnects, 1 when the MCP server exits or Leash refuses to start, 2 bad flags or config.`,
    )
    .action(async (command: string[], options: McpOptions) => {
      setExit(await runMcp(command, options, io));
    });
}
