// Builds the `leash` commander program and runs it against an Io, returning the exit status.
// It holds no command logic and never calls process.exit, so tests can run it in-process.
import { readFileSync } from "node:fs";
import { Command, CommanderError, type Option } from "commander";
import { registerBench } from "./bench-commands.js";
import { registerConformance } from "./commands/conformance.js";
import { registerConsole } from "./commands/console.js";
import { registerDecide } from "./commands/decide.js";
import { registerEvaluate } from "./commands/evaluate.js";
import { registerExpire } from "./commands/expire.js";
import { registerExport } from "./commands/export.js";
import { registerGuard } from "./commands/guard.js";
import { registerHash } from "./commands/hash.js";
import { registerHitl } from "./commands/hitl.js";
import { registerKey } from "./commands/key.js";
import { registerKeygen } from "./commands/keygen.js";
import { registerMcp } from "./commands/mcp.js";
import { registerMigrate } from "./commands/migrate.js";
import { registerPolicy } from "./commands/policy.js";
import { registerReceipt } from "./commands/receipt.js";
import { registerRecover } from "./commands/recover.js";
import { registerRelay } from "./commands/relay.js";
import { registerServe } from "./commands/serve.js";
import { registerSession } from "./commands/session.js";
import { registerSessions } from "./commands/sessions.js";
import { registerTail } from "./commands/tail.js";
import { registerVerify } from "./commands/verify.js";
import { CliError, EXIT_BAD_INPUT, firstLine, type Io, nodeIo } from "./io.js";

export type { Io };
export { nodeIo };

/** Exit status for a bug in leash itself (sysexits EX_SOFTWARE), kept apart from the commands' 1 and 2. */
export const EXIT_INTERNAL = 70;

/** Read at run time so the version cannot drift from package.json; works from src and dist alike. */
function packageVersion(): string {
  try {
    const text = readFileSync(new URL("../package.json", import.meta.url), "utf8");
    const version = (JSON.parse(text) as { version?: unknown }).version;
    return typeof version === "string" ? version : "unknown";
  } catch {
    return "unknown";
  }
}

/** One line on stderr: commander appends suggestions on a second line, which we fold in. */
function oneLine(text: string): string {
  return `${text.trim().replace(/\s*\n\s*/g, " ")}\n`;
}

export function buildProgram(io: Io, setExit: (code: number) => void): Command {
  const program = new Command("leash");
  // Output and exit settings first: subcommands copy them when .command() creates them.
  program
    .description("Leash: a SHACKLE SP/1.0 circuit breaker for AI agent tool calls")
    .exitOverride()
    .configureOutput({
      writeOut: (text) => io.stdout(text),
      writeErr: (text) => io.stderr(text),
      outputError: (text, write) => write(`leash: ${oneLine(text)}`),
      getOutHasColors: () => false,
      getErrHasColors: () => false,
    })
    .version(packageVersion(), "-V, --version", "print the version")
    .helpOption("-h, --help", "show help for the command")
    .showSuggestionAfterError(true);
  registerConformance(program, io, setExit);
  registerHash(program, io, setExit);
  registerDecide(program, io, setExit);
  // Library mode: the engine on a store (sqlite:, postgres://, memory:).
  registerMigrate(program, io, setExit);
  registerSession(program, io, setExit);
  registerSessions(program, io, setExit);
  registerGuard(program, io, setExit);
  registerEvaluate(program, io, setExit);
  registerHitl(program, io, setExit);
  registerExpire(program, io, setExit);
  // The signed audit chain: keys, verification, export, receipts.
  registerKeygen(program, io, setExit);
  registerKey(program, io, setExit);
  registerVerify(program, io, setExit);
  registerExport(program, io, setExit);
  registerReceipt(program, io, setExit);
  registerTail(program, io, setExit);
  // Startup checks, and shipping the chain elsewhere.
  registerRecover(program, io, setExit);
  registerRelay(program, io, setExit);
  // The sidecar daemon (SP/1.0 Model B).
  registerServe(program, io, setExit);
  registerConsole(program, io, setExit);
  // Where agents live: an MCP server behind Leash.
  registerMcp(program, io, setExit);
  // Policies operators write, checked and tested as code.
  registerPolicy(program, io, setExit);
  // Benchmarks, from the repository's private @leash/bench package.
  registerBench(program, io, setExit);
  checkRequiredOptionsLast(program);
  return program;
}

/**
 * Commander checks required options before unknown ones, so `evaluate --bogus-flag` would complain
 * about a missing --session and hide the typo. Every command's required options are checked here
 * instead, in a preAction hook: that runs after commander has refused unknown options and bad
 * arguments, so the first error a user sees is about what they typed.
 */
function checkRequiredOptionsLast(program: Command): void {
  const required = new Map<Command, Option[]>();
  const collect = (command: Command) => {
    const mandatory = command.options.filter((option) => option.mandatory);
    for (const option of mandatory) option.mandatory = false;
    if (mandatory.length > 0) required.set(command, mandatory);
    for (const sub of command.commands) collect(sub);
  };
  collect(program);
  program.hook("preAction", (_, actionCommand) => {
    for (let command: Command | null = actionCommand; command !== null; command = command.parent) {
      for (const option of required.get(command) ?? []) {
        if (command.getOptionValue(option.attributeName()) === undefined) {
          // The wording and code commander itself uses, so messages stay as users know them.
          command.error(`error: required option '${option.flags}' not specified`, {
            code: "commander.missingMandatoryOptionValue",
          });
        }
      }
    }
  });
}

/**
 * Runs `leash` with `argv` (user arguments only, without node and the script path).
 * Never throws and never exits the process: every failure becomes one stderr line and a status.
 */
export async function run(argv: readonly string[], io: Partial<Io> = {}): Promise<number> {
  const full: Io = { ...nodeIo(), ...io };
  let status = 0;
  try {
    await buildProgram(full, (code) => {
      status = code;
    }).parseAsync(argv, { from: "user" });
    return status;
  } catch (err) {
    if (err instanceof CliError) {
      full.stderr(`leash: error: ${oneLine(err.message)}`);
      return err.exitCode;
    }
    if (err instanceof CommanderError) {
      // Commander has already printed its message (help, version or a usage error).
      // Usage errors share status 2 with other input the program cannot act on.
      return err.exitCode === 0 ? 0 : EXIT_BAD_INPUT;
    }
    full.stderr(`leash: internal error: ${firstLine(err)}\n`);
    return EXIT_INTERNAL;
  }
}
