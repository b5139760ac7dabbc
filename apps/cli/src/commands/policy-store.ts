// `leash policy report` and `leash policy explain`: what policies decided (and would have, in monitor
// mode) over a store's chain, and which rule decided one call, with its inputs. Reads only; writes nothing.
import type { ChainEntryRecord } from "@leash/core";
import { countedCallOf, type StoredPolicyRecord, updatesOf } from "@leash/engine";
import { loadPolicy } from "@leash/policy";
import type { Command } from "commander";
import { storeEntries } from "../chain-io.js";
import { addStoreOptions, loadSettings, printJson, type StoreOptions } from "../context.js";
import { CliError, EXIT_BAD_INPUT, type Io } from "../io.js";
import { openExistingStore } from "../store.js";

type Data = Record<string, unknown>;
interface Recorded {
  hash?: string;
  verdict: string;
  rule: string | null;
  reason: string;
  monitor?: Array<{ rule: string; would: string; reason: string }>;
  counted?: unknown[];
  counter_updates?: unknown[];
  approved?: true;
}

const DEFAULT_ALLOW = { verdict: "ALLOW", rule: null, reason: "policy_allow:default" } as const;

/**
 * An entry's policy record; a `policy_hash` without one is the policy's default ALLOW, as is a record
 * with only `counted` (docs/chain-format.md).
 */
function recordedOf(data: Data): Recorded | null {
  if (typeof data.policy_hash === "string" && !Object.hasOwn(data, "policy")) return { ...DEFAULT_ALLOW };
  const policy = (data.policy ?? null) as Partial<Recorded> | null;
  if (policy === null || policy.verdict !== undefined) return policy as Recorded | null;
  return { ...DEFAULT_ALLOW, ...policy } as Recorded;
}

/** The counter updates a record stands for, in full (a compact `counted` expanded under its version). */
function updatesIn(policy: Recorded | null, version: Data | undefined, data: Data): unknown[] {
  if (policy === null) return [];
  let compiled: ReturnType<typeof loadPolicy> | undefined;
  try {
    compiled =
      version === undefined ? undefined : loadPolicy(JSON.parse(String(version.canonical)) as object);
  } catch {
    compiled = undefined;
  }
  return [...updatesOf(policy as StoredPolicyRecord, compiled, countedCallOf(data, Number(data.now_ns)))];
}

interface RuleTally {
  rule: string;
  /** Calls the rule decided (enforce), by verdict. */
  decided: Record<string, number>;
  /** Calls the rule would have decided (monitor), by would-be verdict. */
  would: Record<string, number>;
}

async function* decoded(options: StoreOptions, io: Io): AsyncGenerator<{ kind: string; data: Data }> {
  const { target } = await loadSettings(options, io);
  const substrate = await openExistingStore(target);
  try {
    for await (const entry of storeEntries(substrate) as AsyncIterable<ChainEntryRecord>) {
      if (entry.kind !== "decision" && entry.kind !== "policy_published") continue;
      yield { kind: entry.kind, data: (JSON.parse(entry.body) as { data: Data }).data };
    }
  } finally {
    await substrate.close().catch(() => undefined);
  }
}

export interface ReportOptions extends StoreOptions {
  readonly json?: boolean;
  readonly hash?: string;
}

/** Sums, per rule, the verdicts policies gave and those monitor rules would have given. */
export async function runPolicyReport(options: ReportOptions, io: Io): Promise<number> {
  const rules = new Map<string, RuleTally>();
  const versions = new Map<string, { hash: string; name: string | null; decisions: number }>();
  let decisions = 0;
  const tally = (rule: string) => {
    const known = rules.get(rule);
    if (known !== undefined) return known;
    const t: RuleTally = { rule, decided: {}, would: {} };
    rules.set(rule, t);
    return t;
  };
  for await (const { kind, data } of decoded(options, io)) {
    if (kind === "policy_published") {
      const hash = String(data.policy_hash);
      versions.set(hash, { hash, name: String(data.name), decisions: versions.get(hash)?.decisions ?? 0 });
      continue;
    }
    const hash = data.policy_hash;
    if (typeof hash !== "string" || (options.hash !== undefined && hash !== options.hash)) continue;
    decisions++;
    const v = versions.get(hash) ?? { hash, name: null, decisions: 0 };
    v.decisions++;
    versions.set(hash, v);
    const policy = recordedOf(data);
    if (policy === null) continue;
    if (policy.rule !== null || policy.reason === "policy_violation:default_deny") {
      const t = tally(policy.rule ?? "default");
      // The entry's verdict: a policy ALLOW the budget then refused is counted as what it became.
      const verdict = String(data.verdict);
      t.decided[verdict] = (t.decided[verdict] ?? 0) + 1;
    }
    for (const m of policy.monitor ?? []) {
      const t = tally(m.rule);
      const would = m.would.split(" ")[0] ?? m.would;
      t.would[would] = (t.would[would] ?? 0) + 1;
    }
  }
  const report = { decisions, versions: [...versions.values()], rules: [...rules.values()] };
  if (options.json === true) {
    printJson(io, report);
    return 0;
  }
  io.stdout(`${decisions} decision${decisions === 1 ? "" : "s"} under a policy\n`);
  for (const v of report.versions)
    io.stdout(`version ${v.hash.slice(0, 12)} ${v.name ?? "?"}: ${v.decisions}\n`);
  const fmt = (counts: Record<string, number>) =>
    Object.entries(counts)
      .map(([verdict, n]) => `${verdict} ${n}`)
      .join(", ") || "-";
  for (const t of report.rules) {
    io.stdout(`rule ${t.rule}: decided ${fmt(t.decided)}; would ${fmt(t.would)}\n`);
  }
  return 0;
}

