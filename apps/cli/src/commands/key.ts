// `leash key rotate`: hands the audit chain over to a new signing key with a key_rotation entry signed by the old one.
// The entry is the engine's (rotateKey); this loads both keys and checks the old one is the key in force.
import type { Command } from "commander";
import { nonEmpty } from "../args.js";
import { addStoreOptions, loadSettings, printJson, type StoreOptions, withEngine } from "../context.js";
import { CliError, EXIT_BAD_INPUT, type Io } from "../io.js";
import { loadSignerFile, resolveSigner } from "../keys.js";

export interface KeyRotateOptions extends StoreOptions {
  readonly keyFile?: string;
  readonly nextKeyFile: string;
  readonly operator: string;
}

export async function runKeyRotate(options: KeyRotateOptions, io: Io): Promise<number> {
  const settings = await loadSettings(options, io);
  const current = resolveSigner({ keyFile: options.keyFile }, io, { ephemeral: false }).signer;
  const next = loadSignerFile(options.nextKeyFile, "--next-key-file");
  if (next.keyId === current.keyId) {
    throw new CliError(
      `--next-key-file holds the key in use (key id ${current.keyId}); make a new one with \`leash keygen\``,
      EXIT_BAD_INPUT,
    );
  }
  await withEngine(settings, current, (engine) => engine.rotateKey(next, options.operator));
  printJson(io, {
    rotated: true,
    previous_key_id: current.keyId,
    key_id: next.keyId,
    public_key: next.publicKeyHex,
    operator_id: options.operator,
  });
  return 0;
}

export function registerKey(program: Command, io: Io, setExit: (code: number) => void): void {
  const key = program.command("key").description("manage the audit chain's signing key");
  addStoreOptions(
    key
      .command("rotate")
      .description("append a signed key_rotation entry: from now on the chain is signed with the next key")
      .option("--key-file <path>", "the current signing key (default: $LEASH_SIGNING_KEY)")
      .requiredOption("--next-key-file <path>", "the new signing key (`leash keygen --out PATH`)", nonEmpty)
      .requiredOption("--operator <name>", "who is rotating the key (recorded in the entry)", nonEmpty),
  )
    .addHelpText(
      "after",
      `
The rotation entry is signed by the current key and names the next one, so verifiers keep trusting
only the first public key (\`leash verify --pubkey OLD.pub.hex\`). Every later command must sign with the
next key; the old one is refused. Prints {"rotated","previous_key_id","key_id","public_key","operator_id"}.
Exit status: 0 rotated, 1 a store error, 2 bad flags, keys (the current key is not the one in force) or store URL.`,
    )
    .action(async (options: KeyRotateOptions) => {
      setExit(await runKeyRotate(options, io));
    });
}
