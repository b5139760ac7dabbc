// The daemon's HTTP side door (`--http HOST:PORT`): /healthz, /readyz and /metrics for probes and Prometheus.
// Read-only: it serves no SP/1.0 request and changes nothing.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Registry } from "prom-client";

export interface HttpEndpointOptions {
  /** "HOST:PORT" ("127.0.0.1:9464"; port 0 picks a free one); "[::1]:PORT" for IPv6. */
  readonly listen: string;
  readonly registry: Registry;
  /** Null when ready, else why not (the store does not answer, the chain did not verify). */
  readonly notReady: () => Promise<string | null>;
}

export interface HttpEndpoint {
  /** "host:port" as bound. */
  readonly address: string;
  close(): Promise<void>;
}

/** Splits "HOST:PORT"; a bad one is an Error naming it. */
export function parseHostPort(text: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(text);
  const port = m === null ? Number.NaN : Number(m[3]);
  if (m === null || !(port >= 0 && port <= 65535)) {
    throw new Error(`--http wants HOST:PORT (e.g. 127.0.0.1:9464), not ${JSON.stringify(text)}`);
  }
  return { host: (m[1] ?? m[2])!, port };
}

export async function listenHttp(options: HttpEndpointOptions): Promise<HttpEndpoint> {
  const { host, port } = parseHostPort(options.listen);
  const server: Server = createServer((request, response) => {
    const path = (request.url ?? "/").split("?")[0];
    const reply = (status: number, type: string, body: string) => {
      response.writeHead(status, { "content-type": type, "cache-control": "no-store" });
      response.end(body);
    };
    if (request.method !== "GET" && request.method !== "HEAD") {
      reply(405, "text/plain", "method not allowed\n");
      return;
    }
    if (path === "/healthz") {
      reply(200, "text/plain", "ok\n");
    } else if (path === "/readyz") {
      options.notReady().then(
        (why) =>
          why === null
            ? reply(200, "text/plain", "ready\n")
            : reply(503, "text/plain", `not ready: ${why}\n`),
        (error: unknown) => reply(503, "text/plain", `not ready: ${String(error)}\n`),
      );
    } else if (path === "/metrics") {
      options.registry.metrics().then(
        (text) => reply(200, options.registry.contentType, text),
        (error: unknown) => reply(500, "text/plain", `${String(error)}\n`),
      );
    } else {
      reply(404, "text/plain", "not found: try /healthz, /readyz or /metrics\n");
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const bound = server.address() as AddressInfo;
  return {
    address: `${bound.family === "IPv6" ? `[${bound.address}]` : bound.address}:${bound.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
