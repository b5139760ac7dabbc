// The proxy's config file: a Leash config (store, guard, reservation_ttl_s) plus a `tools` section
// with each tool's estimate and policy. Reading and validating only; opening the store is the caller's.
import { type LeashConfigFile, parseConfigObject, readConfigDocument } from "@leash/engine";
import { McpProxyError } from "./errors.js";

/**
 * What Leash does with one tool's calls. `guard` (the default): the guard config decides. `hitl`:
 * every call needs a human (decided and recorded by the engine in a session of its own, see
 * README). `deny`: never forwarded; the session's guard lists it in `denied_tools`, so each call is
 * a recorded DENY `policy_violation:tool_denied` (library mode; a daemon's own config decides there).
 */
export type ToolPolicy = "guard" | "hitl" | "deny";

export interface ToolSettings {
  /** The call's estimated cost in USD (exact decimal text or a number), held against the budget. */
  estimate_usd?: string | number;
  policy?: ToolPolicy;
}

export interface McpProxyConfig {
  /** The Leash part: store, the guard config of the proxy's session, reservation TTL. */
  leash: LeashConfigFile;
  /** Per tool, by its MCP name. */
  tools: Readonly<Record<string, ToolSettings>>;
}

const POLICIES: readonly ToolPolicy[] = ["guard", "hitl", "deny"];
const DECIMAL = /^(?:0|[1-9][0-9]*)(?:\.[0-9]+)?$/;

function invalid(source: string, message: string): McpProxyError {
  return new McpProxyError("config_invalid", `${source}: ${message}`);
}

function readTools(value: unknown, source: string): Record<string, ToolSettings> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) throw invalid(source, "/tools must be an object");
  const tools: Record<string, ToolSettings> = {};
  for (const [name, raw] of Object.entries(value as Record<string, unknown>)) {
    const where = `/tools/${name}`;
    if (typeof raw !== "object" || raw === null || Array.isArray(raw))
      throw invalid(source, `${where} must be an object`);
    const settings: ToolSettings = {};
    for (const [key, field] of Object.entries(raw as Record<string, unknown>)) {
      if (key === "estimate_usd") {
        const ok =
          (typeof field === "number" && Number.isFinite(field) && field >= 0) ||
          (typeof field === "string" && DECIMAL.test(field));
        if (!ok) throw invalid(source, `${where}/estimate_usd must be a non-negative number or decimal text`);
        settings.estimate_usd = field as string | number;
      } else if (key === "policy") {
        if (!POLICIES.includes(field as ToolPolicy))
          throw invalid(source, `${where}/policy must be one of ${POLICIES.join(", ")}`);
        settings.policy = field as ToolPolicy;
      } else {
        throw invalid(source, `${where} has unknown field "${key}"`);
      }
    }
    tools[name] = settings;
  }
  return tools;
}

/** Validates a parsed document: `tools` here, everything else by the engine's own config rules. */
export function parseMcpConfig(value: unknown, source = "config"): McpProxyConfig {
  const document = value ?? {};
  if (typeof document !== "object" || Array.isArray(document)) throw invalid(source, "must be an object");
  const { tools, ...rest } = document as Record<string, unknown>;
  const parsedTools = readTools(tools, source);
  let leash: LeashConfigFile;
  try {
    leash = parseConfigObject(rest, source);
  } catch (cause) {
    throw new McpProxyError("config_invalid", (cause as Error).message, { cause });
  }
  return { leash, tools: parsedTools };
}

/** Reads a `.json`, `.yaml` or `.yml` proxy config file (at most 1 MiB, like every Leash config). */
export async function loadMcpConfig(path: string): Promise<McpProxyConfig> {
  let document: unknown;
  try {
    document = await readConfigDocument(path);
  } catch (cause) {
    throw new McpProxyError("config_invalid", (cause as Error).message, { cause });
  }
  return parseMcpConfig(document, path);
}

/**
 * The guard config of the proxy's session: the file's guard with each tool's `estimate_usd` added
 * to `tool_estimates_usd` (the engine holds it for that tool's calls) and each `deny` tool added to
 * `denied_tools` (the engine refuses and records its calls).
 */
export function sessionGuardConfig(config: McpProxyConfig): LeashConfigFile["guard"] {
  const guard = config.leash.guard;
  const estimates: Record<string, string | number> = { ...guard.tool_estimates_usd };
  const denied = new Set(guard.denied_tools ?? []);
  for (const [name, settings] of Object.entries(config.tools)) {
    if (settings.estimate_usd !== undefined) estimates[name] = settings.estimate_usd;
    if (settings.policy === "deny") denied.add(name);
  }
  return {
    ...guard,
    ...(Object.keys(estimates).length === 0 ? {} : { tool_estimates_usd: estimates }),
    ...(denied.size === 0 ? {} : { denied_tools: [...denied] }),
  };
}
