// What every store command shares: the --store/--config options, settings resolution, one engine per run.
// It decides nothing and prints nothing; it only turns engine, budget and store errors into one-line CliErrors.

import { type ChainEventData, parseEntryBody, type Signer } from "@leash/chain";
import type { Substrate } from "@leash/core";
import {
  createEngine,
  DEFAULT_CONFIG,
  type Engine,
  type LeashConfigFile,
  LeashError,
  loadConfigFile,
} from "@leash/engine";
import type { CompiledPolicy } from "@leash/policy";
import type { Command } from "commander";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine, type Io } from "./io.js";
import { readOnlySigner } from "./keys.js";
import {
  connectStore,
  migrateStore,
  parseStoreUrl,
  resolveStoreUrl,
  type StoreTarget,
  storeFailure,
} from "./store.js";

export interface StoreOptions {
  readonly store?: string;
  readonly config?: string;
}

export interface Settings {
  readonly target: StoreTarget;
  readonly file: LeashConfigFile;
}

export function addStoreOptions(command: Command): Command {
  return command
    .option(
      "--store <url>",
      "where state lives: sqlite:PATH, postgres://USER@HOST/DB[?schema=NAME] or memory: (default: $LEASH_STORE, else the config file's store, else sqlite:./leash.db)",
    )
    .option("--config <file>", "JSON or YAML config file: {store, guard, reservation_ttl_s}");
}

/** The engine's errors that mean "your input is wrong" rather than "the store said no". */
const BAD_INPUT_CODES = new Set(["config_invalid", "invalid_argument", "invalid_amount"]);

// budget-guard is not a dependency of the CLI; its errors are recognised by the marker it registers globally.
const BUDGET_GUARD_MARKER = Symbol.for("leash.budget-guard.error");

/** An engine or budget refusal as one line with its stable code; undefined for anything unexpected. */
export function engineFailure(err: unknown, url: string): CliError | undefined {
  const coded =
    LeashError.isInstance(err) || (typeof err === "object" && err !== null && BUDGET_GUARD_MARKER in err);
  if (coded) {
    const code = String((err as { code: unknown }).code);
    const status = BAD_INPUT_CODES.has(code) ? EXIT_BAD_INPUT : EXIT_REFUSED;
    return new CliError(`${firstLine(err)} (${code})`, status, { cause: err });
  }
  return storeFailure(err, url);
}

/** Reads --config (when given) and picks the store URL: flag > LEASH_STORE > config file > default. */
export async function loadSettings(options: StoreOptions, io: Io): Promise<Settings> {
  let file = DEFAULT_CONFIG;
  if (options.config !== undefined) {
    try {
      file = await loadConfigFile(options.config);
    } catch (err) {
      // The engine's message names the file and every bad field; exit 2 like any unreadable input.
      throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
    }
  }
  const url = resolveStoreUrl(options.store, io.env, options.config === undefined ? undefined : file.store);
  return { target: parseStoreUrl(url), file };
}

/** Every engine the CLI makes, with the config file's reservation TTL and the chain's signer. */
export function newEngine(
  substrate: Substrate,
  file: LeashConfigFile,
  signer: Signer,
  policy?: CompiledPolicy,
): Engine {
  return createEngine({
    substrate,
    signer,
    reservationTtlMs: file.reservation_ttl_s * 1000,
    ...(policy === undefined ? {} : { policy }),
  });
}

/** The key that must sign the chain's next entry: the head's signer, or the key a head key_rotation names. */
export async function keyInForce(
  substrate: Substrate,
  target: StoreTarget,
): Promise<{ keyId: string; headSeq: number } | null> {
  const found = await substrate.transaction(async (tx) => {
    const head = await tx.chain.head();
    if (head === null) return null;
    const [entry] = await tx.chain.range(head.seq, 1);
    return { head, entry };
  });
  if (found === null) return null;
  const { head, entry } = found;
  const broken = (problem: string) =>
    new CliError(
      `the audit chain in ${target.label} is damaged at its head (seq ${head.seq}): ${problem}; run \`leash verify\``,
      EXIT_REFUSED,
    );
  if (entry === undefined || entry.seq !== head.seq) throw broken("the entry is missing");
  const body = parseEntryBody(entry.body);
  if (typeof body === "string") throw broken(body);
  // parseEntryBody has checked a key_rotation's data (next_key_id is the id of next_public_key).
  const keyId =
    body.kind === "key_rotation"
      ? (body.data as unknown as ChainEventData<"key_rotation">).next_key_id
      : body.key_id;
  return { keyId, headSeq: head.seq };
}

/**
 * Refuses a signer that is not the key in force: entries it signed would break the chain for every
 * verifier (an unknown key), so a wrong --key-file must fail before anything is written.
 */
export async function checkSigner(substrate: Substrate, target: StoreTarget, signer: Signer): Promise<void> {
  const inForce = await keyInForce(substrate, target);
  if (inForce === null || inForce.keyId === signer.keyId) return;
  throw new CliError(
    `the signing key (key id ${signer.keyId}) is not the key the audit chain in ${target.label} is signed with (key id ${inForce.keyId}, head seq ${inForce.headSeq}): give that key, or hand over with \`leash key rotate\``,
    EXIT_BAD_INPUT,
  );
}

/**
 * Opens (and migrates) the store, runs `fn` with an engine on it, and always closes the store, so a
 * pooled postgres connection never keeps the process alive after the command is done. `signer` is the
 * chain's key in force (checked first), or "read-only" for commands that never append to the chain.
 */
export async function withEngine<T>(
  settings: Settings,
  signer: Signer | "read-only",
  fn: (engine: Engine) => Promise<T>,
  policy?: CompiledPolicy,
): Promise<T> {
  const { target, file } = settings;
  const substrate = await connectStore(target);
  await migrateStore(target, substrate);
  try {
    if (signer !== "read-only") await checkSigner(substrate, target, signer);
    return await fn(
      newEngine(substrate, file, signer === "read-only" ? readOnlySigner("this command") : signer, policy),
    );
  } catch (err) {
    throw engineFailure(err, target.url) ?? err;
  } finally {
    await substrate.close().catch(() => undefined);
  }
}

/**
 * JSON on one line: what the store commands print, for `jq` and for scripts. Nanosecond times
 * (every `*_ns` field, at any depth) print as strings of the exact integer the store holds:
 * they are above 2^53, where a JSON number is rounded by the printer and again by every reader.
 */
export function printJson(io: Io, value: unknown): void {
  io.stdout(`${JSON.stringify(value, nanosecondsAsText)}\n`);
}

function nanosecondsAsText(key: string, value: unknown): unknown {
  return typeof value === "number" && key.endsWith("_ns") && Number.isInteger(value)
    ? BigInt(value).toString()
    : value;
}
