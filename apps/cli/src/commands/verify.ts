// `leash verify`: checks a whole audit chain — a store's or an exported JSONL file's — against trusted keys.
// The judgement is @leash/chain's verifyChain; this streams the entries in, and prints one line and a status.
import { rename, writeFile } from "node:fs/promises";
import { type Checkpoint, checkpointOf, type VerifyChainResult, verifyChain } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { findRollback, rollbackMessage } from "@leash/engine";
import {
  defaultStateDir,
  type ReplayResult,
  replayChain,
  stateCheckpointStore,
  storedParams,
} from "@leash/recovery";
import { type Command, Option } from "commander";
import { jsonlEntries, progressBar, storeCount, storeEntries } from "../chain-io.js";
import { addStoreOptions, loadSettings, type StoreOptions } from "../context.js";
import { checkedEvents, type FoundViolation, violationFirst, violationLine } from "../event-check.js";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine, type Io, parseJson, readSource } from "../io.js";
import { collect, keyFailure, loadPublicKeys } from "../keys.js";
import { openExistingStore, storeFailure } from "../store.js";
import { StoredParamsCheck } from "../stored-params.js";

export interface VerifyOptions extends StoreOptions {
  readonly file?: string;
  readonly pubkey?: string[];
  readonly checkpoint?: string;
  readonly writeCheckpoint?: string;
  readonly stateDir?: string;
  readonly verifier: "node" | "noble";
  readonly replay?: boolean;
}

const HASH = /^[0-9a-f]{64}$/;

/** A checkpoint file: {"count": N, "head_hash": "<64 hex>"}, as --write-checkpoint writes it. */
export async function readCheckpoint(path: string, io: Io): Promise<Checkpoint> {
  const value = parseJson(await readSource(path, io), path) as Record<string, unknown> | null;
  const count = value?.count;
  const head = value?.head_hash;
  if (
    typeof value !== "object" ||
    value === null ||
    typeof count !== "number" ||
    !Number.isSafeInteger(count) ||
    count < 0 ||
    typeof head !== "string" ||
    !HASH.test(head)
  ) {
    throw new CliError(
      `${path}: not a checkpoint (expected {"count": N, "head_hash": "<64 lowercase hex>"})`,
      EXIT_BAD_INPUT,
    );
  }
  return { count, head_hash: head };
}

