// `leash policy check FILE`, `leash policy test FILE CASES` and `leash policy schema`: policies as code
// (@leash/policy).
// It loads and runs policies only; it never touches a store or an engine.
import { readFileSync, writeFileSync } from "node:fs";
import { stat } from "node:fs/promises";
import type { CompiledPolicy } from "@leash/policy";
import {
  formatFailure,
  limits,
  loadPolicy,
  PolicyError,
  parseCases,
  policySchema,
  runCases,
} from "@leash/policy";
import type { Command } from "commander";
import { CliError, EXIT_BAD_INPUT, type Io, readSource, sourceLabel } from "../io.js";
import { addKeyOptions, type KeyOptions, resolveSigner } from "../keys.js";
import { registerPolicyStore } from "./policy-store.js";

/** Exit status of `policy test` when a case's outcome differs from what it expects. */
const EXIT_MISMATCH = 1;

/** Refuses a file larger than a policy may be before reading it (a cases file may be 4 × that). */
async function readBounded(source: string, io: Io, max: number): Promise<string> {
  if (source !== "-") {
    const size = await stat(source).then(
      (s) => s.size,
      () => undefined,
    );
    if (size !== undefined && size > max) {
      throw new CliError(`${source}: ${size} bytes, larger than the ${max} a file may have`, EXIT_BAD_INPUT);
    }
  }
  return readSource(source, io);
}

function asCliError(error: unknown): never {
  if (PolicyError.isInstance(error)) {
    throw new CliError((error as PolicyError).message, EXIT_BAD_INPUT, { cause: error });
  }
  throw error;
}

/** Reads and compiles a policy file (bounded); a file that does not load is a CliError (exit 2). */
export async function loadPolicyFile(file: string, io: Io): Promise<CompiledPolicy> {
  return load(file, io);
}

async function load(file: string, io: Io): Promise<CompiledPolicy> {
  const text = await readBounded(file, io, limits.MAX_POLICY_BYTES);
  try {
    return loadPolicy(text, { source: sourceLabel(file) });
  } catch (error) {
    asCliError(error);
  }
}

export async function runPolicyCheck(file: string, options: { json?: boolean }, io: Io): Promise<number> {
  const policy = await load(file, io);
  if (options.json === true) {
    const { name, hash, canonical, rules } = policy;
    io.stdout(`${JSON.stringify({ name, hash, rules: rules.length, canonical: JSON.parse(canonical) })}\n`);
  } else {
    const n = policy.rules.length;
    io.stdout(
      `${sourceLabel(file)}: ok: policy ${policy.name}, ${n} rule${n === 1 ? "" : "s"}, sha256 ${policy.hash}\n`,
    );
  }
  return 0;
}

export async function runPolicyTest(file: string, casesFile: string, io: Io): Promise<number> {
  const policy = await load(file, io);
  const text = await readBounded(casesFile, io, limits.MAX_POLICY_BYTES * 4);
  let report: ReturnType<typeof runCases>;
  let steps: Map<string, number>;
  try {
    const cases = parseCases(text);
    steps = new Map(cases.map((c) => [c.name, c.steps.length]));
    report = runCases(policy, cases);
  } catch (error) {
    if (PolicyError.isInstance(error)) {
      throw new CliError(`${sourceLabel(casesFile)}: ${(error as PolicyError).message}`, EXIT_BAD_INPUT);
    }
    throw error;
  }
  for (const failure of report.failures)
    io.stdout(`${formatFailure(failure, steps.get(failure.name) ?? 1)}\n`);
  io.stdout(`${report.passed} passed, ${report.total - report.passed} failed\n`);
  return report.failures.length === 0 ? 0 : EXIT_MISMATCH;
}

export function registerPolicy(program: Command, io: Io, setExit: (code: number) => void): void {
  const policy = program.command("policy").description("check and test policy files (YAML or JSON)");
  policy
    .command("check")
    .description(
      "load a policy: schema, rule names, globs; every `when` parsed, type-checked and cost-bounded",
    )
    .argument("<file>", "the policy file; `-` reads stdin")
    .option("--json", "print {name, hash, rules, canonical} instead of one line")
    .addHelpText(
      "after",
      "\nExit status: 0 the policy loads, 2 it does not (the message names the field and column).",
    )
    .action(async (file: string, options: { json?: boolean }) => {
      setExit(await runPolicyCheck(file, options, io));
    });
  policy
    .command("schema")
    .description("print the policy document's JSON Schema (for editors and YAML language servers)")
    .action(() => {
      io.stdout(`${JSON.stringify(policySchema, null, 2)}\n`);
      setExit(0);
    });
  policy
    .command("test")
    .description("run a policy over cases (a call, or a sequence of calls, and the expected outcome)")
    .argument("<file>", "the policy file")
    .argument(
      "<cases>",
      "the cases file: `cases: [{name, call, expect} | {name, sequence: [{call, expect}]}]`",
    )
    .addHelpText(
      "after",
      "\nExit status: 0 every case matches, 1 a case does not (each printed as a diff), 2 a file does not load.",
    )
    .action(async (file: string, cases: string) => {
      setExit(await runPolicyTest(file, cases, io));
    });
  registerPolicyStore(policy, io, setExit);
  addKeyOptions(
    policy
      .command("sign")
      .description(
        "sign a policy file with an operator key: writes FILE.sig (hex Ed25519 of the file's bytes) for `leash serve --policy-pubkey`",
      )
      .argument("<file>", "the policy file (it must load)"),
  ).action(async (file: string, options: KeyOptions) => {
    setExit(await runPolicySign(file, options, io));
  });
}

/** Signs the file's exact bytes (after checking it loads), next to it as FILE.sig. */
export async function runPolicySign(file: string, options: KeyOptions, io: Io): Promise<number> {
  const policy = await load(file, io);
  const { signer } = resolveSigner(options, io, { ephemeral: false });
  const signature = Buffer.from(signer.sign(readFileSync(file))).toString("hex");
  writeFileSync(`${file}.sig`, `${signature}\n`);
  io.stdout(`${file}.sig: policy ${policy.name} sha256 ${policy.hash}, signed by key ${signer.keyId}\n`);
  return 0;
}
