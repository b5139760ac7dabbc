// The daemon's configuration file (JSON or YAML): the store, and per organization its HMAC keys and policies.
// Reading and validating only (errors name the field); it opens no socket and no store.
import { readFileSync, statSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import type { Config } from "@leash/core";
import { validateConfig } from "@leash/core/schema";
import { MIN_KEY_BYTES } from "@leash/wire";
import { parse as parseYaml } from "yaml";
import { configSafetyProblem } from "./config-safety.js";
import { type DaemonLimits, parseLimits } from "./limits.js";
import { looseSecretProblem } from "./secret-file.js";

/** A bad configuration: one line naming the file and field. */
export class DaemonConfigError extends Error {
  override name = "DaemonConfigError";
  readonly code = "config_invalid";
}

export interface OrganizationConfig {
  readonly organizationId: string;
  /** key id → key bytes (≥ 32). */
  readonly hmacKeys: ReadonlyMap<string, Uint8Array>;
  /**
   * key id → the agents that key may act as (`hmac_keys: {k1: {file, agents: [bot]}}`): it registers
   * sessions for them only and touches no other agent's session. A key absent here is the
   * organization's: it may act as any of its agents.
   */
  readonly keyAgents: ReadonlyMap<string, ReadonlySet<string>>;
  /** The key an envelope with an empty key_id is checked with: `current_key`, or the only key. */
  readonly currentKeyId: string | null;
  readonly defaultGuard: Config;
  /** agent id → that agent's guard (merged over defaultGuard, field by field). */
  readonly agents: ReadonlyMap<string, Config>;
}

export interface DaemonConfig {
  /** `sqlite:PATH`, `postgres://…`, `memory:`; undefined: the caller (`leash serve --store`) says. */
  readonly store: string | undefined;
  /** Budget holds without a postExec are charged at their estimate after this many seconds (default 300). */
  readonly reservationTtlS: number;
  readonly organizations: ReadonlyMap<string, OrganizationConfig>;
  /** key id → organization id; key ids are unique across organizations. */
  readonly keyOwners: ReadonlyMap<string, string>;
  /** The `limits:` block (socket limits, per-organization quotas), defaults filled in. */
  readonly limits: DaemonLimits;
  /** `policy: FILE` (relative to the config's directory): the operator's policy file, when given. */
  readonly policyFile?: string;
}

/** The largest config file read, as the engine's loader: a config is a few kilobytes. */
const MAX_CONFIG_BYTES = 1024 * 1024;

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

function only(value: Record<string, unknown>, allowed: readonly string[], where: string, fail: Fail): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) fail(`${where} has unknown field "${key}"`);
  }
}

type Fail = (problem: string) => never;

function guardOf(value: unknown, where: string, fail: Fail): Config {
  if (value === undefined) return {};
  const checked = validateConfig(value, where);
  if (!checked.ok) fail(checked.errors.join("; "));
  return checked.value;
}

/** A key's `agents` binding: absent (the organization's key), or a non-empty list of agent ids. */
function keyAgentsOf(spec: unknown, where: string, fail: Fail): ReadonlySet<string> | null {
  if (!isObject(spec) || spec.agents === undefined) return null;
  const agents = spec.agents;
  if (
    !Array.isArray(agents) ||
    agents.length === 0 ||
    agents.some((agent) => typeof agent !== "string" || agent === "")
  ) {
    fail(`${where}/agents must be a non-empty list of agent ids`);
  }
  return new Set(agents as string[]);
}

function keyBytes(spec: unknown, where: string, baseDir: string, fail: Fail): Uint8Array {
  if (!isObject(spec)) fail(`${where} must be { file: PATH } or { hex: "…" }`);
  only(spec, ["file", "hex", "agents"], where, fail);
  let hex: string;
  if (typeof spec.hex === "string" && spec.file === undefined) {
    hex = spec.hex.trim();
  } else if (typeof spec.file === "string" && spec.hex === undefined) {
    const path = isAbsolute(spec.file) ? spec.file : resolve(baseDir, spec.file);
    try {
      const info = statSync(path);
      if (!info.isFile()) fail(`${where}.file ${path} is not a regular file`);
      if (info.size > 4096) fail(`${where}.file ${path} is larger than a key file can be`);
      const loose = looseSecretProblem(path, info);
      if (loose !== null) fail(`${where}.file: ${loose}`);
      hex = readFileSync(path, "utf8").trim();
    } catch (error) {
      if (error instanceof DaemonConfigError) throw error;
      fail(`${where}.file ${path} cannot be read: ${(error as NodeJS.ErrnoException).code ?? error}`);
    }
  } else {
    fail(`${where} must be { file: PATH } or { hex: "…" }`);
  }
  if (!/^([0-9a-fA-F]{2})+$/.test(hex)) fail(`${where}: the key must be hex`);
  const bytes = Uint8Array.from(Buffer.from(hex, "hex"));
  if (bytes.length < MIN_KEY_BYTES)
    fail(`${where}: the key has ${bytes.length} bytes, at least ${MIN_KEY_BYTES} needed`);
  return bytes;
}

/**
 * Validates an already parsed configuration. Relative key files are read from `baseDir` (the config
 * file's directory).
 * @throws DaemonConfigError naming the first bad field.
 */