/** Written beside the target and renamed over it, so a reader never sees half a checkpoint. */
async function writeCheckpoint(path: string, checkpoint: Checkpoint): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    await writeFile(tmp, `${JSON.stringify(checkpoint)}\n`);
    await rename(tmp, path);
  } catch (err) {
    throw new CliError(`cannot write checkpoint ${path}: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
  }
}

/** The line `--replay` adds: the chain's verdicts and state follow from its entries, or where they stop. */
export function replayLine(result: ReplayResult): string {
  if (result.ok) {
    const proved =
      result.proved_from === 0
        ? "every verdict re-derived"
        : `verdicts re-derived from entry ${result.proved_from} (earlier decisions record no replay inputs)`;
    return `REPLAY OK: ${result.count} entries replayed, ${result.verdicts_checked} decisions, ${proved}\n`;
  }
  const m = result.mismatch!;
  const session = m.session_id === null ? "" : `, session ${m.session_id}`;
  return `REPLAY FAILED at entry ${m.index} (seq ${m.seq}${session}): ${m.kind} ${m.field}: expected ${JSON.stringify(m.expected)}, recorded ${JSON.stringify(m.recorded)}\n`;
}

/** Buffers a one-shot stream (stdin) while it is verified, so replay can read it a second time. */
async function* kept(
  entries: AsyncIterable<ChainEntryRecord>,
  into: ChainEntryRecord[],
): AsyncGenerator<ChainEntryRecord> {
  for await (const entry of entries) {
    into.push(entry);
    yield entry;
  }
}

/** The one line verify ends with. */
export function resultLine(
  result: VerifyChainResult,
  describe?: (index: number) => string | undefined,
): string {
  if (result.ok) return `OK: ${result.count} entries verified, head ${result.head_hash}\n`;
  const { index, seq, kind } = result.failure;
  const message = describe?.(index) ?? result.failure.message;
  return `FAILED at entry ${index} (seq ${seq ?? "unknown"}): ${kind}: ${message}\n`;
}

/** The state directory's checkpoint for `url` (--state-dir, else the default), if one was written. */
async function stateCheckpoint(
  options: VerifyOptions,
  url: string,
  io: Io,
): Promise<{ checkpoint: Checkpoint; location: string } | undefined> {
  let store: ReturnType<typeof stateCheckpointStore>;
  try {
    store = stateCheckpointStore(options.stateDir ?? defaultStateDir(io.env), url);
  } catch (err) {
    // The default directory cannot be made (a read-only home): nothing was ever kept there.
    if (options.stateDir === undefined) return undefined;
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
  if (store === null) return undefined;
  let checkpoint: Checkpoint | null;
  try {
    checkpoint = await store.read();
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
  return checkpoint === null || checkpoint.count === 0 ? undefined : { checkpoint, location: store.location };
}

/** --store, --file, --checkpoint and --state-dir that cannot go together. */
function refuseConflictingSources(options: VerifyOptions): void {
  if (options.file !== undefined && options.store !== undefined) {
    throw new CliError("give --store or --file, not both", EXIT_BAD_INPUT);
  }
  if (options.checkpoint !== undefined && options.stateDir !== undefined) {
    throw new CliError("give --checkpoint FILE or --state-dir DIR, not both", EXIT_BAD_INPUT);
  }
  if (options.file !== undefined && options.stateDir !== undefined) {
    throw new CliError("--state-dir checks a store (--store), not a file", EXIT_BAD_INPUT);
  }
}

/** The chain to verify: its entries, how to read them again, and the store they come from, if any. */
interface ChainSource {
  entries: AsyncIterable<ChainEntryRecord>;
  /** The entries again, for --replay (a file or the store is read twice; stdin is kept in memory). */
  again: () => Promise<Iterable<ChainEntryRecord> | AsyncIterable<ChainEntryRecord>>;
  describe?: (index: number) => string | undefined;
  substrate?: Substrate;
  url?: string;
  checkpoint: Checkpoint | undefined;
}

/** A JSONL file (or stdin, "-") of entries. */
async function fileSource(
  options: VerifyOptions,
  file: string,
  checkpoint: Checkpoint | undefined,
  io: Io,
): Promise<ChainSource> {
  const source = await jsonlEntries(file, io);
  let entries = source.entries;
  let again: ChainSource["again"];
  if (file === "-") {
    const buffered: ChainEntryRecord[] = [];
    if (options.replay === true) entries = kept(entries, buffered);
    again = async () => buffered;
  } else {
    again = async () => (await jsonlEntries(file, io)).entries;
  }
  const label = file === "-" ? "<stdin>" : file;
  const describe = (index: number) => {
    const line = source.unreadable.get(index);
    return line === undefined ? undefined : `line ${line} of ${label} is not a chain entry`;
  };
  return { entries, again, describe, checkpoint };
}

/**
 * The store's chain, checked first against the checkpoint `leash serve` keeps for it (when none was
 * given): a rolled-back store prints its FAILED line and gives the exit status instead of a source.
 */
async function storeSource(
  options: VerifyOptions,
  given: Checkpoint | undefined,
  io: Io,
): Promise<ChainSource | number> {
  const { target } = await loadSettings(options, io);
  const url = target.url;
  let checkpoint = given;
  // The checkpoint `leash serve` keeps for this store, when there is one and none was given.
  const state = checkpoint === undefined ? await stateCheckpoint(options, target.url, io) : undefined;
  const opened = await openExistingStore(target);
  if (state !== undefined) {
    checkpoint = state.checkpoint;
    const rollback = await findRollback(opened, state.checkpoint).catch(() => null);
    if (rollback !== null) {
      await opened.close().catch(() => undefined);
      const at = state.checkpoint.count - 1;
      io.stdout(
        resultLine({
          ok: false,
          count_verified: 0,
          failure: {
            index: at,
            seq: at,
            kind: "truncated",
            message: rollbackMessage(rollback, state.location),
          },
        }),
      );
      return EXIT_REFUSED;
    }
  }
  return {
    entries: storeEntries(opened),
    again: async () => storeEntries(opened),
    substrate: opened,
    url,
    checkpoint,
  };
}

/** Verifies the source (signatures, events, stored params), then replays it with --replay; closes its store. */
async function verifySource(
  source: ChainSource,
  options: VerifyOptions,
  publicKeys: string[],
  io: Io,
): Promise<number> {
  const { entries, again, describe, substrate, url, checkpoint } = source;
  let total = 0;
  try {
    if (substrate !== undefined && io.stderrIsTTY) total = await storeCount(substrate);
    const bar = progressBar(io, "leash verify:", total);
    let result: VerifyChainResult;
    const found: { first: FoundViolation | null } = { first: null };
    const stored = new StoredParamsCheck();
    try {
      result = await verifyChain(checkedEvents(stored.watch(entries), found), {
        publicKeys,
        verifier: options.verifier,
        onProgress: (n) => bar.update(n),
        ...(checkpoint === undefined ? {} : { checkpoint }),
      });
    } catch (err) {
      throw keyFailure(err, "verify");
    } finally {
      bar.done();
    }
    const violation = violationFirst(result, found.first);
    if (violation !== null) {
      io.stdout(violationLine(violation));
      return EXIT_REFUSED;
    }
    const params = substrate === undefined ? undefined : storedParams(substrate);
    // Params stored by digest are part of what the entries sign: missing or altered, the chain fails.
    const problem = result.ok ? await stored.problem(params) : null;
    if (problem !== null) {
      io.stdout(`FAILED at entry ${problem.index} (seq ${problem.seq}): params: ${problem.message}\n`);
      return EXIT_REFUSED;
    }
    if (result.ok && options.writeCheckpoint !== undefined) {
      await writeCheckpoint(options.writeCheckpoint, checkpointOf(result));
    }
    io.stdout(resultLine(result, describe));
    if (!result.ok) return EXIT_REFUSED;
    if (options.replay === true) {
      // Only a chain whose signatures verify is worth replaying: what it proves rests on them.
      const replayed = await replayChain(await again(), params === undefined ? {} : { params });
      io.stdout(replayLine(replayed));
      if (!replayed.ok) return EXIT_REFUSED;
    }
    return 0;
  } catch (err) {
    throw (url === undefined ? undefined : storeFailure(err, url)) ?? err;
  } finally {
    await substrate?.close().catch(() => undefined);
  }
}

export async function runVerify(options: VerifyOptions, io: Io): Promise<number> {
  refuseConflictingSources(options);
  const publicKeys = loadPublicKeys(options.pubkey).map((k) => k.publicKeyHex);
  const checkpoint =
    options.checkpoint === undefined ? undefined : await readCheckpoint(options.checkpoint, io);
  const source =
    options.file !== undefined
      ? await fileSource(options, options.file, checkpoint, io)
      : await storeSource(options, checkpoint, io);
  if (typeof source === "number") return source;
  return verifySource(source, options, publicKeys, io);
}

export function registerVerify(program: Command, io: Io, setExit: (code: number) => void): void {
  addStoreOptions(
    program
      .command("verify")
      .description(
        "verify the whole audit chain (hashes, links, Ed25519 signatures, key rotations); print one line",
      )
      .option(
        "--file <jsonl>",
        "verify an exported chain (`leash export --format jsonl`) instead of a store; - for stdin",
      )
      .option(
        "--pubkey <key>",
        "a trusted public key: 64 hex characters, or a .pub.hex / .pub.pem file (repeatable)",
        collect,
      )
      .option(
        "--checkpoint <file>",
        'a {"count","head_hash"} checkpoint: a shorter or rewritten chain fails as truncated',
      )
      .option("--write-checkpoint <file>", "after a successful verify, write the chain's checkpoint there")
      .option(
        "--state-dir <dir>",
        "the state directory `leash serve` keeps its checkpoints in (default: $LEASH_STATE_DIR, else $XDG_STATE_HOME/leash, else ~/.local/state/leash); used without --checkpoint",
      )
      .option(
        "--replay",
        "also re-derive every session's state, budget and verdict from the entries (decide, feedback, budget arithmetic)",
      )
      .addOption(
        new Option(
          "--verifier <impl>",
          "node (node:crypto) or noble (pure JavaScript, the browser code path)",
        )
          .choices(["node", "noble"])
          .default("node"),
      ),
  )
    .addHelpText(
      "after",
      `
Trust the key that signed the chain's first entry; later keys are trusted through their signed
key_rotation entries. Entries are read in pages of 1,000, each in its own short read transaction.
Keep checkpoints where the store's writers cannot reach them: without one, a deleted tail looks like
a shorter chain. With --store and no --checkpoint, the checkpoint \`leash serve\` keeps for that store
in its state directory is used when there is one: a restored older copy fails as truncated, naming
both heads. The store is only read: nothing is created or migrated.

Output: one line on stdout,
  OK: <n> entries verified, head <hash>
  FAILED at entry <index> (seq <seq>): <kind>: <message>
with <kind> one of edited, removed, reordered, inserted, truncated, bad_signature, unknown_key,
or schema: an entry whose data its kind's JSON Schema refuses (docs/chain-format.md), or a kind
no schema describes,
  FAILED at entry <index> (seq <seq>): schema: <entry kind> v<version> <JSON pointer> <message>
With --replay, once the signatures verify, a second line:
  REPLAY OK: <n> entries replayed, <d> decisions, every verdict re-derived
  REPLAY FAILED at entry <index> (seq <seq>, session <id>): <kind> <field>: expected <json>, recorded <json>
(decisions written before entries recorded their params are folded on their recorded verdict; the
line then says from which entry on every verdict was re-derived).
Exit status: 0 the whole chain verifies, 1 it does not (or a store error), 2 bad flags, keys, files or store URL.`,
    )
    .action(async (options: VerifyOptions) => {
      setExit(await runVerify(options, io));
    });
}
