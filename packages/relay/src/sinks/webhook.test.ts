// The webhook sink against real HTTP servers on 127.0.0.1, through a relay on a real SQLite outbox:
// 5xx then 2xx, timeouts, a closed port, 4xx made DEAD, batch mode — every request's HMAC checked.

import { createHmac } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { ChainEntryRecord } from "@leash/core";
import { requeueDead } from "@leash/outbox";
import { afterEach, describe, expect, it } from "vitest";
import {
  appendEntries,
  closedPort,
  counts,
  eventually,
  isAscending,
  openStore,
  type Store,
  seqsBySession,
  startServer,
  type TestServer,
} from "../../test/support.js";
import { RelayError } from "../errors.js";
import { parseEntryLine } from "../ndjson.js";
import { createRelay, type Relay } from "../relay.js";
import { createWebhookSink, verifyWebhookSignature } from "./webhook.js";

const SECRET = "shared-secret-for-tests";
const stores: Store[] = [];
const servers: TestServer[] = [];
const relays: Relay[] = [];

afterEach(async () => {
  await Promise.allSettled(relays.splice(0).map((r) => r.stop()));
  await Promise.allSettled(servers.splice(0).map((s) => s.close()));
  await Promise.allSettled(stores.splice(0).map((s) => s.close()));
});

async function sqliteStore(): Promise<Store> {
  const s = await openStore("sqlite");
  stores.push(s);
  return s;
}

interface Received {
  key: string;
  entries: ChainEntryRecord[];
  signatureOk: boolean;
}

/**
 * A receiver that checks each request's signature over the raw bytes, parses the entries, and answers
 * what `answer` says; it records every request, and the entries it accepted (2xx) deduplicated by entry_id.
 */
async function receiver(
  answer: (request: Received, index: number, res: ServerResponse) => number | "hang",
  port = 0,
): Promise<{ server: TestServer; requests: Received[]; accepted: Map<string, ChainEntryRecord> }> {
  const requests: Received[] = [];
  const accepted = new Map<string, ChainEntryRecord>();
  const server = await startServer((req: IncomingMessage, body: Buffer, res: ServerResponse) => {
    const signatureOk = verifyWebhookSignature(body, req.headers["x-leash-signature"] as string, SECRET);
    const parsed = JSON.parse(body.toString("utf8")) as { entries: unknown[] };
    const entries = parsed.entries.map((e) => parseEntryLine(JSON.stringify(e)));
    const request = { key: req.headers["idempotency-key"] as string, entries, signatureOk };
    requests.push(request);
    const status = signatureOk ? answer(request, requests.length - 1, res) : 401;
    if (status === "hang") return;
    if (status >= 200 && status < 300)
      for (const e of entries) if (!accepted.has(e.entry_id)) accepted.set(e.entry_id, e);
    res.statusCode = status;
    res.end(status === 422 ? "schema mismatch" : "");
  }, port);
  servers.push(server);
  return { server, requests, accepted };
}

function relay(options: Parameters<typeof createRelay>[0]): Relay {
  const r = createRelay(options);
  relays.push(r);
  return r;
}

const SESSIONS = ["alpha", "beta", null];
const sessions = (n: number) => Array.from({ length: n }, (_, i) => SESSIONS[i % SESSIONS.length]!);

