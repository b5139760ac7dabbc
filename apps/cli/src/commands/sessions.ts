// `leash sessions list`: the store's sessions as a table (or JSON Lines), filtered by status and agent.
// It only reads the snapshot tables; it changes nothing and verifies nothing (that is `leash verify`).
import type { SessionRecord, SessionStatus, Substrate } from "@leash/core";
import { type Command, Option } from "commander";
import { nonEmpty, positiveInteger } from "../args.js";
import { addStoreOptions, loadSettings, printJson, type StoreOptions } from "../context.js";
import type { Io } from "../io.js";
import { openExistingStore, storeFailure } from "../store.js";
import { table } from "../table.js";

const STATUSES: readonly SessionStatus[] = ["ACTIVE", "PAUSED", "STALE", "TERMINATED"];

export interface SessionsListOptions extends StoreOptions {
  readonly status?: SessionStatus;
  readonly agent?: string;
  readonly org?: string;
  readonly limit: number;
  readonly json?: boolean;
}

/** One session as the list shows it: the snapshot's figures, not a replay of the chain. */
export interface SessionRow {
  session_id: string;
  agent_id: string;
  organization_id: string;
  status: SessionStatus;
  circuit_open: boolean;
  calls: number;
  budget_usd: number | null;
  budget_remaining_usd: number | null;
  created: string;
  last_activity: string;
}

const iso = (ns: number) => new Date(Math.floor(ns / 1e6)).toISOString();

function rowOf(s: SessionRecord): SessionRow {
  const budget =
    typeof s.config.budget_usd === "number" && s.config.budget_usd > 0 ? s.config.budget_usd : null;
  const remaining = s.state.budget_remaining_usd;
  return {
    session_id: s.session_id,
    agent_id: s.agent_id,
    organization_id: s.organization_id,
    status: s.status,
    circuit_open: s.state.circuit_tripped === true,
    calls: s.call_count,
    budget_usd: budget,
    budget_remaining_usd: budget === null ? null : typeof remaining === "number" ? remaining : budget,
    created: iso(s.created_ns),
    last_activity: iso(Math.max(s.updated_ns, s.last_heartbeat_ns ?? 0)),
  };
}

/** The matching sessions, most recently active first, at most `limit`. */
export async function listSessions(
  substrate: Substrate,
  filter: { status?: SessionStatus; agent?: string; org?: string; limit: number },
): Promise<SessionRow[]> {
  // The port filters by status only; agent and organization are filtered here, before the limit.
  const all = await substrate.transaction((tx) =>
    tx.sessions.list(filter.status === undefined ? {} : { status: filter.status }),
  );
  return all
    .filter((s) => filter.agent === undefined || s.agent_id === filter.agent)
    .filter((s) => filter.org === undefined || s.organization_id === filter.org)
    .sort((a, b) => b.updated_ns - a.updated_ns || a.session_id.localeCompare(b.session_id))
    .slice(0, filter.limit)
    .map(rowOf);
}

const money = (usd: number | null) => (usd === null ? "-" : `$${usd.toFixed(2)}`);

export async function runSessionsList(options: SessionsListOptions, io: Io): Promise<number> {
  const settings = await loadSettings(options, io);
  const substrate = await openExistingStore(settings.target);
  let rows: SessionRow[];
  try {
    rows = await listSessions(substrate, {
      limit: options.limit,
      ...(options.status === undefined ? {} : { status: options.status }),
      ...(options.agent === undefined ? {} : { agent: options.agent }),
      ...(options.org === undefined ? {} : { org: options.org }),
    });
  } catch (err) {
    throw storeFailure(err, settings.target.url) ?? err;
  } finally {
    await substrate.close().catch(() => undefined);
  }
  if (options.json === true) {
    for (const row of rows) printJson(io, row);
    return 0;
  }
  if (rows.length === 0) {
    io.stdout(noSessionsLine(settings.target, options));
    return 0;
  }
  const lines = table(
    ["SESSION", "AGENT", "ORG", "STATUS", "CIRCUIT", "CALLS", "BUDGET LEFT", "LAST ACTIVITY"],
    rows.map((r) => [
      r.session_id,
      r.agent_id,
      r.organization_id,
      r.status,
      r.circuit_open ? "open" : "closed",
      String(r.calls),
      r.budget_usd === null ? "-" : `${money(r.budget_remaining_usd)} of ${money(r.budget_usd)}`,
      r.last_activity,
    ]),
  );
  io.stdout(`${lines.join("\n")}\n`);
  return 0;
}

export function registerSessions(program: Command, io: Io, setExit: (code: number) => void): void {
  const sessions = program.command("sessions").description("list the sessions in a store");
  addStoreOptions(
    sessions
      .command("list")
      .description("the sessions in a store as a table, most recently active first")
      .addOption(new Option("--status <status>", "only sessions with this status").choices(STATUSES))
      .option("--agent <id>", "only this agent's sessions", nonEmpty)
      .option("--org <id>", "only this organization's sessions", nonEmpty)
      .option("--limit <n>", "show at most n sessions", positiveInteger, 100)
      .option("--json", "one JSON object per session and line, instead of the table"),
  )
    .addHelpText(
      "after",
      `
It reads the store's snapshot (no signing key, nothing written); the budget left is the snapshot's
figure as of the session's last call. \`leash session show ID\` prints one session in full.
Exit status: 0 listed (also when none match), 1 a store error, 2 bad flags, config or store URL.`,
    )
    .action(async (options: SessionsListOptions) => {
      setExit(await runSessionsList(options, io));
    });
}

/** What an empty listing says: which store was read, and why a memory: store is always empty here. */
function noSessionsLine(
  target: { kind: string; label: string },
  filter: Pick<SessionsListOptions, "status" | "agent" | "org">,
): string {
  if (target.kind === "memory") {
    return "no sessions: a memory: store lives in one process and starts empty in each command (list a sqlite: or postgres:// store)\n";
  }
  const filtered = filter.status !== undefined || filter.agent !== undefined || filter.org !== undefined;
  return filtered ? `no sessions in ${target.label} match the filter\n` : `no sessions in ${target.label}\n`;
}
