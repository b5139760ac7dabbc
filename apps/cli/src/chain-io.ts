// Reading an audit chain for verify and export: from a store in pages, or from an exported JSONL file.
// It verifies nothing itself (that is @leash/chain's verifyChain); it only streams entries in order.
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { createInterface } from "node:readline";
import { fromJsonl } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { CliError, EXIT_BAD_INPUT, firstLine, type Io } from "./io.js";

/** Entries per read transaction: large enough to be cheap, small enough never to hold a lock for long. */
export const PAGE_SIZE = 1000;

/**
 * The chain in ascending seq, one short read transaction per page, until a page comes back short.
 * Entries appended while it runs are included; a gap in seq is passed on for the verifier to judge.
 */
export async function* storeEntries(
  substrate: Substrate,
  pageSize = PAGE_SIZE,
): AsyncGenerator<ChainEntryRecord> {
  let from = 0;
  for (;;) {
    const page = await substrate.transaction((tx) => tx.chain.range(from, pageSize));
    yield* page;
    if (page.length < pageSize) return;
    from = page[page.length - 1]!.seq + 1;
  }
}

/** The number of stored entries, for a progress bar's total. */
export function storeCount(substrate: Substrate): Promise<number> {
  return substrate.transaction((tx) => tx.chain.count());
}

/** A JSONL export being read back: lines that are not an entry are remembered by stream index. */
export interface JsonlSource {
  readonly entries: AsyncGenerator<ChainEntryRecord>;
  /** Stream index → 1-based line number of each line that could not be read as an entry. */
  readonly unreadable: Map<number, number>;
}

/**
 * The entries of a `leash export --format jsonl` file (or stdin for `-`), one per non-empty line. A line
 * that is not an entry is passed on as a non-object, so the verifier reports it (as "edited") in order.
 */
export async function jsonlEntries(path: string, io: Io): Promise<JsonlSource> {
  let lines: AsyncIterable<string> | Iterable<string>;
  if (path === "-") {
    lines = (await io.readStdin()).split(/\r?\n/);
  } else {
    try {
      if (!(await stat(path)).isFile()) throw new CliError(`cannot read ${path}: not a file`, EXIT_BAD_INPUT);
    } catch (err) {
      if (err instanceof CliError) throw err;
      const code = (err as { code?: unknown }).code;
      const problem = code === "ENOENT" ? "no such file" : firstLine(err);
      throw new CliError(`cannot read ${path}: ${problem}`, EXIT_BAD_INPUT, { cause: err });
    }
    lines = createInterface({ input: createReadStream(path, { encoding: "utf8" }), crlfDelay: Infinity });
  }
  const unreadable = new Map<number, number>();
  async function* entries(): AsyncGenerator<ChainEntryRecord> {
    let lineNo = 0;
    let index = 0;
    for await (const line of lines) {
      lineNo++;
      if (line.trim() === "") continue;
      let entry: ChainEntryRecord;
      try {
        entry = fromJsonl(line);
      } catch {
        unreadable.set(index, lineNo);
        entry = null as unknown as ChainEntryRecord;
      }
      index++;
      yield entry;
    }
  }
  return { entries: entries(), unreadable };
}

/** A one-line progress bar on stderr, for terminals only; `done()` clears it. */
export function progressBar(io: Io, label: string, total: number): { update(n: number): void; done(): void } {
  if (!io.stderrIsTTY || total <= 0) return { update: () => undefined, done: () => undefined };
  const width = 30;
  let shown = false;
  return {
    update(n) {
      const ratio = Math.min(1, n / total);
      const filled = Math.round(ratio * width);
      io.stderr(
        `\r\x1b[K${label} [${"#".repeat(filled)}${".".repeat(width - filled)}] ${n}/${total} (${Math.floor(ratio * 100)} %)`,
      );
      shown = true;
    },
    done() {
      if (shown) io.stderr("\r\x1b[K");
    },
  };
}
