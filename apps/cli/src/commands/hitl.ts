// `leash hitl list|show|approve|reject|defer|escalate|modify`: the operator's side of human-in-the-loop, on a store.
// It shows and answers requests through the engine (answerHitl); binding, expiry and single use are the engine's rules.
import { SIGNING_KEY_ENV } from "@leash/chain";
import type { HitlRequestView, HitlStatus, HumanDecision } from "@leash/engine";
import { type Command, Option } from "commander";
import { nonEmpty } from "../args.js";
import {
  answerQuery,
  askConsole,
  type ConsoleFlags,
  getQuery,
  listQuery,
  viewOf,
  viewsOf,
} from "../console-client.js";
import { addStoreOptions, loadSettings, printJson, type StoreOptions, withEngine } from "../context.js";
import { CliError, EXIT_BAD_INPUT, type Io, parseJsonKeepingText, readSource } from "../io.js";
import { addKeyOptions, type KeyOptions, resolveSigner } from "../keys.js";

interface ListOptions extends StoreOptions, KeyOptions, ConsoleFlags {
  readonly session?: string;
  readonly status?: HitlStatus;
  readonly json?: boolean;
}

interface ShowOptions extends StoreOptions, ConsoleFlags {
  readonly json?: boolean;
}

interface AnswerOptions extends StoreOptions, KeyOptions, ConsoleFlags {
  readonly operator?: string;
  readonly comment?: string;
  readonly params?: string;
}

/**
 * Canonical JSON (no whitespace) laid out with two-space indents, token for token: number texts
 * such as `10.0` stay exactly what the digest was computed over, which JSON.parse would not keep.
 */
export function prettyCanonical(text: string): string {
  let out = "";
  let depth = 0;
  let inString = false;
  const newline = () => `\n${"  ".repeat(depth)}`;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (inString) {
      out += ch;
      if (ch === "\\") out += text[++i] ?? "";
      else if (ch === '"') inString = false;
      continue;
    }
    if (ch === '"') {
      inString = true;
      out += ch;
    } else if (ch === "{" || ch === "[") {
      const close = ch === "{" ? "}" : "]";
      if (text[i + 1] === close) {
        out += ch + close; // {} and [] stay on one line
        i++;
      } else {
        depth++;
        out += ch + newline();
      }
    } else if (ch === "}" || ch === "]") {
      depth--;
      out += newline() + ch;
    } else if (ch === ",") {
      out += `,${newline()}`;
    } else if (ch === ":") {
      out += ": ";
    } else {
      out += ch;
    }
  }
  return out;
}

/** Epoch nanoseconds as an ISO time (to the millisecond). */
function isoOf(ns: number): string {
  return new Date(Math.floor(ns / 1e6)).toISOString();
}

function expiryText(view: HitlRequestView): string {
  if (view.expires_ns === null) return "never expires (stored before expiry existed)";
  if (view.status !== "pending") return `expiry ${isoOf(view.expires_ns)}`;
  const left = Math.max(0, Math.round((view.expires_ns - Date.now() * 1e6) / 1e9));
  return `expires ${isoOf(view.expires_ns)} (in ${Math.floor(left / 60)}m ${left % 60}s)`;
}

/** A request for a person: what was asked, why, against which budget, and the params with their digest. */
export function describeRequest(view: HitlRequestView): string {
  const lines = [
    `request  ${view.request_id}`,
    `session  ${view.session_id} (call ${view.call_number}, nonce ${JSON.stringify(view.nonce)})`,
    `tool     ${view.tool_name}`,
    `status   ${view.status}; ${expiryText(view)}`,
    `reason   ${view.reason}`,
  ];
  if (view.budget !== null) {
    const { spent_usd, limit_usd, remaining_usd } = view.budget;
    lines.push(
      `budget   ${spent_usd ?? "?"} spent of ${limit_usd ?? "?"} USD, ${remaining_usd ?? "?"} remaining`,
    );
  }
  if (view.policy_id !== null) lines.push(`policy   ${view.policy_id}`);
  lines.push(`created  ${isoOf(view.created_ns)}`);
  if (view.decision !== null || view.operator_id !== null) {
    const answer = view.decision ?? "expired";
    lines.push(
      `answer   ${answer} by ${view.operator_id ?? "?"}${view.decided_ns === null ? "" : ` at ${isoOf(view.decided_ns)}`}`,
    );
  }
  if (view.comment !== null) lines.push(`comment  ${view.comment}`);
  lines.push(`digest   ${view.args_digest ?? "(none: the params could not be canonicalized)"}`);
  lines.push(
    "params",
    view.params_json === null ? "  (not stored)" : indent(prettyCanonical(view.params_json)),
  );
  if (view.successor !== null) {
    lines.push(
      `successor nonce ${JSON.stringify(view.successor.nonce)}, digest ${view.successor.args_digest}`,
    );
  }
  return `${lines.join("\n")}\n`;
}

const indent = (text: string) =>
  text
    .split("\n")
    .map((line) => `  ${line}`)
    .join("\n");

