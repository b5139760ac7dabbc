// `leash export`: streams a store's audit chain out as JSON Lines, or as the SP/1.0 reference ledger.
// It verifies nothing (run `leash verify` first); the formats are @leash/chain's toJsonl and toShackleLedger.
import { type FileHandle, open, rename, rm } from "node:fs/promises";
import { ChainError, toJsonl, toShackleLedger } from "@leash/chain";
import { type Command, Option } from "commander";
import { storeEntries } from "../chain-io.js";
import { addStoreOptions, loadSettings, type StoreOptions } from "../context.js";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine, type Io } from "../io.js";
import { resolveSigner } from "../keys.js";
import { openExistingStore, storeFailure } from "../store.js";

export interface ExportOptions extends StoreOptions {
  readonly format: "jsonl" | "shackle-ledger";
  readonly out?: string;
  readonly keyFile?: string;
}

/** Lines are written in batches of this many, to stdout or the file. */
const BATCH = 1000;

export async function runExport(options: ExportOptions, io: Io): Promise<number> {
  const { target } = await loadSettings(options, io);
  // The ledger signs every record; an ephemeral key would make those signatures worthless.
  const signer =
    options.format === "shackle-ledger"
      ? resolveSigner({ keyFile: options.keyFile }, io, { ephemeral: false }).signer
      : undefined;
  const substrate = await openExistingStore(target);
  const tmp = options.out === undefined ? undefined : `${options.out}.tmp-${process.pid}`;
  let file: FileHandle | undefined;
  try {
    if (tmp !== undefined) {
      try {
        file = await open(tmp, "wx");
      } catch (err) {
        throw new CliError(`cannot write ${options.out}: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
      }
    }
    const entries = storeEntries(substrate);
    const lines = options.format === "jsonl" ? toJsonl(entries) : toShackleLedger(entries, signer);
    let batch: string[] = [];
    const flush = async () => {
      if (batch.length === 0) return;
      const text = batch.join("");
      batch = [];
      if (file === undefined) io.stdout(text);
      else await file.write(text);
    };
    try {
      for await (const line of lines) {
        batch.push(line);
        if (batch.length >= BATCH) await flush();
      }
    } catch (err) {
      // toShackleLedger refuses an entry whose body is not a v1 body: the chain is damaged.
      if (!ChainError.isInstance(err)) throw err;
      throw new CliError(`export: ${firstLine(err)}; run \`leash verify\``, EXIT_REFUSED, { cause: err });
    }
    await flush();
    if (file !== undefined && tmp !== undefined && options.out !== undefined) {
      await file.close();
      file = undefined;
      await rename(tmp, options.out);
    }
    return 0;
  } catch (err) {
    throw storeFailure(err, target.url) ?? err;
  } finally {
    await file?.close().catch(() => undefined);
    if (tmp !== undefined) await rm(tmp, { force: true }).catch(() => undefined);
    await substrate.close().catch(() => undefined);
  }
}

export function registerExport(program: Command, io: Io, setExit: (code: number) => void): void {
  addStoreOptions(
    program
      .command("export")
      .description("stream the store's audit chain, one JSON entry per line (stdout, or --out FILE)")
      .addOption(
        new Option(
          "--format <format>",
          "jsonl (the stored entries) or shackle-ledger (the SP/1.0 reference ledger)",
        )
          .choices(["jsonl", "shackle-ledger"])
          .makeOptionMandatory(),
      )
      .option("--out <file>", "write to FILE (replaced only once the export is complete) instead of stdout")
      .option(
        "--key-file <path>",
        "shackle-ledger only: the private key that signs each record (default: $LEASH_SIGNING_KEY)",
      ),
  )
    .addHelpText(
      "after",
      `
jsonl lines hold every stored column with the body parsed; \`leash verify --file\` checks them offline.
shackle-ledger records carry prev_hash, record_hash, and a fresh Ed25519 signature over record_hash
with verify_key, so they need the signing key. Export does not verify: run \`leash verify\` first.
The store is only read: nothing is created or migrated.
Exit status: 0 exported, 1 a store error or an entry that cannot be exported, 2 bad flags, key, file or store URL.`,
    )
    .action(async (options: ExportOptions) => {
      setExit(await runExport(options, io));
    });
}
