// `leash tail`: the store's decisions one line each (time, session, tool, verdict, reason), and with
// --follow each new one as it is committed. It reads the chain; it verifies nothing (`leash verify` does).
import type { ChainEntryRecord, Substrate } from "@leash/core";
import type { Command } from "commander";
import { nonEmpty, nonNegativeInteger, positiveInteger } from "../args.js";
import { type Paint, verdictPainter } from "../colour.js";
import { addStoreOptions, loadSettings, printJson, type StoreOptions } from "../context.js";
import { CliError, EXIT_BAD_INPUT, type Io } from "../io.js";
import { openExistingStore, storeFailure } from "../store.js";

/** Entries read per transaction, backwards for the first lines and forwards while following. */
const PAGE = 500;

export interface TailOptions extends StoreOptions {
  readonly follow?: boolean;
  readonly lines: number;
  readonly session?: string;
  readonly interval: number;
  readonly json?: boolean;
  readonly daemon?: string;
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
  let data: Record<string, unknown>;
  try {
    data = (JSON.parse(entry.body) as { data: Record<string, unknown> }).data;
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

export async function runTail(options: TailOptions, io: Io): Promise<number> {
  if (options.daemon !== undefined) {
    throw new CliError(
      "leash tail reads a store, and the daemon has no tail RPC: give --store the daemon's store URL",
      EXIT_BAD_INPUT,
    );
  }
  const settings = await loadSettings(options, io);
  const substrate = await openExistingStore(settings.target);
  const paint = verdictPainter(io);
  const print = (line: TailLine) => {
    if (options.json === true) printJson(io, line);
    else io.stdout(`${formatLine(line, paint)}\n`);
  };
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
      .description("print a store's decisions one line each: time, session, tool, verdict, reason")
      .option("-f, --follow", "keep printing new decisions as they are committed, until Ctrl-C")
      .option("-n, --lines <n>", "how many of the latest decisions to print first", nonNegativeInteger, 10)
      .option("--session <id>", "only this session's decisions", nonEmpty)
      .option("--interval <ms>", "with --follow: how often to look for new entries", positiveInteger, 500)
      .option("--json", "one JSON object per decision and line (seq, time, session, agent, tool, …)")
      .option("--daemon <socket>", "not supported: the daemon has no tail RPC; use --store with its store"),
  )
    .addHelpText(
      "after",
      `
Verdicts are coloured (ALLOW green, DENY red, HITL yellow) only when stdout is a terminal and NO_COLOR
is unset. It reads the audit chain without verifying it (\`leash verify\` does) and needs no key.
A daemon's decisions: tail the store the daemon writes (\`leash tail --store sqlite:/var/lib/leash.db -f\`).
Exit status: 0 done or stopped, 1 a store error, 2 bad flags, config or store URL (or --daemon).`,
    )
    .action(async (options: TailOptions) => {
      setExit(await runTail(options, io));
    });
}