function listLine(view: HitlRequestView): string {
  const expiry = view.expires_ns === null ? "-" : isoOf(view.expires_ns);
  return `${view.request_id}  ${view.status.padEnd(8)}  ${view.tool_name}  session ${view.session_id} call ${view.call_number}  expires ${expiry}\n`;
}

/** `--params` as JSON text, `@FILE` / `@-`, or a path to a JSON file. */
async function readParams(spec: string, io: Io): Promise<{ value: Record<string, unknown>; text: string }> {
  const trimmed = spec.trimStart();
  const text = trimmed.startsWith("{")
    ? spec
    : await readSource(spec.startsWith("@") ? spec.slice(1) : spec, io);
  const value = parseJsonKeepingText(text, "--params");
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new CliError("--params must be a JSON object (the edited call's params)", EXIT_BAD_INPUT);
  }
  return { value: value as Record<string, unknown>, text };
}

/** Whether this run talks to a daemon's console; --store and --console name two different places. */
function consoleMode(options: StoreOptions & ConsoleFlags): boolean {
  if (options.console === undefined) return false;
  if (options.store !== undefined || options.config !== undefined) {
    throw new CliError(
      "--store/--config and --console are mutually exclusive: a store (library mode) or a daemon's console",
      EXIT_BAD_INPUT,
    );
  }
  return true;
}

/** --console URL and --token-file FILE: the daemon's operator channel instead of a store. */
function addConsoleOptions(command: Command): Command {
  return command
    .option(
      "--console <url>",
      "answer through a running daemon's HITL console (e.g. http://127.0.0.1:8788) instead of a store",
      nonEmpty,
    )
    .option(
      "--token-file <file>",
      "with --console: a file holding the operator's console token (default: $LEASH_CONSOLE_TOKEN)",
      nonEmpty,
    );
}

async function runAnswer(
  id: string,
  decision: HumanDecision,
  options: AnswerOptions,
  io: Io,
): Promise<number> {
  const params = decision === "modify" ? await readParams(options.params as string, io) : undefined;
  if (consoleMode(options)) {
    if (options.operator !== undefined) {
      throw new CliError(
        "--operator is refused with --console: the daemon records the console token's operator",
        EXIT_BAD_INPUT,
      );
    }
    const event = await askConsole(options, io, answerQuery(id, decision, options.comment, params?.text));
    printJson(io, viewOf(event));
    return 0;
  }
  const operatorId = options.operator;
  if (operatorId === undefined) {
    throw new CliError("required option '--operator <name>' not specified", EXIT_BAD_INPUT);
  }
  const settings = await loadSettings(options, io);
  const { signer } = resolveSigner(options, io);
  const view = await withEngine(settings, signer, (engine) =>
    engine.answerHitl(id, {
      decision,
      operatorId,
      ...(options.comment === undefined ? {} : { comment: options.comment }),
      ...(params === undefined ? {} : { params: params.value }),
    }),
  );
  printJson(io, view);
  return 0;
}

/** Whether the command was given a signing key (a flag or the environment); listing needs none. */
function hasSigningKey(options: KeyOptions, io: Io): boolean {
  return (
    options.keyFile !== undefined ||
    options.ephemeralKey === true ||
    (io.env[SIGNING_KEY_ENV] ?? "").trim() !== ""
  );
}

/**
 * `hitl list` without a key: a read that records nothing. A pending request past its expiry is shown
 * as expired (what the next signed command will record), and the status filter applies to that.
 */
async function listWithoutKey(
  settings: Awaited<ReturnType<typeof loadSettings>>,
  options: ListOptions,
): Promise<HitlRequestView[]> {
  const stored = await withEngine(settings, "read-only", (engine) =>
    engine.listHitl({
      ...(options.session === undefined ? {} : { sessionId: options.session }),
      recordExpiry: false,
    }),
  );
  const nowNs = Date.now() * 1e6;
  return stored
    .map((view) =>
      view.status === "pending" && view.expires_ns !== null && view.expires_ns <= nowNs
        ? { ...view, status: "expired" as const }
        : view,
    )
    .filter((view) => options.status === undefined || view.status === options.status);
}

const OPERATOR_HELP =
  "who decided (recorded in the audit chain); required with a store, refused with --console (the token's operator is recorded)";

const CONSOLE_HELP =
  "\nWith --console URL the daemon answers: same output and exit status; the operator is the token's identity, and a read-only token is refused (exit 1).";

const EXIT_HELP =
  "Exit status: 0 recorded, 1 refused (unknown request, already answered, expired, a store error), 2 bad flags, params, config, signing key or store URL.";

const storeOrConsole = (command: Command) => addConsoleOptions(addStoreOptions(command));

export function registerHitl(program: Command, io: Io, setExit: (code: number) => void): void {
  const hitl = program
    .command("hitl")
    .description("list, show and answer the calls waiting for a human (HITL requests)");
  registerHitlList(hitl, io, setExit);
  registerHitlShow(hitl, io, setExit);
  registerHitlAnswers(hitl, io, setExit);
  registerHitlModify(hitl, io, setExit);
}

