// `leash hitl --console URL`: one WebSocket to a daemon's HITL console, JSON ConsoleRequest out, the
// ConsoleEvent with its correlation id back, mapped onto the engine's view. It decides nothing: the daemon does.
import { statSync } from "node:fs";
import { create, fromJsonString, toJsonString } from "@bufbuild/protobuf";
import { looseSecretProblem } from "@leash/daemon";
import type { HitlStatus as EngineStatus, HitlRequestView, HumanDecision } from "@leash/engine";
import {
  AnswerHitlRequestSchema,
  type ConsoleEvent,
  ConsoleEventSchema,
  type ConsoleRequest,
  ConsoleRequestSchema,
  GetHitlRequestSchema,
  HitlDecisionKind,
  HitlStatus,
  ListHitlRequestSchema,
  type HitlRequestView as WireView,
} from "@leash/wire";
import { WebSocket } from "ws";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, type Io, readSource } from "./io.js";

/** The console's control channel path (packages/daemon/src/console/server.ts CONTROL_PATH). */
const CONTROL_PATH = "/v1/control";
const TIMEOUT_MS = 30_000;

const STATUS_OF: Partial<Record<HitlStatus, EngineStatus>> = {
  [HitlStatus.HITL_PENDING]: "pending",
  [HitlStatus.HITL_DECIDED]: "decided",
  [HitlStatus.HITL_CONSUMED]: "consumed",
  [HitlStatus.HITL_EXPIRED]: "expired",
};
const WIRE_STATUS: Record<EngineStatus, HitlStatus> = {
  pending: HitlStatus.HITL_PENDING,
  decided: HitlStatus.HITL_DECIDED,
  consumed: HitlStatus.HITL_CONSUMED,
  expired: HitlStatus.HITL_EXPIRED,
};
const DECISION_KIND: Record<HumanDecision, HitlDecisionKind> = {
  approve: HitlDecisionKind.HITL_DECISION_APPROVE,
  reject: HitlDecisionKind.HITL_DECISION_REJECT,
  modify: HitlDecisionKind.HITL_DECISION_MODIFY,
  defer: HitlDecisionKind.HITL_DECISION_DEFER,
  escalate: HitlDecisionKind.HITL_DECISION_ESCALATE,
};
const DECISION_OF = new Map(
  Object.entries(DECISION_KIND).map(([name, kind]) => [kind, name as HumanDecision]),
);

const orNull = (text: string): string | null => (text === "" ? null : text);
/** The wire's 0 means "none" for times (int64 nanoseconds). */
const nsOrNull = (ns: bigint): number | null => (ns === 0n ? null : Number(ns));
const parsed = (json: string): Record<string, unknown> | null =>
  json === "" ? null : (JSON.parse(json) as Record<string, unknown>);

/** The daemon's wire view as the engine's, so both modes print the same. */
export function engineViewOf(view: WireView): HitlRequestView {
  const budget = view.budget;
  const hasBudget =
    budget !== undefined &&
    (budget.limitUsdDecimal !== "" || budget.remainingUsdDecimal !== "" || budget.spentUsdDecimal !== "");
  return {
    request_id: view.requestId,
    session_id: view.sessionId,
    call_number: Number(view.callNumber),
    tool_name: view.toolName,
    nonce: orNull(view.nonce),
    status: STATUS_OF[view.status] ?? "pending",
    reason: view.reason as HitlRequestView["reason"],
    params: parsed(view.paramsJson),
    params_json: orNull(view.paramsJson),
    args_digest: orNull(view.argsDigest),
    budget: hasBudget
      ? {
          spent_usd: orNull(budget.spentUsdDecimal),
          limit_usd: orNull(budget.limitUsdDecimal),
          remaining_usd: orNull(budget.remainingUsdDecimal),
        }
      : null,
    policy_id: orNull(view.policy),
    created_ns: Number(view.createdNs),
    expires_ns: nsOrNull(view.expiresNs),
    decided_ns: nsOrNull(view.decidedNs),
    decision: DECISION_OF.get(view.decision) ?? null,
    operator_id: orNull(view.operatorId),
    comment: orNull(view.comment),
    successor:
      view.successorNonce === ""
        ? null
        : {
            nonce: view.successorNonce,
            args_digest: view.successorArgsDigest,
            params: parsed(view.successorParamsJson),
          },
  };
}

export interface ConsoleFlags {
  readonly console?: string;
  readonly tokenFile?: string;
}

/** The operator token: --token-file FILE (first line), else $LEASH_CONSOLE_TOKEN. */
export async function consoleToken(flags: ConsoleFlags, io: Io): Promise<string> {
  if (flags.tokenFile !== undefined && flags.tokenFile !== "-") refuseLooseTokenFile(flags.tokenFile);
  const token =
    flags.tokenFile === undefined
      ? (io.env.LEASH_CONSOLE_TOKEN ?? "").trim()
      : ((await readSource(flags.tokenFile, io)).split("\n")[0] ?? "").trim();
  if (token === "") {
    throw new CliError(
      flags.tokenFile === undefined
        ? "--console needs an operator token: --token-file FILE or $LEASH_CONSOLE_TOKEN"
        : `${flags.tokenFile} holds no token`,
      EXIT_BAD_INPUT,
    );
  }
  return token;
}

