// `leash export`: streams a store's audit chain out as JSON Lines, or as the SP/1.0 reference ledger.
// The ledger is signed evidence, so it is written only for a chain that verifies and by the key in force.
import { type FileHandle, mkdtemp, open, rename, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { StringDecoder } from "node:string_decoder";
import { ChainError, type Signer, toJsonl, writeVerifiedShackleLedger } from "@leash/chain";
import type { Substrate } from "@leash/core";
import { type Command, Option } from "commander";
import { storeEntries } from "../chain-io.js";
import { addStoreOptions, loadSettings, type StoreOptions } from "../context.js";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine, type Io } from "../io.js";
import { collect, keyFailure, loadPublicKeys, resolveSigner } from "../keys.js";
import { openExistingStore, storeFailure } from "../store.js";
import { readCheckpoint, resultLine } from "./verify.js";

export interface ExportOptions extends StoreOptions {
  readonly format: "jsonl" | "shackle-ledger";
  readonly out?: string;
  readonly keyFile?: string;
  readonly pubkey?: string[];
  readonly checkpoint?: string;
  readonly verifier?: "node" | "noble";
}

/** Lines are written in batches of this many, to the output file. */
const BATCH = 1000;
/** Bytes per chunk when a finished export is copied to stdout. */
const COPY_CHUNK = 1 << 20;

/** What the shackle-ledger export checks before it signs anything it publishes. */
interface LedgerCheck {
  readonly signer: Signer;
  readonly publicKeys: string[];
  readonly checkpoint?: Awaited<ReturnType<typeof readCheckpoint>>;
  readonly verifier: "node" | "noble";
}

async function ledgerCheck(options: ExportOptions, io: Io): Promise<LedgerCheck | undefined> {
  if (options.format !== "shackle-ledger") {
    if (options.pubkey !== undefined || options.checkpoint !== undefined || options.verifier !== undefined) {
      throw new CliError(
        "--pubkey, --checkpoint and --verifier are for --format shackle-ledger; check a jsonl export with `leash verify --file`",
        EXIT_BAD_INPUT,
      );
    }
    return undefined;
  }
  // The ledger signs every record; an ephemeral key would make those signatures worthless.
  const { signer } = resolveSigner({ keyFile: options.keyFile }, io, { ephemeral: false });
  const publicKeys = loadPublicKeys(options.pubkey).map((k) => k.publicKeyHex);
  const checkpoint =
    options.checkpoint === undefined ? undefined : await readCheckpoint(options.checkpoint, io);
  return {
    signer,
    publicKeys,
    verifier: options.verifier ?? "node",
    ...(checkpoint === undefined ? {} : { checkpoint }),
  };
}

/** Writes the export's lines to `file`; for the ledger, only a verified chain's, else it throws. */
async function writeExport(
  substrate: Substrate,
  file: FileHandle,
  check: LedgerCheck | undefined,
): Promise<void> {
  let batch: string[] = [];
  const flush = async () => {
    if (batch.length === 0) return;
    const text = batch.join("");
    batch = [];
    await file.write(text);
  };
  const write = async (line: string) => {
    batch.push(line);
    if (batch.length >= BATCH) await flush();
  };
  const entries = storeEntries(substrate);
  if (check === undefined) {
    // Params stored by digest go into their entries' lines, so the file replays on its own.
    const params = (hashes: readonly string[]) => substrate.transaction((tx) => tx.chain.params(hashes));
    for await (const line of toJsonl(entries, { params })) await write(line);
  } else {
    let result: Awaited<ReturnType<typeof writeVerifiedShackleLedger>>;
    try {
      result = await writeVerifiedShackleLedger(entries, check, write);
    } catch (err) {
      throw keyFailure(err, "export");
    }
    if (!result.ok && result.reason === "chain") {
      const failed = resultLine({ ok: false, count_verified: 0, failure: result.failure }).trimEnd();
      throw new CliError(
        `export refused: the chain does not verify against the trusted key (${failed}); run \`leash verify\``,
        EXIT_REFUSED,
      );
    }
    if (!result.ok) {
      throw new CliError(`export refused: signing ${result.message}`, EXIT_BAD_INPUT);
    }
  }
  await flush();
}

