// `leash bench decide`: measures decide's throughput over fixture vectors and prints one JSON line.
// It benchmarks the pure decision only (no engine, store or audit chain); the result is refused if decide is wrong.

import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { CliError, EXIT_BAD_INPUT, type Io, loadFixtureFile, type Vector } from "@leash/cli/internal";
import { type DecideInputs, decide } from "@leash/core";
import { nodeSha256Hex, nodeSha256HexOfBytes } from "@leash/engine";
import { type Command, InvalidArgumentError, Option } from "commander";
import { mixedCorpus, reasonCounts } from "./mixed-corpus.js";
import { type ReferenceCase, type ReferenceResult, runReference } from "./reference-decide.js";

export interface BenchOptions {
  readonly vectors?: readonly string[];
  /** published: the fixture vectors only; mixed: those and the mixed corpus, both measured in this run. */
  readonly corpus?: "published" | "mixed";
  /** The argument digest's SHA-256: node:crypto (what the engine passes decide) or core's pure one. */
  readonly hash?: "node" | "pure";
  readonly seconds: number;
  readonly warmup: number;
  /** A checkout of the reference (SHACKLE's shackle/conformance.py): time it over the same vectors. */
  readonly reference?: string;
  /** The interpreter that runs the reference. */
  readonly python?: string;
}

interface Case {
  readonly config: unknown;
  readonly state: unknown;
  readonly call: unknown;
}

/**
 * The reference Python decide over the 29 published vectors, as docs/performance.md records it, for
 * runs without --reference: ratios against it are indicative only (another machine, another hour).
 */
const REFERENCE_PUBLISHED_PER_S = 140_000;

/** The published fixture files, as CI lays them out: `shared/` beside the repository. */
const PUBLISHED = ["conformance.json", "conformance-1.0.1.json"];

/**
 * Finds the published fixtures relative to the repository root (the directory holding
 * pnpm-workspace.yaml above this module), so the default works from src and from dist.
 */
export function defaultVectorFiles(from: string = dirname(fileURLToPath(import.meta.url))): string[] {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, "pnpm-workspace.yaml"))) {
      const fixtures = resolve(dir, "..", "shared", "spec", "fixtures");
      return PUBLISHED.map((name) => join(fixtures, name)).filter((path) => existsSync(path));
    }
    if (dirname(dir) === dir) return [];
  }
}

/** Results are folded into this so the JIT cannot prove a call dead and drop it. */
function fold(checksum: number, verdict: string, reason: string): number {
  return (Math.imul(checksum, 31) + verdict.charCodeAt(0) + reason.length) | 0;
}

interface Spin {
  decisions: number;
  elapsedNs: number;
  checksum: number;
  /** Decisions per clock read; carried from warm-up so the measured run starts at full stride. */
  batch: number;
}

/**
 * Calls decide round-robin over `cases` for `durationNs`. The clock is read once per
 * batch, not per call: a clock read would be a real fraction of a sub-µs decision. The batch
 * grows until it takes a couple of milliseconds, and the elapsed time is measured, not
 * assumed, so the overshoot of the last batch is counted honestly.
 */
function spin(
  cases: readonly Case[],
  durationNs: number,
  from: Spin,
  inputs: DecideInputs,
  tick?: (s: Spin) => void,
): Spin {
  const count = cases.length;
  let { batch, checksum } = from;
  let next = 0;
  let decisions = 0;
  const start = process.hrtime.bigint();
  let elapsedNs = 0;
  while (elapsedNs < durationNs) {
    const batchStart = process.hrtime.bigint();
    for (let i = 0; i < batch; i++) {
      const c = cases[next]!;
      next = next + 1 === count ? 0 : next + 1;
      const r = decide(c.config, c.state, c.call, inputs);
      checksum = fold(checksum, r.verdict, r.reason);
    }
    decisions += batch;
    const now = process.hrtime.bigint();
    if (now - batchStart < 2_000_000n && batch < 1 << 22) batch *= 2;
    elapsedNs = Number(now - start);
    tick?.({ decisions, elapsedNs, checksum, batch });
  }
  return { decisions, elapsedNs, checksum, batch };
}

/** The vectors of every file, each checked against decide first: a wrong decide is not benchmarked. */
async function loadCases(
  paths: readonly string[],
  io: Io,
): Promise<{ cases: Case[]; vectors: Vector[]; referenceCases: ReferenceCase[] }> {
  const cases: Case[] = [];
  const vectors: Vector[] = [];
  const referenceCases: ReferenceCase[] = [];
  for (const path of paths) {
    const file = await loadFixtureFile(path, io);
    for (const v of file.vectors) {
      // A benchmark of a function that gives wrong answers measures nothing worth having.
      const { verdict, reason } = decide(v.config, v.state, v.call);
      if (verdict !== v.expectedVerdict || reason !== v.expectedReason) {
        throw new CliError(
          `bench decide: ${file.label}:${v.name}: expected ${v.expectedVerdict} ${v.expectedReason}, got ${verdict} ${reason}; not benchmarking a wrong decide`,
          1,
        );
      }
      cases.push({ config: v.config, state: v.state, call: v.call });
      vectors.push(v);
      referenceCases.push({
        config: v.config,
        state: v.state,
        call: v.call,
        verdict,
        reason,
        label: `${file.label}:${v.name}`,
      });
    }
  }
  return { cases, vectors, referenceCases };
}