function controlUrl(base: string): string {
  let url: URL;
  try {
    url = new URL(base);
  } catch {
    throw new CliError(`--console wants a URL such as http://127.0.0.1:8788, not ${JSON.stringify(base)}`, 2);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new CliError(`--console wants an http:// or https:// URL, not ${JSON.stringify(base)}`, 2);
  }
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.pathname = CONTROL_PATH;
  url.search = "";
  url.hash = "";
  return url.toString();
}

export type ConsoleQuery = ConsoleRequest["request"];

/** Connects, sends one request, and returns its answer; any refusal is a one-line CliError. */
export async function askConsole(flags: ConsoleFlags, io: Io, query: ConsoleQuery): Promise<ConsoleEvent> {
  const url = controlUrl(flags.console as string);
  const token = await consoleToken(flags, io);
  const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` } });
  const correlationId = "cli-1";
  try {
    return await new Promise<ConsoleEvent>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new CliError(`the console at ${flags.console} did not answer`, EXIT_REFUSED)),
        TIMEOUT_MS,
      );
      const fail = (error: CliError) => {
        clearTimeout(timer);
        reject(error);
      };
      ws.once("unexpected-response", (_req, res) => {
        const why =
          res.statusCode === 401 ? "the console refused the token" : "the console refused the connection";
        fail(new CliError(`${why} (HTTP ${res.statusCode})`, EXIT_REFUSED));
      });
      ws.once("error", (error) =>
        fail(new CliError(`cannot reach the console at ${flags.console}: ${error.message}`, EXIT_REFUSED)),
      );
      ws.once("open", () => {
        ws.send(
          toJsonString(ConsoleRequestSchema, create(ConsoleRequestSchema, { correlationId, request: query })),
        );
      });
      ws.on("message", (data) => {
        let event: ConsoleEvent;
        try {
          event = fromJsonString(ConsoleEventSchema, data.toString(), { ignoreUnknownFields: true });
        } catch (error) {
          return fail(
            new CliError(`the console sent a bad event: ${(error as Error).message}`, EXIT_REFUSED),
          );
        }
        if (event.correlationId !== correlationId) return; // hello, the initial list, live updates
        clearTimeout(timer);
        if (event.event.case === "error") {
          const { detail, message } = event.event.value;
          const status = detail === "hitl_invalid_params" || detail === "hitl_invalid_decision" ? 2 : 1;
          reject(new CliError(`${message} (${detail})`, status));
        } else resolve(event);
      });
    });
  } finally {
    ws.terminate();
  }
}

/** The request view a `get` or `answer` returns. */
export function viewOf(event: ConsoleEvent): HitlRequestView {
  if (event.event.case !== "request") {
    throw new CliError(
      `the console answered with ${event.event.case ?? "nothing"}, not a request`,
      EXIT_REFUSED,
    );
  }
  return engineViewOf(event.event.value);
}

export function viewsOf(event: ConsoleEvent): HitlRequestView[] {
  if (event.event.case !== "list") {
    throw new CliError(
      `the console answered with ${event.event.case ?? "nothing"}, not a list`,
      EXIT_REFUSED,
    );
  }
  return event.event.value.requests.map(engineViewOf);
}

export function listQuery(sessionId: string | undefined, status: EngineStatus | undefined): ConsoleQuery {
  return {
    case: "list",
    value: create(ListHitlRequestSchema, {
      sessionId: sessionId ?? "",
      status: status === undefined ? HitlStatus.HITL_STATUS_UNSPECIFIED : WIRE_STATUS[status],
    }),
  };
}

export function getQuery(requestId: string): ConsoleQuery {
  return { case: "get", value: create(GetHitlRequestSchema, { requestId }) };
}

export function answerQuery(
  requestId: string,
  decision: HumanDecision,
  comment: string | undefined,
  /** With modify: the edited params as the JSON text the operator wrote (the daemon canonicalizes it). */
  paramsJson: string | undefined,
): ConsoleQuery {
  return {
    case: "answer",
    value: create(AnswerHitlRequestSchema, {
      requestId,
      decision: {
        kind: DECISION_KIND[decision],
        comment: comment ?? "",
        paramsJson: paramsJson ?? "",
      },
    }),
  };
}

/** An operator token is a secret: a file group or others can read is refused, as a signing key is. */
function refuseLooseTokenFile(path: string): void {
  const info = statSync(path, { throwIfNoEntry: false });
  if (info === undefined || !info.isFile()) return; // readSource says what is wrong with it
  const loose = looseSecretProblem(path, info);
  if (loose !== null) throw new CliError(`--token-file: ${loose}`, EXIT_BAD_INPUT);
}
