// `leash migrate`: creates or upgrades a store's schema and says what it did (from which version to which).
// It never downgrades or drops anything; the substrates' migrations only ever add.
import type { Command } from "commander";
import { addStoreOptions, loadSettings, type StoreOptions } from "../context.js";
import type { Io } from "../io.js";
import { connectStore, latestSchemaVersion, migrateStore, readSchemaVersion } from "../store.js";

export async function runMigrate(options: StoreOptions, io: Io): Promise<number> {
  const { target } = await loadSettings(options, io);
  const latest = latestSchemaVersion(target.kind);
  if (latest === null) {
    // Still open it, so a bad memory: URL fails the same way everywhere.
    const substrate = await connectStore(target);
    await migrateStore(target, substrate);
    await substrate.close();
    io.stdout(`${target.label} holds nothing between runs; there is no schema to migrate\n`);
    return 0;
  }
  // Read before opening: opening a SQLite path creates the file, which would hide "created".
  const before = await readSchemaVersion(target);
  const substrate = await connectStore(target);
  try {
    await migrateStore(target, substrate);
  } finally {
    await substrate.close().catch(() => undefined);
  }
  const after = await readSchemaVersion(target);
  if (before === after) {
    io.stdout(`${target.label} is already at schema version ${after}; nothing to do\n`);
  } else if (before === 0) {
    io.stdout(`created the Leash schema (version ${after}) in ${target.label}\n`);
  } else {
    io.stdout(`upgraded ${target.label} from schema version ${before} to ${after}\n`);
  }
  return 0;
}

export function registerMigrate(program: Command, io: Io, setExit: (code: number) => void): void {
  addStoreOptions(
    program
      .command("migrate")
      .description("create or upgrade the store's schema and print what was done (safe to run again)"),
  )
    .addHelpText(
      "after",
      "\nEvery store command also migrates on open; run this once at deploy time to do it explicitly.\nExit status: 0 done (or nothing to do), 2 bad store URL or the store cannot be opened.",
    )
    .action(async (options: StoreOptions) => {
      setExit(await runMigrate(options, io));
    });
}
