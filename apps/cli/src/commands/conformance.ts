// `leash conformance FILE...`: runs published SHACKLE fixture files through decide and checks every seal.
// It checks only the fixture envelope, never the vectors' config/state/call: odd inputs are the point.
import { CanonicalizationError, decide, vectorHash } from "@leash/core";
import type { Command } from "commander";
import { type FixtureFile, loadFixtureFile, type Vector } from "../fixtures.js";
import { firstLine, type Io } from "../io.js";

export interface ConformanceOptions {
  readonly verbose?: boolean;
  readonly json?: boolean;
}

type SealStatus = "verified" | "absent" | "mismatch" | "error";

interface Outcome {
  readonly verdict: string;
  readonly reason: string;
}

export interface VectorResult {
  readonly file: string;
  readonly name: string;
  readonly passed: boolean;
  readonly seal: {
    readonly status: SealStatus;
    readonly expected?: string;
    readonly computed?: string;
    readonly error?: string;
  };
  readonly expected: Outcome;
  readonly got: Outcome;
  /** The FAIL line's text after `FAIL file:name: `; absent when the vector passed. */
  readonly failure?: string;
}

function checkSeal(vector: Vector): VectorResult["seal"] {
  if (vector.vectorHash === undefined) return { status: "absent" };
  try {
    const computed = vectorHash(vector.sealSource);
    return computed === vector.vectorHash
      ? { status: "verified", expected: vector.vectorHash, computed }
      : { status: "mismatch", expected: vector.vectorHash, computed };
  } catch (err) {
    const error = CanonicalizationError.isInstance(err) ? `${err.code}: ${firstLine(err)}` : firstLine(err);
    return { status: "error", expected: vector.vectorHash, error };
  }
}

function runDecide(vector: Vector): Outcome {
  try {
    const { verdict, reason } = decide(vector.config, vector.state, vector.call);
    return { verdict, reason };
  } catch (err) {
    // decide promises never to throw; if it does, that is a conformance failure, not a crash.
    return { verdict: "THROWN", reason: firstLine(err) };
  }
}

export function evaluateVector(file: FixtureFile, vector: Vector): VectorResult {
  const seal = checkSeal(vector);
  const got = runDecide(vector);
  const expected = { verdict: vector.expectedVerdict, reason: vector.expectedReason };
  let failure: string | undefined;
  // A broken seal comes first: the expectation it should protect cannot be trusted, so
  // comparing against it would be noise. Either way the vector counts once.
  if (seal.status === "mismatch") {
    failure = `vector_hash mismatch (expected ${seal.expected}, computed ${seal.computed})`;
  } else if (seal.status === "error") {
    failure = `vector_hash cannot be computed (${seal.error})`;
  } else if (got.verdict !== expected.verdict || got.reason !== expected.reason) {
    failure = `expected ${expected.verdict} ${expected.reason}, got ${got.verdict} ${got.reason}`;
  }
  return {
    file: file.label,
    name: vector.name,
    passed: failure === undefined,
    seal,
    expected,
    got,
    ...(failure === undefined ? {} : { failure }),
  };
}

/** Exit status: 0 all pass, 1 any vector or seal fails, 2 unreadable input (thrown as CliError). */
export async function runConformance(paths: readonly string[], options: ConformanceOptions, io: Io) {
  // Load every file before running any: a typo in the last path should not come after pages of output.
  const files: FixtureFile[] = [];
  for (const path of paths) files.push(await loadFixtureFile(path, io));

  const results: VectorResult[] = [];
  for (const file of files) {
    for (const vector of file.vectors) {
      const result = evaluateVector(file, vector);
      results.push(result);
      if (options.json) continue;
      const id = `${result.file}:${result.name}`;
      if (result.failure !== undefined) io.stdout(`FAIL ${id}: ${result.failure}\n`);
      else if (options.verbose) {
        const unsealed = result.seal.status === "absent" ? " (unsealed)" : "";
        io.stdout(`ok ${id}: ${result.got.verdict} ${result.got.reason}${unsealed}\n`);
      }
    }
  }

  const passed = results.filter((r) => r.passed).length;
  const failed = results.length - passed;
  if (options.json) {
    const report = {
      passed,
      failed,
      files: files.map((f) => ({ file: f.path, revision: f.revision ?? null, vectors: f.vectors.length })),
      results,
    };
    io.stdout(`${JSON.stringify(report)}\n`);
  } else {
    io.stdout(`${passed} passed, ${failed} failed\n`);
  }
  return failed === 0 ? 0 : 1;
}

export function registerConformance(program: Command, io: Io, setExit: (code: number) => void): void {
  program
    .command("conformance")
    .description("run SHACKLE fixture files through decide; verify every vector_hash seal")
    .argument("<files...>", "fixture files in the published format (e.g. spec/fixtures/conformance.json)")
    .option("--verbose", "also print an `ok` line for each passing vector")
    .option("--json", "print one machine-readable JSON report instead of text")
    .addHelpText(
      "after",
      "\nExit status: 0 all vectors pass, 1 a verdict, reason or seal differs, 2 unreadable input.",
    )
    .action(async (files: string[], options: ConformanceOptions) => {
      setExit(await runConformance(files, options, io));
    });
}
