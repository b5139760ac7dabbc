// The console's control WebSocket: JSON ConsoleRequests answered from the HITL queue, each limited to the
// organizations the operator's token covers, and the queue's updates pushed out. Not HTTP, nor sign-in.
import { create, fromJsonString, toJsonString } from "@bufbuild/protobuf";
import {
  type ConsoleEvent,
  ConsoleEventSchema,
  type ConsoleRequest,
  ConsoleRequestSchema,
  ErrorCode,
  ErrorSchema,
  HitlStatus,
} from "@leash/wire";
import type { Logger } from "pino";
import type { RawData, WebSocket } from "ws";
import { hitlErrorPayload } from "../handler.js";
import { HitlError } from "../hitl/errors.js";
import type { HitlQueue } from "../hitl/queue.js";
import { covers, type Operator } from "./tokens.js";

export interface ControlOptions {
  readonly hitl: HitlQueue;
  readonly logger: Logger;
  readonly daemonVersion: string;
  readonly nowNs: () => number;
  /** Open control sockets and whose token each is (updates go only to the organizations it covers). */
  readonly sockets: Map<WebSocket, Operator>;
}

const sendEvent = (ws: WebSocket, event: ConsoleEvent) => {
  if (ws.readyState === ws.OPEN) ws.send(toJsonString(ConsoleEventSchema, event));
};

const errorEvent = (correlationId: string, code: ErrorCode, detail: string, message: string) =>
  create(ConsoleEventSchema, {
    correlationId,
    event: { case: "error", value: create(ErrorSchema, { code, detail, message }) },
  });

async function answerRequest(
  hitl: HitlQueue,
  request: ConsoleRequest,
  operator: Operator,
): Promise<ConsoleEvent> {
  const id = request.correlationId;
  switch (request.request.case) {
    case "list": {
      const { sessionId, status } = request.request.value;
      const requests = (await hitl.list({ sessionId, status })).filter((r) =>
        covers(operator, r.organizationId),
      );
      return create(ConsoleEventSchema, { correlationId: id, event: { case: "list", value: { requests } } });
    }
    case "get": {
      const view = await hitl.get(request.request.value.requestId);
      // Another organization's request is answered as one that does not exist.
      if (view === null || !covers(operator, view.organizationId))
        throw new HitlError("hitl_request_not_found", "no such HITL request");
      return create(ConsoleEventSchema, { correlationId: id, event: { case: "request", value: view } });
    }
    case "answer": {
      if (operator.readonly) {
        throw new HitlError(
          "hitl_read_only",
          `operator ${operator.id} has a read-only token: it cannot answer`,
        );
      }
      const { requestId, decision } = request.request.value;
      const target = await hitl.get(requestId);
      if (target === null || !covers(operator, target.organizationId))
        throw new HitlError("hitl_request_not_found", "no such HITL request");
      // The operator is the token's identity, whatever the page says.
      const view = await hitl.answer(requestId, decision, operator.id);
      return create(ConsoleEventSchema, { correlationId: id, event: { case: "request", value: view } });
    }
    default:
      return errorEvent(id, ErrorCode.INVALID_MESSAGE, "not_a_request", "the message names no request");
  }
}

/** A control socket just upgraded: greeted, sent the requests its token covers, then answered. */
export function connected(options: ControlOptions, ws: WebSocket, operator: Operator): void {
  const { hitl, logger, sockets } = options;
  sockets.set(ws, operator);
  logger.info({ operator: operator.id, readonly: operator.readonly }, "console connected");
  sendEvent(
    ws,
    create(ConsoleEventSchema, {
      event: {
        case: "hello",
        value: {
          operatorId: operator.id,
          readonly: operator.readonly,
          daemonVersion: options.daemonVersion,
          daemonTimeNs: BigInt(Math.trunc(options.nowNs())),
        },
      },
    }),
  );
  void hitl
    .list({ status: HitlStatus.HITL_STATUS_UNSPECIFIED })
    .then((all) => {
      const requests = all.filter((r) => covers(operator, r.organizationId));
      sendEvent(ws, create(ConsoleEventSchema, { event: { case: "list", value: { requests } } }));
    })
    .catch((error: unknown) => logger.warn({ err: error }, "console: listing requests failed"));
  ws.on("message", (data, isBinary) => onMessage(options, ws, operator, data, isBinary));
  ws.on("close", () => sockets.delete(ws));
  ws.on("error", () => sockets.delete(ws));
}

function onMessage(
  options: ControlOptions,
  ws: WebSocket,
  operator: Operator,
  data: RawData,
  isBinary: boolean,
) {
  if (isBinary) {
    return sendEvent(
      ws,
      errorEvent("", ErrorCode.INVALID_MESSAGE, "binary_frame", "send text frames (JSON)"),
    );
  }
  let request: ConsoleRequest;
  try {
    request = fromJsonString(ConsoleRequestSchema, data.toString());
  } catch (error) {
    return sendEvent(
      ws,
      errorEvent(
        "",
        ErrorCode.INVALID_MESSAGE,
        "invalid_json",
        `not a ConsoleRequest: ${(error as Error).message}`,
      ),
    );
  }
  answerRequest(options.hitl, request, operator)
    .then((event) => sendEvent(ws, event))
    .catch((error: unknown) => {
      if (HitlError.isInstance(error)) {
        const e = hitlErrorPayload(error).value;
        return sendEvent(ws, errorEvent(request.correlationId, e.code, e.detail, e.message));
      }
      options.logger.warn({ err: error }, "console request failed inside the daemon");
      sendEvent(
        ws,
        errorEvent(request.correlationId, ErrorCode.DAEMON_UNAVAILABLE, "internal", "internal error"),
      );
    });
}

/** Pushes each queue change to the sockets whose token covers its organization; returns the unsubscribe. */
export function broadcastUpdates(hitl: HitlQueue, sockets: Map<WebSocket, Operator>): () => void {
  return hitl.subscribe((kind, view) => {
    const event = create(ConsoleEventSchema, {
      event: { case: "update", value: { request: view, final: kind !== "opened" } },
    });
    for (const [ws, operator] of sockets) if (covers(operator, view.organizationId)) sendEvent(ws, event);
  });
}
