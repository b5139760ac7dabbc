// Finds the private @leash/bench package that implements `leash bench`, present in a checkout of the
// Leash repository only; a published CLI gets a `bench` command that says so instead of measuring.
import type { Command } from "commander";
import { CliError, EXIT_BAD_INPUT, type Io } from "./io.js";

type RegisterBench = (program: Command, io: Io, setExit: (code: number) => void) => void;

/** Held in a variable so TypeScript does not look for the package when it builds the CLI (bench builds after it). */
const BENCH_PACKAGE = "@leash/bench";

async function load(): Promise<RegisterBench | null> {
  try {
    const loaded = (await import(BENCH_PACKAGE)) as { registerBenchCommands: RegisterBench };
    return loaded.registerBenchCommands;
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    const missing =
      code === "ERR_MODULE_NOT_FOUND" && String((error as Error).message).includes(BENCH_PACKAGE);
    if (missing) return null;
    throw error;
  }
}

const registerBenchCommands = await load();

/** Adds `leash bench` (decide, engine, daemon) from @leash/bench, or a command that explains its absence. */
export function registerBench(program: Command, io: Io, setExit: (code: number) => void): void {
  if (registerBenchCommands !== null) {
    registerBenchCommands(program, io, setExit);
    return;
  }
  program
    .command("bench")
    .description("benchmarks (only in a checkout of the Leash repository)")
    .allowUnknownOption()
    .argument("[args...]")
    .action(() => {
      throw new CliError(
        "bench: the benchmarks live in the Leash repository's private @leash/bench package; run `pnpm leash bench` from a checkout",
        EXIT_BAD_INPUT,
      );
    });
}
