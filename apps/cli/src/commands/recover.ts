// `leash recover`: the startup check of a store — verify the chain, reconcile the outbox, charge leaked holds.
// The checks and repairs are @leash/recovery's; this picks keys and files, prints its report, and sets the status.
import { existsSync, statSync } from "node:fs";
import { userInfo } from "node:os";
import { dirname } from "node:path";
import { SIGNING_KEY_ENV, type Signer } from "@leash/chain";
import { SubstrateError } from "@leash/core";
import {
  type CheckpointStore,
  defaultStateDir,
  fileCheckpointStore,
  formatReport,
  RecoveryError,
  type RecoveryReport,
  recover,
  stateCheckpointStore,
} from "@leash/recovery";
import type { Command } from "commander";
import { addStoreOptions, loadSettings, type StoreOptions } from "../context.js";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine, type Io } from "../io.js";
import { addKeyOptions, collect, type KeyOptions, loadPublicKeys, resolveSigner } from "../keys.js";
import { openExistingStore, type StoreTarget, scrubSecrets } from "../store.js";

export interface RecoverCommandOptions extends StoreOptions, KeyOptions {
  readonly pubkey?: string[];
  readonly checkpoint?: string;
  readonly repair?: boolean;
  readonly requeueDead?: boolean;
  readonly stateDir?: string;
  readonly acceptRollback?: boolean;
  readonly operator?: string;
}

/** Problems that are the caller's input (a wrong key, a checkpoint file that is not one), not the store's state. */
const INPUT_PROBLEMS = new Set<string>(["signer_mismatch", "checkpoint_unreadable"]);

/** The signer when one is given (flag or LEASH_SIGNING_KEY); without one recovery only counts what it would do. */
function optionalSigner(options: RecoverCommandOptions, io: Io): Signer | undefined {
  const fromEnv = io.env[SIGNING_KEY_ENV];
  const given =
    options.keyFile !== undefined ||
    options.ephemeralKey === true ||
    (fromEnv !== undefined && fromEnv.trim() !== "");
  return given ? resolveSigner(options, io).signer : undefined;
}

/**
 * --checkpoint FILE when given, else the checkpoint `leash serve` keeps for this store in its state
 * directory (--state-dir, default $XDG_STATE_HOME/leash): the same file, so a restored older copy that
 * serve would refuse fails here too.
 */
function checkpointStore(options: RecoverCommandOptions, url: string, io: Io): CheckpointStore | undefined {
  const path = options.checkpoint;
  if (path === undefined) {
    try {
      return stateCheckpointStore(options.stateDir ?? defaultStateDir(io.env), url) ?? undefined;
    } catch (err) {
      throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
    }
  }
  const dir = dirname(path);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) {
    throw new CliError(`cannot keep checkpoint ${path}: no such directory ${dir}`, EXIT_BAD_INPUT);
  }
  if (existsSync(path) && !statSync(path).isFile()) {
    throw new CliError(`cannot keep checkpoint ${path}: not a file`, EXIT_BAD_INPUT);
  }
  return fileCheckpointStore(path);
}

/** A failure to run recovery at all: bad options are exit 2, a store that fails exit 1, never a stack. */
function recoveryFailure(err: unknown, target: StoreTarget): unknown {
  if (!RecoveryError.isInstance(err)) return err;
  const status = err.code === "invalid_argument" ? EXIT_BAD_INPUT : EXIT_REFUSED;
  const code = SubstrateError.isInstance(err.cause) ? `store error (${err.cause.code})` : err.code;
  return new CliError(`${scrubSecrets(firstLine(err), target.url)} (${code})`, status, { cause: err });
}

/** Why the store is not fit to serve, as the one error line; undefined when it is. */
function verdict(report: RecoveryReport, repair: boolean): CliError | undefined {
  if (!report.ok) {
    const first = report.problems.find((p) => !INPUT_PROBLEMS.has(p.code)) ?? report.problems[0];
    const message = first?.message ?? "recovery failed";
    const status = report.problems.every((p) => INPUT_PROBLEMS.has(p.code)) ? EXIT_BAD_INPUT : EXIT_REFUSED;
    const more = report.problems.length > 1 ? ` (and ${report.problems.length - 1} more, listed above)` : "";
    const inspect = status === EXIT_REFUSED ? `; inspect with \`${report.inspect}\`` : "";
    return new CliError(`${message}${more}${inspect}`, status);
  }
  const reenqueued = new Set(report.outbox.reenqueued);
  const unqueued = report.outbox.missing.filter((seq) => !reenqueued.has(seq));
  if (unqueued.length > 0) {
    const entries = unqueued.length === 1 ? "1 chain entry is" : `${unqueued.length} chain entries are`;
    const fix = repair ? "" : ": run `leash recover --repair` to queue them again";
    return new CliError(
      `${entries} missing from the outbox and would never be relayed (first seq ${unqueued[0]})${fix}`,
      EXIT_REFUSED,
    );
  }
  return undefined;
}

