// `leash evaluate` and `leash post-exec`: one guarded tool call from a shell script, before and after it runs.
// The verdict is the engine's; the exit status mirrors it (0 ALLOW, 3 DENY, 4 HITL) so scripts can branch.
import type { Verdict } from "@leash/core";
import type { Command } from "commander";
import { moneyText, nonce, nonEmpty, positiveInteger } from "../args.js";
import { addStoreOptions, loadSettings, printJson, type StoreOptions, withEngine } from "../context.js";
import { type Io, parseJsonKeepingText, readSource } from "../io.js";
import { addKeyOptions, type KeyOptions, resolveSigner } from "../keys.js";
import { loadPolicyFile } from "./policy.js";

/** Exit statuses of `evaluate`, part of its contract: scripts run the tool only on 0. */
export const EXIT_DENY = 3;
export const EXIT_HITL = 4;

const VERDICT_STATUS: Record<Verdict, number> = { ALLOW: 0, DENY: EXIT_DENY, HITL: EXIT_HITL };

export interface EvaluateOptions extends StoreOptions, KeyOptions {
  readonly session: string;
  readonly tool: string;
  readonly params?: string;
  readonly nonce?: string | number;
  /** Kept as text: the engine reads it as an exact decimal (`1.0000000000000000000000001` is more than 1). */
  readonly estimate?: string;
  /** A policy file judged after SP/1.0's decide (published in the chain before its first decision). */
  readonly policy?: string;
}

/**
 * `--params` is JSON text, or `@file` / `@-` to read it from a file or stdin. Numbers keep their
 * text where a JavaScript number would change the digest (`1e16`, `10.0`), so it is Python's.
 */
export async function readParams(spec: string | undefined, io: Io): Promise<unknown> {
  if (spec === undefined) return undefined;
  if (spec.startsWith("@")) {
    const source = spec.slice(1);
    return parseJsonKeepingText(
      await readSource(source === "" ? "-" : source, io),
      source === "" || source === "-" ? "<stdin>" : source,
    );
  }
  return parseJsonKeepingText(spec, "--params");
}

export async function runEvaluate(options: EvaluateOptions, io: Io): Promise<number> {
  // Any JSON goes to the engine as is: a non-object params is the engine's to judge (malformed input → DENY).
  const params = (await readParams(options.params, io)) as Record<string, unknown> | null | undefined;
  const settings = await loadSettings(options, io);
  const { signer } = resolveSigner(options, io);
  const policy = options.policy === undefined ? undefined : await loadPolicyFile(options.policy, io);
  const result = await withEngine(
    settings,
    signer,
    (engine) =>
      engine.evaluate({
        session_id: options.session,
        tool_name: options.tool,
        ...(params === undefined ? {} : { params }),
        ...(options.nonce === undefined ? {} : { nonce: options.nonce }),
        ...(options.estimate === undefined ? {} : { estimated_cost_usd: options.estimate }),
      }),
    policy,
  );
  printJson(io, result);
  return VERDICT_STATUS[result.verdict];
}

export interface PostExecOptions extends StoreOptions, KeyOptions {
  readonly session: string;
  readonly call: number;
  readonly actual: string;
}

export async function runPostExec(options: PostExecOptions, io: Io): Promise<number> {
  const settings = await loadSettings(options, io);
  const { signer } = resolveSigner(options, io);
  const result = await withEngine(settings, signer, (engine) =>
    engine.postExec({
      session_id: options.session,
      call_number: options.call,
      actual_cost_usd: options.actual,
    }),
  );
  printJson(io, result);
  return 0;
}

export function registerEvaluate(program: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    addStoreOptions(
      program
        .command("evaluate")
        .description("ask Leash whether a session may run a tool call now; print the engine's result as JSON")
        .requiredOption("--session <id>", "session id (from `leash session create`)", nonEmpty)
        .requiredOption("--tool <name>", "the tool's name", nonEmpty)
        .option(
          "--params <json>",
          "the call's params as JSON, or @FILE to read them from a file (@- for stdin)",
        )
        .option("--nonce <n>", "a fresh replay token per dispatch (digits are read as a number)", nonce)
        .option(
          "--estimate <usd>",
          "estimated cost in USD (exact decimal), held against the budget on ALLOW; under a budget a call needs one unless the guard config has default_estimate_usd / tool_estimates_usd",
          moneyText,
        )
        .option(
          "--policy <file>",
          "an operator's policy (YAML/JSON): its rules judge the call after SP/1.0's decide (reason policy_violation:rule:<name>, …)",
        ),
    ),
  )
    .addHelpText(
      "after",
      `
The JSON includes \`receipt\`: a compact JWS (EdDSA) of the decision's signed audit chain entry
(\`entry_seq\`, \`entry_hash\`). Keep it; anyone with the public key can check it offline:
  leash receipt verify "$RECEIPT" --pubkey leash.pub.hex

Exit status (scripts can branch on it; run the tool only on 0):
  0  ALLOW — run the tool, then report its cost with \`leash post-exec --call <call_number>\`
  ${EXIT_DENY}  DENY  — do not run it; \`reason\` says why
  ${EXIT_HITL}  HITL  — do not run it yet; a human decides with \`leash hitl approve|reject|modify <hitl_request_id>\`
  1  the engine refused the request (unknown session, store error)
  2  bad flags, params, config, signing key or store URL

Example:
  leash evaluate --session "$S" --tool search --params '{"q":"x"}' --nonce "$RANDOM" --estimate 0.01
  case $? in 0) run_tool ;; 3) echo denied ;; 4) echo "waiting for a human" ;; *) exit 1 ;; esac`,
    )
    .action(async (options: EvaluateOptions) => {
      setExit(await runEvaluate(options, io));
    });

  addKeyOptions(
    addStoreOptions(
      program
        .command("post-exec")
        .description(
          "report an allowed call's actual cost: settle its budget hold and print the result as JSON",
        )
        .requiredOption("--session <id>", "session id", nonEmpty)
        .requiredOption("--call <n>", "the call_number evaluate printed", positiveInteger)
        .requiredOption("--actual <usd>", "what the call actually cost in USD (exact decimal)", moneyText),
    ),
  )
    .addHelpText(
      "after",
      "\nReporting the same call again is a no-op (`replayed: true`). Amounts print as exact decimal strings.\nExit status: 0 settled, 1 refused (unknown session, no hold for that call), 2 bad flags, config, signing key or store URL.",
    )
    .action(async (options: PostExecOptions) => {
      setExit(await runPostExec(options, io));
    });
}