/** One corpus's figures: warmed up, then measured in wall and CPU time. */
type Measured = ReturnType<ReturnType<typeof measurer>>;

/** Measures a corpus: a warm-up, then the measured run (with progress on a terminal). */
function measurer(options: BenchOptions, io: Io) {
  let lastShown = 0;
  const progress = (phase: string, totalS: number) =>
    io.stderrIsTTY
      ? (s: Spin) => {
          if (s.elapsedNs - lastShown < 250_000_000) return;
          lastShown = s.elapsedNs;
          io.stderr(`\r\x1b[Kleash bench decide: ${phase} ${(s.elapsedNs / 1e9).toFixed(1)}/${totalS} s`);
        }
      : undefined;

  const inputs: DecideInputs =
    options.hash === "pure" ? {} : { sha256Hex: nodeSha256Hex, sha256HexOfBytes: nodeSha256HexOfBytes };
  return (over: readonly Case[], label: string) => {
    lastShown = 0;
    const start: Spin = { decisions: 0, elapsedNs: 0, checksum: 0, batch: over.length };
    const warm = spin(
      over,
      options.warmup * 1e9,
      start,
      inputs,
      progress(`${label}: warming up`, options.warmup),
    );
    lastShown = 0;
    // CPU time beside wall time: on a loaded machine the process gets a fraction of a core, and wall
    // time says more about the neighbours than about decide().
    const cpu = process.cpuUsage();
    const measured = spin(
      over,
      options.seconds * 1e9,
      warm,
      inputs,
      progress(`${label}: measuring`, options.seconds),
    );
    const used = process.cpuUsage(cpu);
    if (io.stderrIsTTY) io.stderr("\r\x1b[K");
    const elapsedS = measured.elapsedNs / 1e9;
    const cpuS = (used.user + used.system) / 1e6;
    return {
      vectors: over.length,
      decisions: measured.decisions,
      seconds: Number(elapsedS.toFixed(3)),
      decisions_per_sec: Math.round(measured.decisions / elapsedS),
      ns_per_decision: Number((measured.elapsedNs / measured.decisions).toFixed(1)),
      decisions_per_cpu_sec: Math.round(measured.decisions / cpuS),
      checksum: (measured.checksum >>> 0).toString(16).padStart(8, "0"),
    };
  };
}

/** The reference over the same corpora in this run, when --reference was given. */
async function compareWithReference(
  options: BenchOptions,
  io: Io,
  corpora: Record<string, readonly ReferenceCase[]>,
): Promise<ReferenceResult | undefined> {
  if (options.reference === undefined) return undefined;
  if (io.stderrIsTTY) io.stderr("\r\x1b[Kleash bench decide: the reference (Python) …");
  const result = await runReference(options.reference, options.python ?? DEFAULT_PYTHON, corpora, {
    warmup: options.warmup,
    seconds: options.seconds,
  });
  if (io.stderrIsTTY) io.stderr("\r\x1b[K");
  warnOfMismatches(result, io);
  return result;
}

export async function runBench(options: BenchOptions, io: Io): Promise<number> {
  const paths = options.vectors && options.vectors.length > 0 ? options.vectors : defaultVectorFiles();
  if (paths.length === 0) {
    throw new CliError(
      "bench decide: no vectors: pass --vectors FILE (the published fixtures were not found beside the repository)",
      EXIT_BAD_INPUT,
    );
  }
  const { cases, vectors, referenceCases } = await loadCases(paths, io);
  const measure = measurer(options, io);
  const published = measure(cases, "published");
  if (options.corpus !== "mixed") {
    const reference = await compareWithReference(options, io, { published: referenceCases });
    const versus = reference && {
      reference,
      cpu_vs_reference: ratio(published.decisions_per_cpu_sec, reference.published),
    };
    io.stdout(
      `${JSON.stringify({ bench: "decide", ...published, hash: options.hash ?? "node", ...versus, node: process.version })}\n`,
    );
    return 0;
  }
  const report = await mixedReport(options, io, measure, { vectors, referenceCases, published });
  io.stdout(`${JSON.stringify(report)}\n`);
  return 0;
}

