// `leash keygen --out PATH`: a new Ed25519 signing key for the audit chain, with its public halves beside it.
// Generation and safe writing (mode 0600, no silent overwrite) are @leash/chain's; this names the files.
import { generateKeyPair, KeyFileError, writeKeyFiles } from "@leash/chain";
import type { Command } from "commander";
import { nonEmpty } from "../args.js";
import { CliError, EXIT_BAD_INPUT, firstLine, type Io } from "../io.js";

export interface KeygenOptions {
  readonly out: string;
  readonly force?: boolean;
}

export function runKeygen(options: KeygenOptions, io: Io): number {
  const pair = generateKeyPair();
  let paths: ReturnType<typeof writeKeyFiles>;
  try {
    paths = writeKeyFiles(pair, options.out, { overwrite: options.force === true });
  } catch (err) {
    if (KeyFileError.isInstance(err) && err.code === "key_exists") {
      throw new CliError(
        `${err.path} exists; pass --force to replace the key files (a chain signed with the old key then needs its saved public key to verify)`,
        EXIT_BAD_INPUT,
        { cause: err },
      );
    }
    throw new CliError(`keygen: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
  }
  io.stdout(
    `wrote ${paths.privateKeyPath} (private, mode 0600), ${paths.publicKeyPath}, ${paths.publicKeyHexPath}\npublic key ${pair.publicKeyHex}\nkey id ${pair.keyId}\n`,
  );
  return 0;
}

export function registerKeygen(program: Command, io: Io, setExit: (code: number) => void): void {
  program
    .command("keygen")
    .description(
      "create an Ed25519 signing key for the audit chain: PATH (private) and its public halves (NAME.key → NAME.pub.pem, NAME.pub.hex)",
    )
    .requiredOption("--out <path>", "where to write the private key (mode 0600)", nonEmpty)
    .option("--force", "replace existing key files")
    .addHelpText(
      "after",
      `
Store commands sign with it through --key-file PATH (or LEASH_SIGNING_KEY holding the PEM);
verifiers need only the .pub.hex file (\`leash verify --pubkey\`, \`leash receipt verify --pubkey\`).
To move a running chain to a new key, use \`leash key rotate\`.
Exit status: 0 written, 2 the files exist (without --force) or cannot be written.`,
    )
    .action((options: KeygenOptions) => {
      setExit(runKeygen(options, io));
    });
}