export function parseDaemonConfig(
  value: unknown,
  source = "daemon config",
  baseDir = process.cwd(),
): DaemonConfig {
  const fail: Fail = (problem) => {
    throw new DaemonConfigError(`${source}: ${problem}`);
  };
  if (!isObject(value)) fail("must be an object with `organizations`");
  only(value, ["store", "reservation_ttl_s", "organizations", "limits", "policy"], "/", fail);
  if (value.policy !== undefined && (typeof value.policy !== "string" || value.policy === "")) {
    fail("/policy must be the path of a policy file (see @leash/policy)");
  }
  if (value.store !== undefined && (typeof value.store !== "string" || value.store === "")) {
    fail("/store must be a store URL (sqlite:PATH, postgres://…, memory:)");
  }
  const ttl = value.reservation_ttl_s ?? 300;
  if (typeof ttl !== "number" || !(ttl > 0) || !Number.isFinite(ttl))
    fail("/reservation_ttl_s must be a positive number");
  if (!isObject(value.organizations) || Object.keys(value.organizations).length === 0) {
    fail("/organizations must name at least one organization");
  }
  const organizations = new Map<string, OrganizationConfig>();
  const keyOwners = new Map<string, string>();
  for (const [orgId, org] of Object.entries(value.organizations)) {
    const where = `/organizations/${orgId}`;
    if (!isObject(org)) fail(`${where} must be an object`);
    only(org, ["hmac_keys", "current_key", "default_guard", "agents"], where, fail);
    if (!isObject(org.hmac_keys) || Object.keys(org.hmac_keys).length === 0) {
      fail(`${where}/hmac_keys must name at least one key`);
    }
    const hmacKeys = new Map<string, Uint8Array>();
    const keyAgents = new Map<string, ReadonlySet<string>>();
    for (const [keyId, spec] of Object.entries(org.hmac_keys)) {
      if (keyId === "") fail(`${where}/hmac_keys: a key id must not be empty`);
      const owner = keyOwners.get(keyId);
      if (owner !== undefined)
        fail(`${where}/hmac_keys/${keyId}: key id already used by organization ${owner}`);
      hmacKeys.set(keyId, keyBytes(spec, `${where}/hmac_keys/${keyId}`, baseDir, fail));
      const agents = keyAgentsOf(spec, `${where}/hmac_keys/${keyId}`, fail);
      if (agents !== null) keyAgents.set(keyId, agents);
      keyOwners.set(keyId, orgId);
    }
    let currentKeyId: string | null = hmacKeys.size === 1 ? [...hmacKeys.keys()][0]! : null;
    if (org.current_key !== undefined) {
      if (typeof org.current_key !== "string" || !hmacKeys.has(org.current_key)) {
        fail(`${where}/current_key must name one of its hmac_keys`);
      }
      currentKeyId = org.current_key;
    }
    const defaultGuard = guardOf(org.default_guard, `${where}/default_guard`, fail);
    const agents = new Map<string, Config>();
    if (org.agents !== undefined) {
      if (!isObject(org.agents)) fail(`${where}/agents must be an object`);
      for (const [agentId, agent] of Object.entries(org.agents)) {
        const at = `${where}/agents/${agentId}`;
        if (!isObject(agent)) fail(`${at} must be an object`);
        only(agent, ["guard"], at, fail);
        agents.set(agentId, guardOf({ ...defaultGuard, ...(agent.guard as object) }, `${at}/guard`, fail));
      }
    }
    organizations.set(orgId, {
      organizationId: orgId,
      hmacKeys,
      keyAgents,
      currentKeyId,
      defaultGuard,
      agents,
    });
  }
  const config: DaemonConfig = {
    store: value.store as string | undefined,
    reservationTtlS: ttl,
    organizations,
    keyOwners,
    limits: parseLimits(value.limits, fail),
    ...(typeof value.policy === "string"
      ? { policyFile: isAbsolute(value.policy) ? value.policy : resolve(baseDir, value.policy) }
      : {}),
  };
  const unsafe = configSafetyProblem(config);
  if (unsafe !== null) fail(unsafe);
  return config;
}

/** Reads a `.json`, `.yaml` or `.yml` daemon configuration. */
export function loadDaemonConfig(path: string): DaemonConfig {
  const fail = (problem: string): never => {
    throw new DaemonConfigError(`cannot read daemon config ${path}: ${problem}`);
  };
  let text = "";
  try {
    const info = statSync(path);
    if (!info.isFile()) fail("not a regular file");
    if (info.size > MAX_CONFIG_BYTES) fail("larger than 1 MiB");
    text = readFileSync(path, "utf8");
  } catch (error) {
    if (error instanceof DaemonConfigError) throw error;
    fail(String((error as NodeJS.ErrnoException).code ?? error));
  }
  let value: unknown;
  const yaml = /\.ya?ml$/i.test(path);
  try {
    value = yaml ? parseYaml(text) : JSON.parse(text);
  } catch (error) {
    fail(`not valid ${yaml ? "YAML" : "JSON"}: ${(error as Error).message.split("\n")[0]}`);
  }
  return parseDaemonConfig(value, path, dirname(resolve(path)));
}

/** Whether the key `keyId` of `org` may act as agent `agentId` (an unbound key acts as any of them). */
export function keyMayActAs(org: OrganizationConfig | undefined, keyId: string, agentId: string): boolean {
  if (org === undefined) return false;
  const bound = org.keyAgents.get(keyId);
  return bound === undefined || bound.has(agentId);
}

/** The guard a session of `agentId` in `org` gets: the agent's own, else the organization's default. */
export function policyFor(org: OrganizationConfig, agentId: string): Config {
  return org.agents.get(agentId) ?? org.defaultGuard;
}
