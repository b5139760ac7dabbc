// `leash tail`: the store's (or, with --daemon, a daemon's) decisions one line each (time, session, tool,
// verdict, reason), and with --follow each new one as it is committed. It verifies nothing (`leash verify` does).

import type { ChainEventData } from "@leash/chain";
import type { TailEntry } from "@leash/client";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import type { Command } from "commander";
import { nonEmpty, nonNegativeInteger, positiveInteger } from "../args.js";
import { type Paint, verdictPainter } from "../colour.js";
import { addStoreOptions, loadSettings, printJson, type StoreOptions } from "../context.js";
import {
  checkDaemonFlags,
  type DaemonTailFlags,
  daemonClient,
  daemonFailure,
  isoTimeOf,
} from "../daemon-tail.js";
import { CliError, EXIT_BAD_INPUT, type Io } from "../io.js";
import { openExistingStore, storeFailure } from "../store.js";

/** Entries read per transaction, backwards for the first lines and forwards while following. */
const PAGE = 500;

export interface TailOptions extends StoreOptions, DaemonTailFlags {
  readonly follow?: boolean;
  readonly lines: number;
  readonly session?: string;
  readonly interval: number;
  readonly json?: boolean;
}

/** One decision as tail prints it. */
export interface TailLine {
  seq: number;
  time: string;
  session_id: string;
  agent_id: string | null;
  tool_name: string | null;
  verdict: string;
  reason: string;
  budget_after_usd: string | null;
}

/** The decision an entry records, or null for any other kind (and for a body that does not parse). */
export function decisionOf(entry: ChainEntryRecord): TailLine | null {
  if (entry.kind !== "decision") return null;
  // Typed as the schema's decision, but read defensively: tail shows entries nobody has verified yet.
  let data: Partial<ChainEventData<"decision">>;
  try {
    data = (JSON.parse(entry.body) as { data: Partial<ChainEventData<"decision">> }).data;
  } catch {
    return null;
  }
  const text = (v: unknown) => (typeof v === "string" ? v : null);
  return {
    seq: entry.seq,
    time: new Date(Math.floor(entry.created_ns / 1e6)).toISOString(),
    session_id: text(data.session_id) ?? entry.session_id ?? "",
    agent_id: text(data.agent_id),
    tool_name: text(data.tool_name),
    verdict: String(data.verdict),
    reason: String(data.reason),
    budget_after_usd: text(data.budget_after_usd),
  };
}

/** A daemon's decision entry as tail prints it: the same fields `decisionOf` reads from the store. */
export function lineOfEntry(entry: TailEntry): TailLine {
  return {
    seq: entry.seq,
    time: isoTimeOf(entry),
    session_id: entry.session_id,
    agent_id: entry.agent_id,
    tool_name: entry.tool_name,
    verdict: String(entry.verdict),
    reason: String(entry.reason),
    budget_after_usd: entry.budget_after_usd,
  };
}

export function formatLine(line: TailLine, paint: Paint): string {
  const verdict = paint(line.verdict.padEnd(5), line.verdict);
  return `${line.time}  ${line.session_id}  ${line.tool_name ?? "(malformed)"}  ${verdict}  ${line.reason}`;
}

/** The last `n` decisions (of one session, when given) in chain order, and the seq to follow from. */
async function lastDecisions(
  substrate: Substrate,
  n: number,
  session: string | undefined,
): Promise<{ lines: TailLine[]; next: number }> {
  const head = await substrate.transaction((tx) => tx.chain.head());
  if (head === null) return { lines: [], next: 0 };
  const found: TailLine[] = [];
  let end = head.seq + 1;
  while (found.length < n && end > 0) {
    const from = Math.max(0, end - PAGE);
    const page = await substrate.transaction((tx) => tx.chain.range(from, end - from));
    const picked = page
      .map(decisionOf)
      .filter((l): l is TailLine => l !== null && (session === undefined || l.session_id === session));
    found.unshift(...picked);
    end = from;
  }
  return { lines: found.slice(Math.max(0, found.length - n)), next: head.seq + 1 };
}

/** Resolves after `ms`, or as soon as `stopped` does. */
function pause(ms: number, stopped: Promise<void>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    }),
    stopped,
  ]).finally(() => clearTimeout(timer));
}

function printerOf(options: TailOptions, io: Io): (line: TailLine) => void {
  const paint = verdictPainter(io);
  return (line) => {
    if (options.json === true) printJson(io, line);
    else io.stdout(`${formatLine(line, paint)}\n`);
  };
}

/** --daemon: the daemon's TailEntries (gRPC) or tail_entries (socket), for the caller's organization. */
async function runDaemonTail(options: TailOptions, io: Io): Promise<number> {
  const client = daemonClient(options);
  const print = printerOf(options, io);
  const stop = new AbortController();
  const off = options.follow === true ? io.onStop(() => stop.abort()) : () => undefined;
  try {
    for await (const entry of client.tail({
      last: options.lines,
      kinds: ["decision"],
      follow: options.follow === true,
      signal: stop.signal,
      ...(options.session === undefined ? {} : { sessionId: options.session }),
    })) {
      print(lineOfEntry(entry));
    }
    return 0;
  } catch (err) {
    throw daemonFailure(err, options.daemon as string);
  } finally {
    off();
    client.close();
  }
}

