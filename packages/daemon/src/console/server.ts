// The HITL web console (spec §6.3): an HTTP server for the one static page and the control WebSocket,
// which carries JSON-encoded @leash/wire ConsoleRequest / ConsoleEvent messages. Operators only:
// every byte past the login form needs a console token; the queue and answers are hitl/queue.ts's.
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { create, fromJsonString, toJsonString } from "@bufbuild/protobuf";
import {
  type ConsoleEvent,
  ConsoleEventSchema,
  type ConsoleRequest,
  ConsoleRequestSchema,
  ErrorCode,
  ErrorSchema,
  HitlStatus,
  MAX_FRAME_BYTES,
} from "@leash/wire";
import type { Logger } from "pino";
import { type WebSocket, WebSocketServer } from "ws";
import { isLoopback } from "../grpc.js";
import { hitlErrorPayload } from "../handler.js";
import { HitlError } from "../hitl/errors.js";
import type { HitlQueue } from "../hitl/queue.js";
import { parseHostPort } from "../http.js";
import { ConsoleConfigError, type ConsoleToken, covers, type Operator, operatorOf } from "./tokens.js";

export interface ConsoleOptions {
  /** "HOST:PORT"; port 0 picks a free one. */
  readonly listen: string;
  readonly tokens: readonly ConsoleToken[];
  /**
   * Serve on a non-loopback address although the console speaks plain HTTP (`--console-insecure`):
   * only behind a TLS-terminating proxy on a network nobody else reaches.
   */
  readonly insecure?: boolean;
}

export interface ConsoleServerOptions extends ConsoleOptions {
  readonly hitl: HitlQueue;
  readonly logger: Logger;
  readonly daemonVersion: string;
  readonly nowNs: () => number;
}

export interface ConsoleServer {
  /** "host:port" as bound. */
  readonly address: string;
  /** http://host:port/ */
  readonly url: string;
  close(): Promise<void>;
}

export const CONTROL_PATH = "/v1/control";
const COOKIE = "leash_console";
const LOGIN_MAX_BYTES = 4096;
const LOGIN_TTL_MS = 12 * 3600_000;
/** Browser sessions one token may hold; its oldest is signed out past that (never another token's). */
export const LOGINS_PER_TOKEN = 16;
const ASSETS: Record<string, { file: string; type: string }> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/console.js": { file: "console.js", type: "text/javascript; charset=utf-8" },
  "/console.css": { file: "console.css", type: "text/css; charset=utf-8" },
};
const ASSET_DIR = new URL("../../console/", import.meta.url);
const HEADERS = {
  "Cache-Control": "no-store",
  "X-Content-Type-Options": "nosniff",
  "X-Frame-Options": "DENY",
  "Referrer-Policy": "same-origin", // no-referrer would make a form POST's Origin "null"
  // Nothing but this origin: no CDN, no inline script, no framing.
  "Content-Security-Policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
};

const LOGIN_PAGE = (message: string) => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Leash console — sign in</title><link rel="stylesheet" href="/console.css"></head>
<body class="login"><main><h1>Leash HITL console</h1>
<p class="login-status" role="alert">${message}</p>
<form method="post" action="/login"><label for="token">Console token</label>
<input id="token" name="token" type="password" autocomplete="off" required autofocus>
<button type="submit">Sign in</button></form></main></body></html>`;

function cookieOf(request: IncomingMessage): string | undefined {
  for (const part of (request.headers.cookie ?? "").split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === COOKIE) return rest.join("=");
  }
  return undefined;
}

function bearerOf(request: IncomingMessage): string | undefined {
  const header = request.headers.authorization;
  return header?.startsWith("Bearer ") ? header.slice(7).trim() : undefined;
}

/** Same origin: a browser's Origin must name this very host (scheme http, the Host header's authority). */
function sameOrigin(request: IncomingMessage): boolean {
  const origin = request.headers.origin;
  if (origin === undefined) return true; // not a browser: the token alone authenticates it
  return origin === `http://${request.headers.host ?? ""}`;
}

