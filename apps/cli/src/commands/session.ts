// `leash session create|show|reset|resume`: registers sessions and applies an operator's decisions to them.
// It prints the engine's session view as JSON; the decision rules and the HITL semantics are the engine's.
import type { Config, Nonce } from "@leash/core";
import type { HumanDecision } from "@leash/engine";
import { type Command, Option } from "commander";
import {
  digest,
  moneyNumber,
  nonce,
  nonEmpty,
  nonNegativeInteger,
  nonNegativeNumber,
  positiveNumber,
  ratio,
} from "../args.js";
import { addStoreOptions, loadSettings, printJson, type StoreOptions, withEngine } from "../context.js";
import { CliError, EXIT_BAD_INPUT, type Io } from "../io.js";
import { addKeyOptions, type KeyOptions, resolveSigner } from "../keys.js";

export interface CreateOptions extends StoreOptions, KeyOptions {
  readonly agent: string;
  readonly org?: string;
  readonly session?: string;
  readonly budget?: number;
  readonly scope?: Config["budget_scope"];
  readonly maxRepeat?: number;
  readonly errorAmplification?: boolean;
  readonly windowSeconds?: number;
  readonly windowMax?: number;
  readonly maxCalls?: number;
  readonly timeoutSeconds?: number;
  readonly hitl?: Config["hitl_mode"];
  readonly hitlThreshold?: number;
  readonly hitlTimeout?: number;
  readonly parentGuard?: string;
  readonly probabilisticDeny?: boolean;
  readonly jitter?: number;
}

/** Flag → config field; a flag that was not given leaves the config file's value alone. */
const FLAG_FIELDS: ReadonlyArray<[keyof CreateOptions, keyof Config]> = [
  ["budget", "budget_usd"],
  ["scope", "budget_scope"],
  ["maxRepeat", "max_repeat_calls"],
  ["errorAmplification", "error_amplification"],
  ["windowSeconds", "window_duration_s"],
  ["windowMax", "window_max_calls"],
  ["maxCalls", "max_total_calls"],
  ["timeoutSeconds", "timeout_seconds"],
  ["hitl", "hitl_mode"],
  ["hitlThreshold", "hitl_budget_threshold"],
  ["hitlTimeout", "hitl_timeout_s"],
  ["parentGuard", "parent_guard_id"],
  ["probabilisticDeny", "probabilistic_deny"],
  ["jitter", "deny_jitter_ratio"],
];

/** The config file's `guard`, overridden field by field by the flags given. */
export function sessionConfig(base: Config, options: CreateOptions): Config {
  const config: Record<string, unknown> = { ...base };
  for (const [flag, field] of FLAG_FIELDS) {
    if (options[flag] !== undefined) config[field] = options[flag];
  }
  // A window needs both its length and its cap; half of one would silently guard nothing.
  if ((config.window_duration_s === undefined) !== (config.window_max_calls === undefined)) {
    throw new CliError(
      "--window-seconds and --window-max go together (a time window needs both)",
      EXIT_BAD_INPUT,
    );
  }
  return config as Config;
}

export async function runSessionCreate(options: CreateOptions, io: Io): Promise<number> {
  const settings = await loadSettings(options, io);
  const config = sessionConfig(settings.file.guard, options);
  const { signer } = resolveSigner(options, io);
  const view = await withEngine(settings, signer, (engine) =>
    engine.register({
      agent_id: options.agent,
      ...(options.org === undefined ? {} : { organization_id: options.org }),
      ...(options.session === undefined ? {} : { session_id: options.session }),
      config,
    }),
  );
  printJson(io, view);
  return 0;
}

export interface ResumeOptions extends StoreOptions, KeyOptions {
  readonly decision: HumanDecision;
  readonly operator: string;
  readonly successorNonce?: Nonce;
  readonly successorDigest?: string;
}

export async function runSessionResume(sessionId: string, options: ResumeOptions, io: Io): Promise<number> {
  const hasNonce = options.successorNonce !== undefined;
  if (hasNonce !== (options.successorDigest !== undefined)) {
    throw new CliError("--successor-nonce and --successor-digest go together", EXIT_BAD_INPUT);
  }
  if (options.decision === "modify" && !hasNonce) {
    throw new CliError(
      "--decision modify needs --successor-nonce and --successor-digest (the edited call the human allows)",
      EXIT_BAD_INPUT,
    );
  }
  if (options.decision !== "modify" && hasNonce) {
    throw new CliError(
      "--successor-nonce and --successor-digest apply only to --decision modify",
      EXIT_BAD_INPUT,
    );
  }
  const settings = await loadSettings(options, io);
  const { signer } = resolveSigner(options, io);
  const view = await withEngine(settings, signer, (engine) =>
    engine.resume({
      session_id: sessionId,
      decision: options.decision,
      operator_id: options.operator,
      ...(hasNonce
        ? {
            successor: {
              nonce: options.successorNonce as Nonce,
              args_digest: options.successorDigest as string,
            },
          }
        : {}),
    }),
  );
  printJson(io, view);
  return 0;
}

const REFUSED_HELP =
  "1 the engine refused (unknown session, …), 2 bad flags, config, signing key or store URL";

export function registerSession(program: Command, io: Io, setExit: (code: number) => void): void {
  const session = program
    .command("session")
    .description("create, inspect, reset and resume guarded sessions");
  registerSessionCreate(session, io, setExit);
  registerSessionShow(session, io, setExit);
  registerSessionReset(session, io, setExit);
  registerSessionResume(session, io, setExit);
}