export async function runTail(options: TailOptions, io: Io, intervalGiven = false): Promise<number> {
  checkDaemonFlags(options);
  if (options.daemon !== undefined) {
    if (options.store !== undefined || options.config !== undefined)
      throw new CliError("give --store/--config (a store) or --daemon (a daemon), not both", EXIT_BAD_INPUT);
    if (intervalGiven)
      throw new CliError(
        "--interval applies to --store: a daemon sends new decisions itself",
        EXIT_BAD_INPUT,
      );
    return runDaemonTail(options, io);
  }
  const settings = await loadSettings(options, io);
  const substrate = await openExistingStore(settings.target);
  const print = printerOf(options, io);
  let stopping = false;
  let stop: () => void = () => undefined;
  const stopped = new Promise<void>((resolve) => {
    stop = resolve;
  });
  const off =
    options.follow === true
      ? io.onStop(() => {
          stopping = true;
          stop();
        })
      : () => undefined;
  try {
    const first = await lastDecisions(substrate, options.lines, options.session);
    for (const line of first.lines) print(line);
    let next = first.next;
    while (options.follow === true && !stopping) {
      const page = await substrate.transaction((tx) => tx.chain.range(next, PAGE));
      for (const entry of page) {
        const line = decisionOf(entry);
        if (line !== null && (options.session === undefined || line.session_id === options.session))
          print(line);
      }
      if (page.length > 0) next = page[page.length - 1]!.seq + 1;
      if (page.length < PAGE) await pause(options.interval, stopped);
    }
    return 0;
  } catch (err) {
    throw storeFailure(err, settings.target.url) ?? err;
  } finally {
    off();
    await substrate.close().catch(() => undefined);
  }
}

export function registerTail(program: Command, io: Io, setExit: (code: number) => void): void {
  addStoreOptions(
    program
      .command("tail")
      .description(
        "print a store's (or a daemon's) decisions one line each: time, session, tool, verdict, reason",
      )
      .option("-f, --follow", "keep printing new decisions as they are committed, until Ctrl-C")
      .option("-n, --lines <n>", "how many of the latest decisions to print first", nonNegativeInteger, 10)
      .option("--session <id>", "only this session's decisions", nonEmpty)
      .option(
        "--interval <ms>",
        "--store with --follow: how often to look for new entries",
        positiveInteger,
        500,
      )
      .option("--json", "one JSON object per decision and line (seq, time, session, agent, tool, …)")
      .option(
        "--daemon <address>",
        "read through a running daemon instead of a store: its Unix socket (a path) or gRPC HOST:PORT",
      )
      .option("--org <id>", "with --daemon: your organization (you see its sessions' decisions only)")
      .option("--hmac-key-file <file>", "--daemon SOCKET: the organization's HMAC key (hex)")
      .option("--hmac-key-id <id>", "--daemon SOCKET: which of the organization's keys it is")
      .option("--tls-ca <file>", "--daemon HOST:PORT: the CA that signed the daemon's certificate (PEM)")
      .option(
        "--tls-cert <file>",
        "--daemon HOST:PORT: your client certificate (PEM; mTLS names the organization)",
      )
      .option("--tls-key <file>", "--daemon HOST:PORT: its private key (PEM)")
      .option(
        "--tls-server-name <name>",
        "--daemon HOST:PORT: the name on the daemon's certificate, if not HOST",
      )
      .option(
        "--grpc-insecure",
        "--daemon HOST:PORT: plaintext gRPC (loopback only; the daemon's --grpc-insecure)",
      ),
  )
    .addHelpText(
      "after",
      `
Verdicts are coloured (ALLOW green, DENY red, HITL yellow) only when stdout is a terminal and NO_COLOR
is unset. It reads the audit chain without verifying it (\`leash verify\` does) and needs no signing key.
With --daemon the daemon reads its own chain and sends the decisions of your organization's sessions
only (the socket: the organization of the HMAC key; gRPC: of your mTLS certificate, or --org as given
with --grpc-insecure on loopback), with new ones
as they are made (--follow); the output is the same as with --store. Examples:
  leash tail --daemon /run/leash/leash.sock --org acme --hmac-key-file acme-k1.hmac --hmac-key-id k1 -f
  leash tail --daemon leash.internal:50051 --org acme --tls-ca ca.pem --tls-cert acme.pem --tls-key acme.key
  leash tail --daemon 127.0.0.1:50051 --org acme --grpc-insecure -n 50 --json
Exit status: 0 done or stopped, 1 a store or daemon error (unreachable, refused, gone while following),
2 bad flags, config or store URL.`,
    )
    .action(async (options: TailOptions, command: Command) => {
      setExit(await runTail(options, io, command.getOptionValueSource("interval") === "cli"));
    });
}