export async function runRecover(options: RecoverCommandOptions, io: Io): Promise<number> {
  // Recovery only requeues as part of a repair; silently doing nothing would look like success.
  if (options.requeueDead === true && options.repair !== true) {
    throw new CliError("--requeue-dead is a repair: give --repair too", EXIT_BAD_INPUT);
  }
  const { target } = await loadSettings(options, io);
  const publicKeys = loadPublicKeys(options.pubkey).map((k) => k.publicKeyHex);
  const signer = optionalSigner(options, io);
  if (options.checkpoint !== undefined && options.stateDir !== undefined) {
    throw new CliError("give --checkpoint FILE or --state-dir DIR, not both", EXIT_BAD_INPUT);
  }
  const checkpoint = checkpointStore(options, target.url, io);
  if (options.acceptRollback === true && signer === undefined) {
    throw new CliError(
      "--accept-rollback records a signed entry: give the signing key (--key-file or $LEASH_SIGNING_KEY)",
      EXIT_BAD_INPUT,
    );
  }
  const operatorId = options.operator ?? userInfo().username;
  const substrate = await openExistingStore(target);
  try {
    let report: RecoveryReport;
    try {
      report = await recover(substrate, {
        publicKeys,
        repair: options.repair === true,
        requeueDead: options.requeueDead === true,
        storeUrl: target.url,
        ...(signer === undefined ? {} : { signer }),
        ...(checkpoint === undefined ? {} : { checkpointStore: checkpoint }),
        ...(options.acceptRollback === true ? { acceptRollback: { operatorId } } : {}),
      });
    } catch (err) {
      throw recoveryFailure(err, target);
    }
    io.stdout(formatReport(report));
    const failed = verdict(report, options.repair === true);
    if (failed !== undefined) throw failed;
    return 0;
  } finally {
    await substrate.close().catch(() => undefined);
  }
}

export function registerRecover(program: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    addStoreOptions(
      program
        .command("recover")
        .description(
          "check a store before serving from it: verify the chain, reconcile the outbox, charge leaked budget holds at their estimate",
        )
        .option(
          "--pubkey <key>",
          "a trusted public key: 64 hex characters, or a .pub.hex / .pub.pem file (repeatable)",
          collect,
        )
        .option(
          "--checkpoint <file>",
          'a {"count","head_hash"} checkpoint: verified against, then replaced once the store passes',
        )
        .option(
          "--state-dir <dir>",
          "where `leash serve` keeps the last head it signed, one checkpoint per store (default: $LEASH_STATE_DIR, else $XDG_STATE_HOME/leash, else ~/.local/state/leash)",
        )
        .option(
          "--accept-rollback",
          "the store is an older copy restored on purpose: accept a chain behind or forked from the checkpoint, with a signed rollback_accepted entry (needs the signing key)",
        )
        .option(
          "--operator <id>",
          "who accepts the rollback, recorded in its entry (default: the OS user name)",
        )
        .option(
          "--repair",
          "queue chain entries the outbox lacks again, and (with a signing key) rebuild state tables that disagree with the replayed chain",
        )
        .option(
          "--requeue-dead",
          "with --repair: move DEAD outbox items back to PENDING, attempts reset (once their sink is fixed)",
        ),
    ),
  )
    .addHelpText(
      "after",
      `
In order: verifies the whole audit chain against the trusted keys (and the checkpoint, so a deleted
tail is caught); checks that every outbox item names a chain entry and every entry has an item (with
--repair, missing items are queued again; entries are never touched); counts relay leases and DEAD
items (with --repair --requeue-dead, moves the DEAD ones back to PENDING for the relay, attempts reset
and their last error kept: for once the sink that refused them is fixed); with a signing key
(--key-file or $LEASH_SIGNING_KEY, which must be the chain's key in force) charges budget holds past
their TTL at their estimate (settled_by_expiry) and marks sessions STALE after 3 missed 30 s heartbeats, each with a signed chain entry, and
without one only counts them; and, when all is well, writes the checkpoint.
Before any of those writes it replays the verified chain (decide, feedback, the budget arithmetic) and
compares the state tables with it: sessions' state, counters and circuit flag, nonces, budget
accounts' spent/reserved and the holds. A difference (a hand-edited spent_usd, say) fails closed
(snapshot_mismatch); with --repair and the signing key the differing rows are rewritten from the chain
and a signed "snapshot_repaired" entry records which. An entry whose verdict or state does not follow
from the ones before it fails as replay_mismatch.
Nothing is written to a store whose chain fails. Keep the checkpoint where the store's writers cannot
reach it. Without --checkpoint, the checkpoint is the one \`leash serve\` keeps in its state directory:
a store behind it or forked from it (an older copy restored) fails as chain_rolled_back, naming both
heads, until --accept-rollback records the restore in a signed entry; then serve starts again. The store must exist and be migrated: recover creates nothing.

Output: the report on stdout, "recovery OK …" or "recovery FAILED …" first; on failure one line on
stderr saying what failed, where (seq), and the \`leash verify\` command to inspect it with.
Exit status: 0 the store is consistent (after the repairs, with --repair), 1 it is not (the chain does
not verify or does not replay, the outbox names entries the chain lacks, entries are missing from the
outbox without --repair, the state tables disagree with the chain) or a store error, 2 bad flags, keys, checkpoint file or store URL, or a signing key that is
not the chain's key in force.`,
    )
    .action(async (options: RecoverCommandOptions) => {
      setExit(await runRecover(options, io));
    });
}
