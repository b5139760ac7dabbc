// Test support for the relay: the three real substrates and plausible chain entries (from @leash/test-stores),
// temp files, HTTP servers. Not shipped (outside src); nothing here is a mock — stores, files, sockets are real.

import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Substrate } from "@leash/core";
import { enqueueEntry } from "@leash/outbox";
import {
  entryAppender,
  openStore as openTestStore,
  type StoreKind,
  type TestStore,
} from "@leash/test-stores";

export { makeEntry, manualClock, PG_URL, STORE_KINDS as KINDS } from "@leash/test-stores";

/** One store, and as many handles on it as a test wants (two handles = two relays' connections). */
export type Store = TestStore;

// Group commit off: each test transaction commits alone, which is what the leases are about.
export const openStore = (kind: StoreKind): Promise<Store> =>
  openTestStore(kind, { label: "relay", sqlite: { groupCommit: false }, postgres: { poolSize: 4 } });

/** Appends entries after the head and queues each with the outbox's enqueueEntry, in one transaction. */
export const appendEntries = entryAppender(enqueueEntry);

const tempDirs: string[] = [];

/** A fresh temp directory; removed by `removeTempDirs()`. */
export function tempDir(prefix = "leash-relay-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

export function removeTempDirs(): void {
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** The parsed lines of an NDJSON file (none when it does not exist). */
export function readLines(path: string): Record<string, unknown>[] {
  if (!existsSync(path)) return [];
  const text = readFileSync(path, "utf8");
  return text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** Per session (null included), the seqs in the order they appear. */
export function seqsBySession(
  lines: readonly { seq?: unknown; session_id?: unknown }[],
): Map<unknown, number[]> {
  const bySession = new Map<unknown, number[]>();
  for (const line of lines) {
    const list = bySession.get(line.session_id) ?? [];
    list.push(line.seq as number);
    bySession.set(line.session_id, list);
  }
  return bySession;
}

export const isAscending = (values: readonly number[]) =>
  values.every((v, i) => i === 0 || values[i - 1]! < v);

export interface TestServer {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/** A real HTTP server on 127.0.0.1 (a random port unless given), handing each request's raw body over. */
export async function startServer(
  handler: (req: IncomingMessage, body: Buffer, res: ServerResponse) => void | Promise<void>,
  port = 0,
): Promise<TestServer> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      void Promise.resolve(handler(req, Buffer.concat(chunks), res)).catch((error: unknown) => {
        res.statusCode = 599;
        res.end(String(error));
      });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });
  const actual = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${actual}/hook`,
    port: actual,
    close: () =>
      new Promise<void>((resolve) => {
        // Keep-alive connections would hold close() open until they time out.
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A port that was just free: listened on, then closed, so a connection to it is refused. */
export async function closedPort(): Promise<number> {
  const server = await startServer(() => undefined);
  await server.close();
  return server.port;
}

/** Polls `check` until it holds or `timeoutMs` passes; returns whether it held. */
export async function eventually(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 5000,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

export const counts = (substrate: Substrate) => substrate.transaction((tx) => tx.outbox.counts());