/** --corpus mixed: the mixed corpus measured after the published one, and both beside the reference. */
async function mixedReport(
  options: BenchOptions,
  io: Io,
  measure: ReturnType<typeof measurer>,
  from: { vectors: Vector[]; referenceCases: ReferenceCase[]; published: Measured },
) {
  const { published, referenceCases } = from;
  let corpus: ReturnType<typeof mixedCorpus>;
  try {
    corpus = mixedCorpus(from.vectors);
  } catch (error) {
    throw new CliError(`bench decide: ${(error as Error).message}; not benchmarking a wrong decide`, 1);
  }
  const mixed = measure(corpus, "mixed");
  const reasons = reasonCounts(corpus);
  const reference = await compareWithReference(options, io, {
    published: referenceCases,
    mixed: corpus.map((c) => ({
      config: c.config,
      state: c.state,
      call: c.call,
      verdict: c.expectedVerdict,
      reason: c.expectedReason,
      label: c.label,
    })),
  });
  const versus = reference
    ? {
        reference,
        published_cpu_vs_reference: ratio(published.decisions_per_cpu_sec, reference.published),
        mixed_cpu_vs_reference: ratio(mixed.decisions_per_cpu_sec, reference.mixed),
      }
    : {
        reference_published_per_sec: REFERENCE_PUBLISHED_PER_S,
        mixed_vs_reference_published: Number(
          (mixed.decisions_per_sec / REFERENCE_PUBLISHED_PER_S).toFixed(2),
        ),
        mixed_cpu_vs_reference_published: Number(
          (mixed.decisions_per_cpu_sec / REFERENCE_PUBLISHED_PER_S).toFixed(2),
        ),
      };
  return {
    bench: "decide",
    corpus: "mixed",
    hash: options.hash ?? "node",
    published,
    mixed: {
      ...mixed,
      hitl_approvals: corpus.filter((c) => c.kind === "hitl_approval").length,
      plain_allows: corpus.filter((c) => c.kind === "plain_allow").length,
      reasons: Object.keys(reasons).length,
    },
    mixed_vs_published: Number((mixed.decisions_per_sec / published.decisions_per_sec).toFixed(3)),
    ...versus,
    node: process.version,
  };
}

const DEFAULT_PYTHON = "/usr/bin/python3";

/** Ours per CPU second over the reference's, both over the same vectors in this run. */
function ratio(oursPerCpuS: number, reference: ReferenceResult[string] | undefined): number | null {
  if (typeof reference !== "object" || reference.decisions_per_cpu_sec <= 0) return null;
  return Number((oursPerCpuS / reference.decisions_per_cpu_sec).toFixed(2));
}

/** A disagreement is news about one side or the other: said on stderr as well as in the JSON. */
function warnOfMismatches(result: ReferenceResult, io: Io): void {
  for (const [name, corpus] of Object.entries(result)) {
    if (typeof corpus !== "object" || corpus.mismatches === 0) continue;
    const first = corpus.first_mismatches[0]!;
    io.stderr(
      `bench decide: the reference disagrees with ours on ${corpus.mismatches} of ${corpus.vectors} ${name} vectors (first: ${first.label}: ours ${first.ours}, reference ${first.reference})\n`,
    );
  }
}

function secondsArg(min: "positive" | "non-negative") {
  return (text: string): number => {
    const value = Number(text);
    const ok = text.trim() !== "" && Number.isFinite(value) && (min === "positive" ? value > 0 : value >= 0);
    if (!ok) throw new InvalidArgumentError(`expected a ${min} number of seconds`);
    return value;
  };
}

function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/** Returns the `bench` group so other benchmarks (bench engine) can join it. */
export function registerBench(program: Command, io: Io, setExit: (code: number) => void): Command {
  const bench = program.command("bench").description("benchmarks; prints one machine-readable JSON line");
  bench
    .command("decide")
    .description("measure decide() throughput over fixture vectors, round-robin")
    .option(
      "--vectors <file>",
      "fixture file to draw vectors from; repeat for more (default: the published fixtures beside the repo)",
      collect,
    )
    .addOption(
      new Option(
        "--corpus <name>",
        "published: the fixture vectors; mixed: also a seeded 4,000-vector mix (a fifth HITL approvals over 50–600-byte params, a fifth plain ALLOWs, the rest every reason), both measured",
      )
        .choices(["published", "mixed"])
        .default("published"),
    )
    .addOption(
      new Option(
        "--hash <impl>",
        "the digest's SHA-256: node (node:crypto, as the engine uses) or pure (core's own)",
      )
        .choices(["node", "pure"])
        .default("node"),
    )
    .option("--seconds <n>", "how long to measure (each corpus)", secondsArg("positive"), 5)
    .option("--warmup <n>", "how long to warm the JIT up first", secondsArg("non-negative"), 1)
    .option(
      "--reference <path>",
      "also time the reference Python decide over the same vectors, in this run: a checkout of github.com/Fame510/SHACKLE (or its shackle/conformance.py); its answers are checked against ours",
    )
    .option("--python <exe>", "the interpreter for --reference", DEFAULT_PYTHON)
    .addHelpText(
      "after",
      "\nEvery vector's result is checked once first; a wrong result exits 1 without measuring.\nWith --reference, the report adds the reference's decisions per CPU second and ours over it; a vector\nwhere the reference answers otherwise is named on stderr (the run still exits 0).\nExit status: 0 measured, 1 decide disagrees with a vector, 2 unreadable input or no usable reference.",
    )
    .action(async (options: BenchOptions) => {
      setExit(await runBench(options, io));
    });
  return bench;
}
