// `leash hash [FILE|-]`: prints the SP/1.0 argument digest (canonicalHash) of a JSON params value.
// Numbers hash from their text, as the reference's json.loads reads them; it is not the vector seal (see conformance).
import { CanonicalizationError, canonicalHash } from "@leash/core";
import type { Command } from "commander";
import { CliError, firstLine, type Io, parseJsonKeepingText, readSource, sourceLabel } from "../io.js";

/** Exit status for a value that parses but has no canonical form (fail closed, spec §3.8). */
const EXIT_NOT_CANONICAL = 1;

export async function runHash(source: string | undefined, io: Io): Promise<number> {
  const label = sourceLabel(source);
  const params = parseJsonKeepingText(await readSource(source, io), label);
  let digest: string;
  try {
    digest = canonicalHash(params);
  } catch (err) {
    // Only a canonicalization error is the user's input; anything else is a bug and should surface as one.
    if (!CanonicalizationError.isInstance(err)) throw err;
    throw new CliError(`${label}: not canonicalizable (${err.code}): ${firstLine(err)}`, EXIT_NOT_CANONICAL, {
      cause: err,
    });
  }
  io.stdout(`${digest}\n`);
  return 0;
}

export function registerHash(program: Command, io: Io, setExit: (code: number) => void): void {
  program
    .command("hash")
    .description("print the canonical SHA-256 digest of a JSON params value (the canonical_hash of a vector)")
    .argument("[file]", "JSON file holding the params value; `-` or nothing reads stdin")
    .addHelpText("after", "\nExit status: 0 digest printed, 1 value not canonicalizable, 2 unreadable input.")
    .action(async (file: string | undefined) => {
      setExit(await runHash(file, io));
    });
}
