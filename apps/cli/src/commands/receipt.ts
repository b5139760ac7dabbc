// `leash receipt verify`: checks one decision receipt (the JWS `evaluate` prints) offline, with the public key.
// The checks are @leash/receipts' verifyReceipt; it never looks at a store or at the rest of the chain.
import { type VerifyReceiptResult, verifyReceipt } from "@leash/receipts";
import type { Command } from "commander";
import { nonEmpty } from "../args.js";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, type Io, readSource } from "../io.js";
import { collect, loadPublicKeys } from "../keys.js";

export interface ReceiptVerifyOptions {
  readonly pubkey?: string[];
  readonly chainId?: string;
}

/** The receipt itself, `@FILE` to read it from a file, or `-` for stdin; surrounding whitespace dropped. */
export async function readReceipt(spec: string, io: Io): Promise<string> {
  const text =
    spec === "-"
      ? await readSource("-", io)
      : spec.startsWith("@")
        ? await readSource(spec.slice(1) || "-", io)
        : spec;
  const receipt = text.trim();
  if (receipt === "") throw new CliError("the receipt is empty", EXIT_BAD_INPUT);
  return receipt;
}

/** One line naming what the receipt attests: the decision, or the kind of entry. */
export function summary(result: Extract<VerifyReceiptResult, { ok: true }>): string {
  const { payload } = result;
  const data = payload.data;
  const field = (name: string) => {
    const value = data[name];
    return value === undefined || value === null ? "-" : String(value);
  };
  const what = payload.kind === "decision" ? `${field("verdict")} ${field("reason")}` : `${payload.kind}`;
  const call =
    payload.kind === "decision" || data.call_number !== undefined ? ` call ${field("call_number")}` : "";
  return `OK seq ${result.seq} ${what} session ${field("session_id")}${call} key ${result.key_id} chain ${result.chain_id}\n`;
}

export async function runReceiptVerify(spec: string, options: ReceiptVerifyOptions, io: Io): Promise<number> {
  const keys = loadPublicKeys(options.pubkey);
  const receipt = await readReceipt(spec, io);
  const verifyOptions = options.chainId === undefined ? {} : { chainId: options.chainId };
  // Several keys (before and after a rotation): the receipt's kid picks one; report that key's verdict.
  let failure: Extract<VerifyReceiptResult, { ok: false }> | undefined;
  for (const key of keys) {
    const result = await verifyReceipt(receipt, key.publicKeyHex, verifyOptions);
    if (result.ok) {
      io.stdout(summary(result));
      return 0;
    }
    if (failure === undefined || failure.reason === "kid_mismatch") failure = result;
  }
  io.stdout(`INVALID: ${failure!.reason}: ${failure!.message}\n`);
  return EXIT_REFUSED;
}

export function registerReceipt(program: Command, io: Io, setExit: (code: number) => void): void {
  const receipt = program
    .command("receipt")
    .description("per-decision receipts (the `receipt` field of evaluate)");
  receipt
    .command("verify")
    .description("verify a decision receipt offline with the public key; print what it attests")
    .argument("<receipt>", "the receipt (compact JWS), @FILE to read it from a file, or - for stdin")
    .option(
      "--pubkey <key>",
      "the signer's public key: 64 hex characters, or a .pub.hex / .pub.pem file (repeatable)",
      collect,
    )
    .option(
      "--chain-id <id>",
      "also require the receipt to come from this chain (its genesis entry_id)",
      nonEmpty,
    )
    .addHelpText(
      "after",
      `
A receipt is the compact JWS (EdDSA) of the decision's audit chain entry: anyone with the public key
can check it, without the store. It proves the entry was signed, not that the chain still holds it
(\`leash verify\` checks the chain).

Output: one line on stdout,
  OK seq <seq> <verdict> <reason> session <id> call <n> key <key id> chain <chain id>
  INVALID: <reason>: <message>
Exit status: 0 valid, 1 invalid, 2 bad flags, key or unreadable input.`,
    )
    .action(async (spec: string, options: ReceiptVerifyOptions) => {
      setExit(await runReceiptVerify(spec, options, io));
    });
}