/** `leash session create`. */
function registerSessionCreate(session: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    addStoreOptions(
      session
        .command("create")
        .description("register a session and print it as JSON (flags override the config file's `guard`)")
        .requiredOption("--agent <id>", "the agent the session belongs to", nonEmpty)
        .option("--org <id>", "the agent's organization (default: default)", nonEmpty)
        .option(
          "--session <id>",
          "the session id (default: a new random id; an existing id is returned as is)",
          nonEmpty,
        )
        .option("--budget <usd>", "budget in USD; 0 or absent means no budget", moneyNumber)
        .addOption(
          new Option("--scope <scope>", "who shares the budget").choices([
            "session",
            "agent",
            "organization",
          ]),
        )
        .option(
          "--max-repeat <n>",
          "deny the n+1-th identical consecutive call; 0 disables",
          nonNegativeInteger,
        )
        .option("--error-amplification", "tighten the repeat limit after calls that report errors")
        .option("--no-error-amplification", "turn error amplification off even if the config file has it on")
        .option("--window-seconds <s>", "time window length (with --window-max)", nonNegativeNumber)
        .option(
          "--window-max <n>",
          "most calls per tool within the window (with --window-seconds)",
          nonNegativeInteger,
        )
        .option("--max-calls <n>", "most calls in the session's life; 0 disables", nonNegativeInteger)
        .option(
          "--timeout-seconds <s>",
          "deny calls once the session is this old; 0 disables",
          nonNegativeNumber,
        )
        .addOption(
          new Option("--hitl <mode>", "when to ask a human").choices([
            "never",
            "on_deny",
            "on_threshold",
            "always",
          ]),
        )
        .option(
          "--hitl-threshold <r>",
          "with --hitl on_threshold: ask when remaining/initial budget falls below r",
          ratio,
        )
        .option(
          "--hitl-timeout <s>",
          "how long a call waits for a human before it is denied (hitl_timeout); default 900",
          positiveNumber,
        )
        .option("--parent-guard <id>", "draw the budget from this guard (see `leash guard create`)", nonEmpty)
        .option("--probabilistic-deny", "deny at random, increasingly, under 20 % of budget left")
        .option("--no-probabilistic-deny", "turn probabilistic denial off even if the config file has it on")
        .option("--jitter <r>", "deny jitter ratio for --probabilistic-deny", ratio),
    ),
  )
    .addHelpText("after", `\nExit status: 0 created (or already there), ${REFUSED_HELP}.`)
    .action(async (options: CreateOptions) => {
      setExit(await runSessionCreate(options, io));
    });
}

/** `leash session show`: read-only. */
function registerSessionShow(session: Command, io: Io, setExit: (code: number) => void): void {
  addStoreOptions(
    session
      .command("show")
      .description("print a session (config, state, budget remaining) as JSON")
      .argument("<id>", "session id"),
  )
    .addHelpText(
      "after",
      `\nIt only reads, so it needs no signing key.\nExit status: 0 shown, 1 unknown session or a store error, 2 bad flags, config or store URL.`,
    )
    .action(async (id: string, options: StoreOptions) => {
      const view = await withEngine(await loadSettings(options, io), "read-only", (engine) =>
        engine.getSession(id),
      );
      printJson(io, view);
      setExit(0);
    });
}

/** `leash session reset`: an operator closes a tripped circuit. */
function registerSessionReset(session: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    addStoreOptions(
      session
        .command("reset")
        .description("close a tripped circuit (an operator's act) and print the session as JSON")
        .argument("<id>", "session id")
        .requiredOption("--operator <name>", "who is resetting it", nonEmpty),
    ),
  )
    .addHelpText("after", `\nExit status: 0 reset, ${REFUSED_HELP}.`)
    .action(async (id: string, options: StoreOptions & KeyOptions & { operator: string }) => {
      const settings = await loadSettings(options, io);
      const { signer } = resolveSigner(options, io);
      const view = await withEngine(settings, signer, (engine) => engine.reset(id, options.operator));
      printJson(io, view);
      setExit(0);
    });
}

/** `leash session resume`: a human decision on a paused call. */
function registerSessionResume(session: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    addStoreOptions(
      session
        .command("resume")
        .description(
          "record a human's decision on the session's paused (HITL) call and print the session as JSON",
        )
        .argument("<id>", "session id")
        .addOption(
          new Option("--decision <decision>", "the human's decision")
            .choices(["approve", "reject", "modify", "defer", "escalate"])
            .makeOptionMandatory(),
        )
        .requiredOption("--operator <name>", "who decided", nonEmpty)
        .option(
          "--successor-nonce <n>",
          "with modify: the nonce of the edited call (digits read as a number)",
          nonce,
        )
        .option(
          "--successor-digest <hex>",
          "with modify: the edited call's params digest (`leash hash`)",
          digest,
        ),
    ),
  )
    .addHelpText(
      "after",
      `\nAfter approve, the agent re-sends the paused call with the same nonce and params; after modify, the edited one.\nExit status: 0 recorded, ${REFUSED_HELP}.`,
    )
    .action(async (id: string, options: ResumeOptions) => {
      setExit(await runSessionResume(id, options, io));
    });
}
