// Runs the reference Python decide (a SHACKLE checkout the user points at) over the vectors `bench decide`
// measured, through our driver packages/bench/bench/reference-decide.py. It ships none of the reference's code.
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CliError, EXIT_BAD_INPUT, firstLine } from "@leash/cli/internal";
import { JsonNumberText } from "@leash/core";

/** The driver, found from src/ and dist/ alike (both sit one level below the package root). */
export const REFERENCE_DRIVER = fileURLToPath(new URL("../bench/reference-decide.py", import.meta.url));

/** One vector for the reference, with the answer our decide gave (the driver compares the two). */
export interface ReferenceCase {
  readonly config: unknown;
  readonly state: unknown;
  readonly call: unknown;
  readonly verdict: string;
  readonly reason: string;
  /** Names the vector in a mismatch report. */
  readonly label: string;
}

export interface ReferenceMismatch {
  readonly index: number;
  readonly label: string;
  readonly ours: string;
  readonly reference: string;
}

export interface ReferenceCorpusResult {
  readonly vectors: number;
  readonly decisions: number;
  readonly cpu_seconds: number;
  readonly decisions_per_cpu_sec: number;
  readonly mismatches: number;
  readonly first_mismatches: readonly ReferenceMismatch[];
}

export interface ReferenceResult {
  readonly implementation: string;
  readonly file: string;
  /** SHA-256 of the reference file measured, so a figure names its exact source. */
  readonly sha256: string;
  readonly python: string;
  readonly [corpus: string]: ReferenceCorpusResult | string;
}

const PLACEHOLDER = "\u0000number:";

/**
 * JSON for Python's json.load: a number kept as its literal (`10.0` in params) is written as that
 * literal, so the reference digests what the fixture says; a non-finite number has no JSON form.
 */
export function referenceJson(value: unknown): string {
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (v instanceof JsonNumberText) return `${PLACEHOLDER}${v.text}`;
    if (typeof v === "number" && !Number.isFinite(v)) {
      throw new CliError(`bench decide: ${v} cannot be handed to the reference as JSON`, EXIT_BAD_INPUT);
    }
    return v;
  });
  return text.replace(/"\\u0000number:([^"]*)"/g, "$1");
}

function run(python: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(python, args, { maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      if (error) {
        const said = stderr.trim().split("\n").at(-1) || firstLine(error);
        reject(
          new CliError(`bench decide: the reference run failed: ${said}`, EXIT_BAD_INPUT, { cause: error }),
        );
      } else resolve(stdout);
    });
  });
}

/**
 * Times the reference decide over each named corpus (same vectors, warm-up and measuring seconds as
 * ours, in CPU time) after checking its answer on every vector against ours.
 * @throws CliError (exit 2) when the path holds no reference, Python is missing or the driver fails.
 */
export async function runReference(
  referencePath: string,
  python: string,
  corpora: Readonly<Record<string, readonly ReferenceCase[]>>,
  timing: { readonly warmup: number; readonly seconds: number },
): Promise<ReferenceResult> {
  if (!existsSync(referencePath)) {
    throw new CliError(
      `bench decide: --reference ${referencePath}: no such file or directory`,
      EXIT_BAD_INPUT,
    );
  }
  const dir = await mkdtemp(join(tmpdir(), "leash-bench-reference-"));
  try {
    const corpusFile = join(dir, "corpus.json");
    await writeFile(corpusFile, referenceJson({ ...timing, corpora }));
    const stdout = await run(python, [REFERENCE_DRIVER, referencePath, corpusFile]);
    try {
      return JSON.parse(stdout) as ReferenceResult;
    } catch (error) {
      throw new CliError(`bench decide: the reference driver printed no JSON: ${firstLine(error)}`, 1, {
        cause: error,
      });
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
