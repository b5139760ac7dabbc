// The benchmark harness behind `leash bench decide|engine|daemon`, kept out of the published CLI.
// It measures only; what it measures (decide, the engine, the daemon) lives in the packages it imports.

import type { Io } from "@leash/cli/internal";
import type { Command } from "commander";
import { registerBench } from "./bench.js";
import { registerBenchDaemon } from "./bench-daemon.js";
import { registerBenchEngine } from "./bench-engine.js";

export { defaultVectorFiles, runBench } from "./bench.js";
export { runBenchDaemon } from "./bench-daemon.js";
export { childNodeFlags, runBenchEngine } from "./bench-engine.js";
export { bucketOf, bucketRange, type HistogramJson, LatencyHistogram } from "./histogram.js";
export { REFERENCE_WORKLOAD, referenceRate } from "./machine-reference.js";
export { mixedCorpus, reasonCounts } from "./mixed-corpus.js";
export { REFERENCE_DRIVER, referenceJson, runReference } from "./reference-decide.js";

/** Adds `bench` and its `decide`, `engine` and `daemon` subcommands to the `leash` program. */
export function registerBenchCommands(program: Command, io: Io, setExit: (code: number) => void): void {
  const bench = registerBench(program, io, setExit);
  registerBenchEngine(bench, io, setExit);
  registerBenchDaemon(bench, io, setExit);
}
