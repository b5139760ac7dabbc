// `leash console token add --file F --operator NAME --organization ORG… [--readonly]`: mints a console token, prints it once and
// stores only its SHA-256 in the tokens file `leash serve --console-tokens` reads. It serves nothing.

import { existsSync, writeFileSync } from "node:fs";
import { addConsoleToken } from "@leash/daemon";
import type { Command } from "commander";
import { CliError, EXIT_BAD_INPUT, firstLine, type Io } from "../io.js";
import { collect } from "../keys.js";

export interface ConsoleTokenAddOptions {
  readonly file?: string;
  readonly operator?: string;
  readonly readonly?: boolean;
  /** Write the token to this new file (mode 0600) instead of printing it. */
  readonly tokenOut?: string;
  readonly organization?: string[];
}

export function runConsoleTokenAdd(options: ConsoleTokenAddOptions, io: Io): number {
  if (options.file === undefined) throw new CliError("console token add needs --file FILE", EXIT_BAD_INPUT);
  if (options.operator === undefined || options.operator.trim() === "") {
    throw new CliError(
      "console token add needs --operator NAME (the identity the chain records)",
      EXIT_BAD_INPUT,
    );
  }
  const organizations = (options.organization ?? []).map((o) => o.trim());
  if (organizations.length === 0 || organizations.some((o) => o === "")) {
    throw new CliError(
      "console token add needs --organization ORG (repeatable; '*' for every organization): the requests the token may see and answer",
      EXIT_BAD_INPUT,
    );
  }
  if (options.tokenOut !== undefined && existsSync(options.tokenOut)) {
    throw new CliError(`--token-out: ${options.tokenOut} exists; not overwritten`, EXIT_BAD_INPUT);
  }
  let token: string;
  try {
    token = addConsoleToken(options.file, options.operator.trim(), options.readonly === true, organizations);
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
  // A shell redirect would leave the token readable by others (umask 022); this file is 0600.
  if (options.tokenOut !== undefined)
    writeFileSync(options.tokenOut, `${token}\n`, { mode: 0o600, flag: "wx" });
  else io.stdout(`${token}\n`);
  io.stderr(
    `added ${options.readonly ? "a read-only" : "an"} operator token for ${options.operator.trim()} (organizations ${organizations.join(", ")}) to ${options.file}; it is shown once, only its SHA-256 is stored\n`,
  );
  return 0;
}

export function registerConsole(program: Command, io: Io, setExit: (code: number) => void): void {
  const consoleCommand = program.command("console").description("the HITL web console's operator tokens");
  const token = consoleCommand.command("token").description("manage console operator tokens");
  token
    .command("add")
    .description("mint an operator token: prints it once, stores its SHA-256 in the tokens file")
    .option("--file <file>", "the tokens file (created with mode 0600 when absent)")
    .option("--operator <name>", "the operator identity recorded with every answer made with this token")
    .option(
      "--organization <id>",
      "an organization whose HITL requests the token lists, shows and answers (repeatable; '*' for every one)",
      collect,
    )
    .option("--readonly", "the token sees the queue but cannot answer")
    .option("--token-out <file>", "write the token to this new file (mode 0600) instead of printing it")
    .addHelpText(
      "after",
      `
Example:
  leash console token add --file ~/.config/leash/tokens.json --operator alice --organization acme --token-out ~/.config/leash/alice.token
  leash serve --config daemon.yaml --key-file ~/.config/leash/leash.key --console 127.0.0.1:8788 --console-tokens ~/.config/leash/tokens.json

The file is JSON: {"tokens": [{"sha256": "<hex of SHA-256(token)>", "operator": "alice", "readonly": false,
"organizations": ["acme"]}]}. A token sees and answers only its organizations' requests.
To make an entry by hand: printf %s "$TOKEN" | sha256sum. Exit status: 0 added, 2 bad flags or file.`,
    )
    .action((options: ConsoleTokenAddOptions) => {
      setExit(runConsoleTokenAdd(options, io));
    });
}
