// What every store command shares: the --store/--config options, settings resolution, one engine per run.
// It decides nothing and prints nothing; it only turns engine, budget and store errors into one-line CliErrors.

import type { Substrate } from "@leash/core";
import {
  createEngine,
  DEFAULT_CONFIG,
  type Engine,
  type LeashConfigFile,
  LeashError,
  loadConfigFile,
} from "@leash/engine";
import type { Command } from "commander";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine, type Io } from "./io.js";
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
const BAD_INPUT_CODES = new Set(["CONFIG_INVALID", "INVALID_ARGUMENT", "invalid_amount", "invalid_argument"]);

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

/** Every engine the CLI makes, with the config file's reservation TTL. */
export function newEngine(substrate: Substrate, file: LeashConfigFile): Engine {
  return createEngine({ substrate, reservationTtlMs: file.reservation_ttl_s * 1000 });
}

/**
 * Opens (and migrates) the store, runs `fn` with an engine on it, and always closes the store, so a
 * pooled postgres connection never keeps the process alive after the command is done.
 */
export async function withEngine<T>(settings: Settings, fn: (engine: Engine) => Promise<T>): Promise<T> {
  const { target, file } = settings;
  const substrate = await connectStore(target);
  await migrateStore(target, substrate);
  try {
    return await fn(newEngine(substrate, file));
  } catch (err) {
    throw engineFailure(err, target.url) ?? err;
  } finally {
    await substrate.close().catch(() => undefined);
  }
}

/** JSON on one line: what the store commands print, for `jq` and for scripts. */
export function printJson(io: Io, value: unknown): void {
  io.stdout(`${JSON.stringify(value)}\n`);
}