/** `leash hitl list`: records expiries first when it has a signing key. */
function registerHitlList(hitl: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    storeOrConsole(
      hitl
        .command("list")
        .description("list HITL requests, oldest first (one line each; --json for the views)")
        .option("--session <id>", "only this session's requests", nonEmpty)
        .addOption(
          new Option("--status <status>", "only requests in this status").choices([
            "pending",
            "decided",
            "consumed",
            "expired",
          ]),
        )
        .option("--json", "print the requests as one JSON array"),
    ),
  )
    .addHelpText(
      "after",
      `\nWith a signing key, requests past their expiry are recorded as expired first (a signed entry); without one it only reads, and lists them as expired without recording it.\nExit status: 0 listed, 1 a store error, 2 bad flags, config, signing key or store URL.${CONSOLE_HELP}`,
    )
    .action(async (options: ListOptions) => {
      if (consoleMode(options)) {
        const views = viewsOf(await askConsole(options, io, listQuery(options.session, options.status)));
        if (options.json) printJson(io, views);
        else if (views.length === 0) io.stdout("no HITL requests\n");
        else for (const view of views) io.stdout(listLine(view));
        return setExit(0);
      }
      const settings = await loadSettings(options, io);
      const views = hasSigningKey(options, io)
        ? await withEngine(settings, resolveSigner(options, io).signer, (engine) =>
            engine.listHitl({
              ...(options.session === undefined ? {} : { sessionId: options.session }),
              ...(options.status === undefined ? {} : { status: options.status }),
            }),
          )
        : await listWithoutKey(settings, options);
      if (options.json) printJson(io, views);
      else if (views.length === 0) io.stdout("no HITL requests\n");
      else for (const view of views) io.stdout(listLine(view));
      setExit(0);
    });
}

/** `leash hitl show`: read-only. */
function registerHitlShow(hitl: Command, io: Io, setExit: (code: number) => void): void {
  storeOrConsole(
    hitl
      .command("show")
      .description(
        "show one request: tool, reason, budget, expiry, and the params pretty-printed with their digest",
      )
      .argument("<id>", "request id (from `leash hitl list`)")
      .option("--json", "print the request's view as JSON"),
  )
    .addHelpText(
      "after",
      `\nThe params are the canonical JSON the digest is the SHA-256 of, indented. It only reads: no signing key.\nExit status: 0 shown, 1 unknown request or a store error, 2 bad flags, config or store URL.${CONSOLE_HELP}`,
    )
    .action(async (id: string, options: ShowOptions) => {
      const view = consoleMode(options)
        ? viewOf(await askConsole(options, io, getQuery(id)))
        : await withEngine(await loadSettings(options, io), "read-only", (engine) => engine.getHitl(id));
      if (options.json) printJson(io, view);
      else io.stdout(describeRequest(view));
      setExit(0);
    });
}

/** `leash hitl approve|reject|defer|escalate`: one command per plain answer. */
function registerHitlAnswers(hitl: Command, io: Io, setExit: (code: number) => void): void {
  const answers: ReadonlyArray<[HumanDecision, string]> = [
    ["approve", "approve the paused call: exactly it (same tool, nonce and params) may run, once"],
    ["reject", "reject the paused call: the agent's re-dispatch is denied"],
    ["defer", "defer: the call is not run now; a later attempt asks again"],
    ["escalate", "escalate: the call is not run now; a later attempt asks again"],
  ];
  for (const [decision, description] of answers) {
    addKeyOptions(
      storeOrConsole(
        hitl
          .command(decision)
          .description(`${description}; print the request as JSON`)
          .argument("<id>", "request id")
          .option("--operator <name>", OPERATOR_HELP, nonEmpty)
          .option("--comment <text>", "why (recorded with the answer)"),
      ),
    )
      .addHelpText("after", `\nEach request takes one answer.\n${EXIT_HELP}${CONSOLE_HELP}`)
      .action(async (id: string, options: AnswerOptions) => {
        setExit(await runAnswer(id, decision, options, io));
      });
  }
}

/** `leash hitl modify`: allow an edited call instead. */
function registerHitlModify(hitl: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    storeOrConsole(
      hitl
        .command("modify")
        .description(
          "allow an edited call instead: the operator's params, under a successor nonce; print the request as JSON",
        )
        .argument("<id>", "request id")
        .requiredOption(
          "--params <json|file>",
          "the edited params: JSON text, @FILE, @- (stdin) or a file path",
        )
        .option("--operator <name>", OPERATOR_HELP, nonEmpty)
        .option("--comment <text>", "why (recorded with the answer)"),
    ),
  )
    .addHelpText(
      "after",
      `\nThe engine names the successor nonce and binds the params' canonical digest (spec §3.6); the original call can no longer run.\n${EXIT_HELP}${CONSOLE_HELP}`,
    )
    .action(async (id: string, options: AnswerOptions) => {
      setExit(await runAnswer(id, "modify", options, io));
    });
}