describe("webhook sink", () => {
  it("retries through 500s until 200: nothing lost, each entry accepted once, in order, HMAC valid", async () => {
    const { substrate } = await sqliteStore();
    const appended = await appendEntries(substrate, sessions(12));
    const { server, requests, accepted } = await receiver((_, i) => (i < 3 ? 500 : 200));
    const sink = createWebhookSink({ url: server.url, secret: SECRET, timeoutMs: 2000 });
    const r = relay({
      substrate,
      sink,
      batchSize: 5,
      leaseMs: 5000,
      pollMs: 5,
      backoff: { baseMs: 5, maxMs: 20 },
    });
    r.start();
    expect(await eventually(async () => (await counts(substrate)).DELIVERED === 12)).toBe(true);
    await r.stop();

    expect(requests.every((q) => q.signatureOk)).toBe(true);
    // One entry per request, keyed by its entry_id.
    expect(requests.every((q) => q.entries.length === 1 && q.key === q.entries[0]!.entry_id)).toBe(true);
    expect([...accepted.values()]).toHaveLength(12);
    expect(new Set(requests.filter((_, i) => i >= 3).map((q) => q.key)).size).toBe(requests.length - 3);
    for (const e of appended) expect(accepted.get(e.entry_id)).toEqual(e);
    for (const [, seqs] of seqsBySession([...accepted.values()])) expect(isAscending(seqs)).toBe(true);
    const stats = await r.stats();
    // One failed round of entries 0–4: the first entry of alpha, beta and the null session each got a
    // 500 (an HTTP error holds up only its own session, so all three were tried); 3 and 4 waited.
    expect(stats).toMatchObject({ failed: 3, blocked: 2, unsent: 0, delivered: 12 });
    expect(stats.lastError).toBe("HTTP 500 Internal Server Error");
  });

  it("treats a request that outlives its timeout as retryable, and delivers once the server answers", async () => {
    const { substrate } = await sqliteStore();
    await appendEntries(substrate, sessions(3));
    const { server, requests, accepted } = await receiver((_, i) => (i < 2 ? "hang" : 200));
    const sink = createWebhookSink({ url: server.url, secret: SECRET, timeoutMs: 100 });
    const r = relay({ substrate, sink, leaseMs: 5000 });
    const started = performance.now();
    expect(await r.runOnce()).toMatchObject({ claimed: 3, delivered: 0, failed: 1, unsent: 2 });
    // The sink stopped after the first timeout instead of waiting out one per entry.
    expect(performance.now() - started).toBeLessThan(1000);
    expect(requests).toHaveLength(1);
    const items = await substrate.transaction((tx) => tx.outbox.list({}));
    expect(items[0]!.last_error).toBe("timeout after 100 ms");
    expect(items[1]!.last_error).toMatch(/^not sent: an earlier request failed \(timeout after 100 ms\)$/);
    // Only the entry that was sent counts the try.
    expect(items.map((i) => i.attempts)).toEqual([1, 0, 0]);
    expect(await r.runOnce()).toMatchObject({ delivered: 0, failed: 1, unsent: 2 });
    expect(await r.drain()).toMatchObject({ delivered: 3 });
    expect(accepted.size).toBe(3);
    expect(await counts(substrate)).toEqual({ PENDING: 0, DELIVERED: 3, DEAD: 0 });
  });

  it("a closed port is retryable: nothing is lost, and delivery resumes when the server comes up", async () => {
    const { substrate } = await sqliteStore();
    await appendEntries(substrate, sessions(4));
    const port = await closedPort();
    const sink = createWebhookSink({ url: `http://127.0.0.1:${port}/hook`, secret: SECRET, timeoutMs: 1000 });
    const r = relay({ substrate, sink, leaseMs: 5000, maxAttempts: 3 });
    // No answer at all: the endpoint is down for everyone, so the sink stops; the rest go back untried.
    for (let round = 0; round < 2; round++) {
      expect(await r.runOnce()).toMatchObject({ claimed: 4, delivered: 0, failed: 1, unsent: 2, blocked: 1 });
    }
    const items = await substrate.transaction((tx) => tx.outbox.list({}));
    expect(items.every((i) => i.status === "PENDING" && i.claimed_by === null)).toBe(true);
    expect(items[0]!.last_error).toContain("ECONNREFUSED");
    // Two rounds against maxAttempts 3: only the entry that was tried used any up.
    expect(items.map((i) => i.attempts)).toEqual([2, 0, 0, 0]);

    const { accepted } = await receiver(() => 200, port);
    expect(await r.drain()).toMatchObject({ delivered: 4, dead: 0 });
    expect(accepted.size).toBe(4);
  });

  it("makes a 4xx (and an unfollowed redirect) DEAD with its reason, holding its session up until requeued; 408 and 429 are retried", async () => {
    const { substrate } = await sqliteStore();
    const appended = await appendEntries(substrate, sessions(9));
    // alpha: 0 3 6, beta: 1 4 7, null: 2 5 8.
    const verdicts = new Map<number, number[]>([
      [1, [422]],
      [2, [429, 200]],
      [3, [408, 200]],
      [5, [301]],
    ]);
    const { server, requests, accepted } = await receiver((request) => {
      const plan = verdicts.get(request.entries[0]!.seq);
      return plan && plan.length > 0 ? plan.shift()! : 200;
    });
    const sink = createWebhookSink({ url: server.url, secret: SECRET });
    const r = relay({ substrate, sink, batchSize: 20, leaseMs: 5000 });
    // 0 lands, 1 dies, 429 on 2 ends the round (the endpoint asks everyone to slow down).
    expect(await r.runOnce()).toMatchObject({ delivered: 1, dead: 1, failed: 1, unsent: 1 });
    // 4 and 7 wait behind DEAD 1; 2 lands; 408 on 3 holds up only alpha (6); 301 on 5 kills it (8 waits).
    expect(await r.runOnce()).toMatchObject({ delivered: 1, dead: 1, failed: 1, blocked: 2, deferred: 2 });
    expect(await r.runOnce()).toMatchObject({ delivered: 2, deferred: 3 });
    expect(await r.runOnce()).toMatchObject({ claimed: 0, deferred: 3 });
    expect(await counts(substrate)).toEqual({ PENDING: 3, DELIVERED: 4, DEAD: 2 });
    const items = await substrate.transaction((tx) => tx.outbox.list({ status: "DEAD" }));
    expect(items.map((i) => [i.seq, i.last_error])).toEqual([
      [1, "HTTP 422 Unprocessable Entity: schema mismatch"],
      [5, "HTTP 301 Moved Permanently"],
    ]);
    expect((await r.stats()).dead).toBe(2);
    // Nothing of beta or null after their DEAD entries was sent, or counted.
    expect(requests.filter((q) => [4, 7, 8].includes(q.entries[0]!.seq))).toEqual([]);
    const waiting = await substrate.transaction((tx) => tx.outbox.list({ status: "PENDING" }));
    expect(waiting.map((i) => [i.seq, i.attempts])).toEqual([
      [4, 0],
      [7, 0],
      [8, 0],
    ]);
    // Requeued, both sessions go on in their order.
    await requeueDead(substrate, { all: true });
    expect(await r.drain()).toMatchObject({ delivered: 5, dead: 0 });
    expect([...accepted.keys()].sort()).toEqual(appended.map((e) => e.entry_id).sort());
    for (const [, seqs] of seqsBySession([...accepted.values()])) expect(isAscending(seqs)).toBe(true);
  });

  it("batch mode sends one signed request per round with a batch key, and retries it whole", async () => {
    const { substrate } = await sqliteStore();
    const appended = await appendEntries(substrate, sessions(7));
    const { server, requests, accepted } = await receiver((_, i) => (i === 0 ? 503 : 200));
    const sink = createWebhookSink({ url: server.url, secret: SECRET, batching: "batch" });
    const r = relay({ substrate, sink, batchSize: 10, leaseMs: 5000 });
    expect(await r.runOnce()).toMatchObject({ failed: 3, blocked: 4 });
    expect(await r.runOnce()).toMatchObject({ delivered: 7 });
    expect(requests).toHaveLength(2);
    expect(requests[0]!.key).toMatch(/^batch-[0-9a-f]{32}$/);
    // The same entries make the same key, so the receiver can recognise the retry.
    expect(requests[1]!.key).toBe(requests[0]!.key);
    expect(requests[1]!.entries).toEqual(appended);
    expect(accepted.size).toBe(7);
  });

  it("refuses a URL that is not http(s), an empty secret or a bad timeout", () => {
    const attempts = [
      { url: "ftp://example.com/x", secret: SECRET },
      { url: "not a url", secret: SECRET },
      { url: "http://127.0.0.1/x", secret: "" },
      { url: "http://127.0.0.1/x", secret: SECRET, timeoutMs: 0 },
    ];
    for (const options of attempts) {
      const error = (() => {
        try {
          createWebhookSink(options);
          return null;
        } catch (e) {
          return e;
        }
      })();
      expect(RelayError.isInstance(error) && error.code, JSON.stringify(options)).toBe("invalid_argument");
    }
  });

  it("verifyWebhookSignature accepts only the HMAC of the exact bytes under the same secret", () => {
    const body = Buffer.from('{"entries":[]}');
    const sink = createWebhookSink({ url: "http://127.0.0.1/x", secret: SECRET });
    expect(sink.name).toBe("webhook:http://127.0.0.1/x");
    const header = `sha256=${createHmac("sha256", SECRET).update(body).digest("hex")}`;
    expect(verifyWebhookSignature(body, header, SECRET)).toBe(true);
    expect(verifyWebhookSignature(Buffer.from('{"entries": []}'), header, SECRET)).toBe(false);
    expect(verifyWebhookSignature(body, header, "other")).toBe(false);
    expect(verifyWebhookSignature(body, undefined, SECRET)).toBe(false);
  });
});
