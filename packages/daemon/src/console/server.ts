// The HITL web console (spec §6.3): an HTTP server for the one static page and the control WebSocket,
// which carries JSON-encoded @leash/wire ConsoleRequest / ConsoleEvent messages. Operators only:
// every byte past the login form needs a console token; the queue and answers are hitl/queue.ts's.
import { readFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { MAX_FRAME_BYTES } from "@leash/wire";
import type { Logger } from "pino";
import { type WebSocket, WebSocketServer } from "ws";
import { isLoopback } from "../grpc.js";
import type { HitlQueue } from "../hitl/queue.js";
import { parseHostPort } from "../http.js";
import { broadcastUpdates, connected } from "./control.js";
import { COOKIE, ConsoleLogins, LOGIN_TTL_MS } from "./logins.js";
import { ConsoleConfigError, type ConsoleToken, type Operator, operatorOf } from "./tokens.js";

export { LOGINS_PER_TOKEN } from "./logins.js";

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
const LOGIN_MAX_BYTES = 4096;
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

/** Same origin: a browser's Origin must name this very host (scheme http, the Host header's authority). */
function sameOrigin(request: IncomingMessage): boolean {
  const origin = request.headers.origin;
  if (origin === undefined) return true; // not a browser: the token alone authenticates it
  return origin === `http://${request.headers.host ?? ""}`;
}

/** The address to listen on, refused unless it is loopback (or insecure was asked for) and tokens exist. */
function listenAddress(options: ConsoleOptions): { host: string; port: number } {
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
  return { host, port };
}

function send(res: ServerResponse, status: number, type: string, body: string | Buffer, extra = {}) {
  res.writeHead(status, { ...HEADERS, "Content-Type": type, ...extra });
  res.end(body);
}

/** What the HTTP routes need: the tokens, the signed-in browsers and the log. */
interface HttpScope {
  readonly tokens: readonly ConsoleToken[];
  readonly logins: ConsoleLogins;
  readonly logger: Logger;
}

/** POST /login: a token in a form; a valid one gets a sign-in cookie and a redirect to the page. */
async function login(scope: HttpScope, req: IncomingMessage, res: ServerResponse) {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > LOGIN_MAX_BYTES) return send(res, 413, "text/plain", "too large");
    chunks.push(chunk as Buffer);
  }
  const token = new URLSearchParams(Buffer.concat(chunks).toString("utf8")).get("token") ?? "";
  const operator = operatorOf(scope.tokens, token.trim());
  if (operator === null) {
    scope.logger.warn({ remote: req.socket.remoteAddress }, "console sign-in refused");
    return send(res, 401, "text/html; charset=utf-8", LOGIN_PAGE("That token is not valid."));
  }
  const id = scope.logins.add(operator);
  scope.logger.info({ operator: operator.id }, "console sign-in");
  res.writeHead(303, {
    ...HEADERS,
    Location: "/",
    "Set-Cookie": `${COOKIE}=${id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${LOGIN_TTL_MS / 1000}`,
  });
  res.end();
}

async function onRequest(scope: HttpScope, req: IncomingMessage, res: ServerResponse) {
  const path = new URL(req.url ?? "/", "http://console").pathname;
  if (path === "/login" && req.method === "POST") {
    if (!sameOrigin(req)) return send(res, 403, "text/plain", "cross-origin sign-in refused");
    return login(scope, req, res);
  }
  const asset = ASSETS[path];
  if (req.method !== "GET" && req.method !== "HEAD")
    return send(res, 405, "text/plain", "method not allowed");
  // The stylesheet carries no data; the login page needs it.
  if (path !== "/console.css" && scope.logins.operatorFor(req) === null) {
    return send(res, 401, "text/html; charset=utf-8", LOGIN_PAGE("Sign in with your console token."), {
      "WWW-Authenticate": 'Bearer realm="leash-console"',
    });
  }
  if (asset === undefined) return send(res, 404, "text/plain", "not found");
  const body = await readFile(new URL(asset.file, ASSET_DIR));
  return send(res, 200, asset.type, body);
}

const refuseUpgrade = (socket: Duplex, status: string) => {
  socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
};

/** The operator an upgrade to the control socket speaks for; null once it was refused. */
function upgradeOperator(scope: HttpScope, req: IncomingMessage, socket: Duplex): Operator | null {
  const path = new URL(req.url ?? "/", "http://console").pathname;
  if (path !== CONTROL_PATH) {
    refuseUpgrade(socket, "404 Not Found");
    return null;
  }
  if (!sameOrigin(req)) {
    scope.logger.warn({ origin: req.headers.origin }, "console upgrade from another origin refused");
    refuseUpgrade(socket, "403 Forbidden");
    return null;
  }
  const operator = scope.logins.operatorFor(req);
  if (operator === null) refuseUpgrade(socket, "401 Unauthorized");
  return operator;
}

export async function listenConsole(options: ConsoleServerOptions): Promise<ConsoleServer> {
  const { host, port } = listenAddress(options);
  const { hitl, logger } = options;
  const scope: HttpScope = { tokens: options.tokens, logins: new ConsoleLogins(options.tokens), logger };
  /** Open control sockets and whose token each is (updates go only to the organizations it covers). */
  const sockets = new Map<WebSocket, Operator>();
  const control = { hitl, logger, daemonVersion: options.daemonVersion, nowNs: options.nowNs, sockets };
  const server: Server = createServer((req, res) => {
    onRequest(scope, req, res).catch((error: unknown) => {
      logger.warn({ err: error }, "console request failed");
      if (!res.headersSent) send(res, 500, "text/plain", "internal error");
      else res.destroy();
    });
  });
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME_BYTES });
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const operator = upgradeOperator(scope, req, socket);
    if (operator === null) return;
    wss.handleUpgrade(req, socket, head, (ws) => connected(control, ws, operator));
  });
  const unsubscribe = broadcastUpdates(hitl, sockets);

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