/** Copies a finished export to stdout in chunks. */
async function copyToStdout(path: string, io: Io): Promise<void> {
  const file = await open(path, "r");
  try {
    const buffer = Buffer.alloc(COPY_CHUNK);
    // A chunk may end inside a multi-byte character: the decoder holds it for the next one.
    const decoder = new StringDecoder("utf8");
    for (;;) {
      const { bytesRead } = await file.read(buffer, 0, COPY_CHUNK, null);
      if (bytesRead === 0) break;
      io.stdout(decoder.write(buffer.subarray(0, bytesRead)));
    }
    const rest = decoder.end();
    if (rest !== "") io.stdout(rest);
  } finally {
    await file.close();
  }
}

export async function runExport(options: ExportOptions, io: Io): Promise<number> {
  const { target } = await loadSettings(options, io);
  const check = await ledgerCheck(options, io);
  const substrate = await openExistingStore(target);
  // Written aside and published only once complete (and, for the ledger, verified): --out is
  // renamed into place; stdout gets a copy of a temporary file. Nothing half-written or unverified escapes.
  let scratch: string | undefined;
  let tmp: string;
  if (options.out === undefined) {
    scratch = await mkdtemp(join(tmpdir(), "leash-export-"));
    tmp = join(scratch, "export");
  } else {
    tmp = `${options.out}.tmp-${process.pid}`;
  }
  let file: FileHandle | undefined;
  try {
    try {
      file = await open(tmp, "wx");
    } catch (err) {
      throw new CliError(`cannot write ${options.out ?? tmp}: ${firstLine(err)}`, EXIT_BAD_INPUT, {
        cause: err,
      });
    }
    try {
      await writeExport(substrate, file, check);
    } catch (err) {
      // The ledger refuses an entry whose body is not a v1 body: the chain is damaged.
      if (!ChainError.isInstance(err)) throw err;
      throw new CliError(`export: ${firstLine(err)}; run \`leash verify\``, EXIT_REFUSED, { cause: err });
    }
    await file.close();
    file = undefined;
    if (options.out === undefined) await copyToStdout(tmp, io);
    else await rename(tmp, options.out);
    return 0;
  } catch (err) {
    throw storeFailure(err, target.url) ?? err;
  } finally {
    await file?.close().catch(() => undefined);
    await rm(scratch ?? tmp, { recursive: true, force: true }).catch(() => undefined);
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
        "shackle-ledger only: the private key that signs each record (default: $LEASH_SIGNING_KEY); it must be the chain's key in force at its head",
      )
      .option(
        "--pubkey <key>",
        "shackle-ledger only: a trusted public key the chain is verified against first, as for `leash verify` (repeatable)",
        collect,
      )
      .option(
        "--checkpoint <file>",
        'shackle-ledger only: a {"count","head_hash"} checkpoint the chain must extend, as for `leash verify`',
      )
      .addOption(
        new Option("--verifier <impl>", "shackle-ledger only: node or noble, as for `leash verify`").choices([
          "node",
          "noble",
        ]),
      ),
  )
    .addHelpText(
      "after",
      `
jsonl lines hold every stored column with the body parsed and created_ns as a decimal string;
\`leash verify --file\` checks them offline (this form and the older one with a numeric created_ns).
shackle-ledger records carry prev_hash, record_hash, and a fresh Ed25519 signature over record_hash
with verify_key. Because a ledger verifier trusts that verify_key, the export first verifies the
whole chain against --pubkey (and --checkpoint), in the same pass, and signs only with the key in
force at the chain's head; otherwise it writes nothing. The ledger proves the records' order and
content and that key's assent; it does not carry the chain's key rotations (keep the chain, or a
jsonl export, for those). The store is only read: nothing is created or migrated.
Exit status: 0 exported, 1 the chain does not verify, a store error or an entry that cannot be
exported, 2 bad flags, keys (a signing key not in force), file or store URL.`,
    )
    .action(async (options: ExportOptions) => {
      setExit(await runExport(options, io));
    });
}