export async function listenConsole(options: ConsoleServerOptions): Promise<ConsoleServer> {
  let host: string;
  let port: number;
  try {
    ({ host, port } = parseHostPort(options.listen));
  } catch {
    throw new ConsoleConfigError(
      "console_listen_invalid",
      `--console wants HOST:PORT (e.g. 127.0.0.1:8788), not ${JSON.stringify(options.listen)}`,
    );
  }
  if (!isLoopback(host) && options.insecure !== true) {
    throw new ConsoleConfigError(
      "console_insecure",
      `--console ${options.listen} is not a loopback address, and the console speaks plain HTTP (tokens and session cookies in the clear): listen on 127.0.0.1 behind a TLS reverse proxy, or give --console-insecure`,
    );
  }
  if (options.tokens.length === 0) {
    throw new ConsoleConfigError(
      "console_tokens_invalid",
      "the console needs at least one token (--console-tokens FILE)",
    );
  }
  const { hitl, logger } = options;
  /** Signed-in browsers: a random id in an HttpOnly cookie → the token's operator (the raw token is not kept). */
  const logins = new Map<string, { operator: Operator; until: number }>();
  /** Each token's signed-in session ids, oldest first: a token's sign-ins evict only its own. */
  const loginsOf = new Map<string, string[]>();
  /** Open control sockets and whose token each is (updates go only to the organizations it covers). */
  const sockets = new Map<WebSocket, Operator>();

  function addLogin(operator: Operator): string {
    const now = Date.now();
    const mine = (loginsOf.get(operator.token) ?? []).filter((id) => {
      const login = logins.get(id);
      if (login !== undefined && login.until >= now) return true;
      logins.delete(id);
      return false;
    });
    while (mine.length >= LOGINS_PER_TOKEN) logins.delete(mine.shift()!);
    const id = randomBytes(32).toString("base64url");
    logins.set(id, { operator, until: now + LOGIN_TTL_MS });
    mine.push(id);
    loginsOf.set(operator.token, mine);
    return id;
  }

  function operatorFor(request: IncomingMessage): Operator | null {
    const bearer = bearerOf(request);
    if (bearer !== undefined) return operatorOf(options.tokens, bearer);
    const id = cookieOf(request);
    const login = id === undefined ? undefined : logins.get(id);
    if (login === undefined) return null;
    if (login.until < Date.now()) {
      logins.delete(id!);
      return null;
    }
    return login.operator;
  }

  function send(res: ServerResponse, status: number, type: string, body: string | Buffer, extra = {}) {
    res.writeHead(status, { ...HEADERS, "Content-Type": type, ...extra });
    res.end(body);
  }

  async function login(req: IncomingMessage, res: ServerResponse) {
    let size = 0;
    const chunks: Buffer[] = [];
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > LOGIN_MAX_BYTES) return send(res, 413, "text/plain", "too large");
      chunks.push(chunk as Buffer);
    }
    const token = new URLSearchParams(Buffer.concat(chunks).toString("utf8")).get("token") ?? "";
    const operator = operatorOf(options.tokens, token.trim());
    if (operator === null) {
      logger.warn({ remote: req.socket.remoteAddress }, "console sign-in refused");
      return send(res, 401, "text/html; charset=utf-8", LOGIN_PAGE("That token is not valid."));
    }
    const id = addLogin(operator);
    logger.info({ operator: operator.id }, "console sign-in");
    res.writeHead(303, {
      ...HEADERS,
      Location: "/",
      "Set-Cookie": `${COOKIE}=${id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${LOGIN_TTL_MS / 1000}`,
    });
    res.end();
  }

  async function onRequest(req: IncomingMessage, res: ServerResponse) {
    const path = new URL(req.url ?? "/", "http://console").pathname;
    if (path === "/login" && req.method === "POST") {
      if (!sameOrigin(req)) return send(res, 403, "text/plain", "cross-origin sign-in refused");
      return login(req, res);
    }
    const asset = ASSETS[path];
    if (req.method !== "GET" && req.method !== "HEAD")
      return send(res, 405, "text/plain", "method not allowed");
    // The stylesheet carries no data; the login page needs it.
    if (path !== "/console.css" && operatorFor(req) === null) {
      return send(res, 401, "text/html; charset=utf-8", LOGIN_PAGE("Sign in with your console token."), {
        "WWW-Authenticate": 'Bearer realm="leash-console"',
      });
    }
    if (asset === undefined) return send(res, 404, "text/plain", "not found");
    const body = await readFile(new URL(asset.file, ASSET_DIR));
    return send(res, 200, asset.type, body);
  }

  const server: Server = createServer((req, res) => {
    onRequest(req, res).catch((error: unknown) => {
      logger.warn({ err: error }, "console request failed");
      if (!res.headersSent) send(res, 500, "text/plain", "internal error");
      else res.destroy();
    });
  });
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME_BYTES });

  const refuseUpgrade = (socket: Duplex, status: string) => {
    socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  };

  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = new URL(req.url ?? "/", "http://console").pathname;
    if (path !== CONTROL_PATH) return refuseUpgrade(socket, "404 Not Found");
    if (!sameOrigin(req)) {
      logger.warn({ origin: req.headers.origin }, "console upgrade from another origin refused");
      return refuseUpgrade(socket, "403 Forbidden");
    }
    const operator = operatorFor(req);
    if (operator === null) return refuseUpgrade(socket, "401 Unauthorized");
    wss.handleUpgrade(req, socket, head, (ws) => connected(ws, operator));
  });

  const sendEvent = (ws: WebSocket, event: ConsoleEvent) => {
    if (ws.readyState === ws.OPEN) ws.send(toJsonString(ConsoleEventSchema, event));
  };
  const errorEvent = (correlationId: string, code: ErrorCode, detail: string, message: string) =>
    create(ConsoleEventSchema, {
      correlationId,
      event: { case: "error", value: create(ErrorSchema, { code, detail, message }) },
    });

  async function answerRequest(request: ConsoleRequest, operator: Operator): Promise<ConsoleEvent> {
    const id = request.correlationId;
    switch (request.request.case) {
      case "list": {
        const { sessionId, status } = request.request.value;
        const requests = (await hitl.list({ sessionId, status })).filter((r) =>
          covers(operator, r.organizationId),
        );
        return create(ConsoleEventSchema, {
          correlationId: id,
          event: { case: "list", value: { requests } },
        });
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

  function connected(ws: WebSocket, operator: Operator) {
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
    ws.on("message", (data, isBinary) => {
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
      answerRequest(request, operator)
        .then((event) => sendEvent(ws, event))
        .catch((error: unknown) => {
          if (HitlError.isInstance(error)) {
            const e = hitlErrorPayload(error).value;
            return sendEvent(ws, errorEvent(request.correlationId, e.code, e.detail, e.message));
          }
          logger.warn({ err: error }, "console request failed inside the daemon");
          sendEvent(
            ws,
            errorEvent(request.correlationId, ErrorCode.DAEMON_UNAVAILABLE, "internal", "internal error"),
          );
        });
    });
    ws.on("close", () => sockets.delete(ws));
    ws.on("error", () => sockets.delete(ws));
  }

  const unsubscribe = hitl.subscribe((kind, view) => {
    const event = create(ConsoleEventSchema, {
      event: { case: "update", value: { request: view, final: kind !== "opened" } },
    });
    for (const [ws, operator] of sockets) if (covers(operator, view.organizationId)) sendEvent(ws, event);
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const bound = server.address();
  const actualPort = typeof bound === "object" && bound !== null ? bound.port : port;
  const address = host.includes(":") ? `[${host}]:${actualPort}` : `${host}:${actualPort}`;
  return {
    address,
    url: `http://${address}/`,
    close() {
      unsubscribe();
      for (const ws of sockets.keys()) ws.terminate();
      wss.close();
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
