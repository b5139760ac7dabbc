// The daemon's request handler: one authenticated request payload in, its answer payload out, any transport.
// Every decision is @leash/engine's; this maps SP/1.0 messages onto engine calls and engine errors onto Appendix B.
import { ErrorCode, errorPayload, type Payload } from "@leash/wire";
import { CallGate } from "./call-gate.js";
import { preExec } from "./handler-preexec.js";
import { heartbeat, postExec, register, sessionState, streamHitl, waitHitl } from "./handler-rpcs.js";
import type { HandlerScope } from "./handler-scope.js";
import { SessionAccess, Settlements } from "./handler-sessions.js";
import { createTailRequests, type TailRequests } from "./handler-tail.js";
import type { Answer, HandlerOptions, RequestContext, RequestHandler } from "./handler-types.js";
import { answerFor, Refusal } from "./handler-wire.js";

export type {
  Answer,
  AuthContext,
  HandlerOptions,
  RequestContext,
  RequestHandler,
} from "./handler-types.js";

const RPC_OF: Partial<Record<NonNullable<Payload["case"]>, string>> = {
  register: "Register",
  preExec: "PreExec",
  postExec: "PostExec",
  heartbeat: "Heartbeat",
  getSessionState: "GetSessionState",
  waitHitl: "WaitHitl",
  tailEntries: "TailEntries",
};

/** Requests that may append to the chain: after one, followers are told to look at once. */
const WRITES = new Set<Payload["case"]>(["register", "preExec", "postExec", "heartbeat"]);

export { MAX_TAILS } from "./handler-tail.js";
export { guardConfigToWire, hitlErrorPayload } from "./handler-wire.js";

/** The handler every transport shares. */
export function createRequestHandler(options: HandlerOptions): RequestHandler {
  const { clock, logger, metrics } = options;
  const sessions = new SessionAccess(options.engine, options.config);
  const scope: HandlerScope = {
    options,
    sessions,
    settlements: new Settlements(),
    gate: options.gate === undefined ? new CallGate() : options.gate,
    nowNs: () => BigInt(Math.trunc(clock.nowNs())),
  };
  const tails = createTailRequests({
    options,
    config: options.config,
    metrics,
    logger,
    checkSession: (sessionId, auth) => sessions.check(sessionId, auth),
  });
  const dispatch = (payload: Payload, context: RequestContext) =>
    dispatchRequest(scope, tails, payload, context);
  return {
    streamHitl: (request, context, send) => streamHitl(scope, request, context, send),
    streamTail: tails.streamTail,
    async handle(payload, context) {
      const rpc = RPC_OF[payload.case as keyof typeof RPC_OF] ?? "other";
      const stop = metrics.latency.startTimer({ rpc });
      try {
        const answer = await dispatch(payload, context);
        logger.debug({ rpc, org: context.auth.organizationId, answer: answer?.case ?? "none" }, "request");
        return answer;
      } catch (error) {
        const known = answerFor(error);
        const answer = known ?? errorPayload(new Error("internal"));
        if (known === undefined) {
          logger.warn({ rpc, err: error }, "request failed inside the daemon");
        } else {
          logger.debug(
            { rpc, code: ErrorCode[answer.value.code], detail: answer.value.detail },
            "request refused",
          );
        }
        return answer;
      } finally {
        stop();
        if (WRITES.has(payload.case)) options.tail?.feed.poke();
      }
    },
  };
}

function dispatchRequest(
  scope: HandlerScope,
  tails: TailRequests,
  payload: Payload,
  context: RequestContext,
): Promise<Answer> {
  switch (payload.case) {
    case "register":
      return register(scope, payload.value, context);
    case "preExec":
      return preExec(scope, payload.value, context);
    case "postExec":
      return postExec(scope, payload.value, context);
    case "heartbeat":
      return heartbeat(scope, payload.value, context);
    case "getSessionState":
      return sessionState(scope, payload.value, context);
    case "waitHitl":
      return waitHitl(scope, payload.value, context);
    case "tailEntries":
      return tails.tailBatch(payload.value, context);
    default:
      throw new Refusal(
        ErrorCode.INVALID_MESSAGE,
        "not_a_request",
        `a ${payload.case ?? "empty"} payload is not a request the daemon answers`,
      );
  }
}