export interface ExplainOptions extends StoreOptions {
  readonly session: string;
  readonly call: number;
}

/** The decision entry of one call: the version, the rule that decided (its text), the inputs it saw. */
export async function runPolicyExplain(options: ExplainOptions, io: Io): Promise<number> {
  const published = new Map<string, Data>();
  let found: Data | undefined;
  for await (const { kind, data } of decoded(options, io)) {
    if (kind === "policy_published") published.set(String(data.policy_hash), data);
    else if (data.session_id === options.session && data.call_number === options.call) {
      found = data;
      break;
    }
  }
  if (found === undefined) {
    throw new CliError(`no decision for call ${options.call} of session ${options.session}`, EXIT_BAD_INPUT);
  }
  const hash = typeof found.policy_hash === "string" ? found.policy_hash : null;
  const version = hash === null ? undefined : published.get(hash);
  const doc =
    version === undefined ? undefined : (JSON.parse(String(version.canonical)) as { rules: Data[] });
  const policy = recordedOf(found);
  const rule = policy?.rule == null ? null : (doc?.rules.find((r) => r.name === policy.rule) ?? null);
  printJson(io, {
    session_id: found.session_id,
    call_number: found.call_number,
    verdict: found.verdict,
    reason: found.reason,
    policy_hash: hash,
    policy_name: version?.name ?? null,
    // Null when the policy did not run: SP/1.0 or the engine had refused or paused the call before it.
    decided_by:
      policy === null
        ? null
        : { rule: policy.rule ?? "default", verdict: policy.verdict, reason: policy.reason },
    rule,
    monitor: policy?.monitor ?? [],
    counter_updates: updatesIn(policy, version, found),
    approved: policy?.approved === true,
    inputs: {
      tool: found.tool_name,
      agent: found.agent_id,
      org: found.organization_id,
      args: typeof found.params_json === "string" ? JSON.parse(found.params_json) : null,
      session: { id: found.session_id, calls: Number(found.call_number) - 1 },
      estimated_cost_usd: found.estimated_cost_usd ?? null,
      budget_before_usd: found.budget_before_usd ?? null,
      time: { unix_s: Math.floor(Number(found.now_ns) / 1e9) },
    },
  });
  return 0;
}

const positive = (text: string): number => {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1)
    throw new CliError(`--call wants a call number >= 1, not ${text}`, EXIT_BAD_INPUT);
  return n;
};

export function registerPolicyStore(policy: Command, io: Io, setExit: (code: number) => void): void {
  addStoreOptions(
    policy
      .command("report")
      .description(
        "sum, per rule, what policies decided over a store and what monitor rules would have (shadow roll-out)",
      )
      .option("--json", "print {decisions, versions, rules: [{rule, decided, would}]}")
      .option("--hash <sha256>", "only decisions made by this policy version"),
  ).action(async (options: ReportOptions) => {
    setExit(await runPolicyReport(options, io));
  });
  addStoreOptions(
    policy
      .command("explain")
      .description("which rule decided one call, its text and the inputs it saw (from the chain)")
      .requiredOption("--session <id>", "the session")
      .requiredOption("--call <n>", "the call number", positive),
  ).action(async (options: ExplainOptions) => {
    setExit(await runPolicyExplain(options, io));
  });
}
