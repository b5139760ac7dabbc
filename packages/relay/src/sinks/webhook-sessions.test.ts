// One session's failing webhook requests against the others', on memory, SQLite and PostgreSQL outboxes:
// a real HTTP server on 127.0.0.1 refuses one session only. Attempts, order and DEAD are the store's, read back.

import type { IncomingMessage, ServerResponse } from "node:http";
import type { ChainEntryRecord, OutboxItem } from "@leash/core";
import { requeueDead } from "@leash/outbox";
import { afterEach, describe, expect, it } from "vitest";
import {
  appendEntries,
  counts,
  eventually,
  KINDS,
  openStore,
  type Store,
  startServer,
  type TestServer,
} from "../../test/support.js";
import { parseEntryLine } from "../ndjson.js";
import { createRelay, type Relay, type RelayOptions } from "../relay.js";
import { createWebhookSink } from "./webhook.js";

const SECRET = "per-session-secret";
const stores: Store[] = [];
const servers: TestServer[] = [];
const relays: Relay[] = [];

afterEach(async () => {
  await Promise.allSettled(relays.splice(0).map((r) => r.stop()));
  await Promise.allSettled(servers.splice(0).map((s) => s.close()));
  await Promise.allSettled(stores.splice(0).map((s) => s.close()));
});

/**
 * A receiver that answers 503 to every request for session "bad" while `failing` says so, 200 otherwise;
 * it records each request's seq (tried) and each accepted entry in arrival order.
 */
async function receiver(failing: () => boolean) {
  const tried: { seq: number; session: string | null }[] = [];
  const arrived: ChainEntryRecord[] = [];
  const server = await startServer((_req: IncomingMessage, body: Buffer, res: ServerResponse) => {
    const { entries } = JSON.parse(body.toString("utf8")) as { entries: unknown[] };
    const [entry] = entries.map((e) => parseEntryLine(JSON.stringify(e)));
    tried.push({ seq: entry!.seq, session: entry!.session_id });
    if (entry!.session_id === "bad" && failing()) {
      res.statusCode = 503;
      res.end("bad is down");
      return;
    }
    arrived.push(entry!);
    res.statusCode = 200;
    res.end();
  });
  servers.push(server);
  return { server, tried, arrived };
}

const seqsOf = (entries: readonly { seq: number }[]) => entries.map((e) => e.seq);
const ofSession = (entries: readonly ChainEntryRecord[], session: string) =>
  entries.filter((e) => e.session_id === session);
const outbox = (store: Store): Promise<OutboxItem[]> =>
  store.substrate.transaction((tx) => tx.outbox.list({}));

describe.each(KINDS)("webhook relay with one failing session, on %s", (kind) => {
  async function setUp(options: Partial<RelayOptions>) {
    const store = await openStore(kind);
    stores.push(store);
    // good, bad, good, bad, …: 8 entries each.
    const appended = await appendEntries(
      store.substrate,
      Array.from({ length: 16 }, (_, i) => (i % 2 === 0 ? "good" : "bad")),
    );
    let failing = true;
    const endpoint = await receiver(() => failing);
    const sink = createWebhookSink({ url: endpoint.server.url, secret: SECRET, timeoutMs: 5000 });
    const relay = createRelay({ substrate: store.substrate, sink, leaseMs: 10_000, ...options });
    relays.push(relay);
    return { store, appended, endpoint, relay, heal: () => (failing = false) };
  }

  it("the other session arrives whole, in order, once; the failing one dies by its own tries and resumes in order", async () => {
    const { store, appended, endpoint, relay, heal } = await setUp({ batchSize: 4, maxAttempts: 3 });
    const good = ofSession(appended, "good");
    const bad = ofSession(appended, "bad");

    // Rounds until nothing more can go: runOnce retries the failing session every round.
    for (let round = 0; round < 20 && (await relay.runOnce()).claimed > 0; round++);

    // Every good entry, in order, each sent and accepted exactly once.
    expect(seqsOf(ofSession(endpoint.arrived, "good"))).toEqual(seqsOf(good));
    expect(seqsOf(endpoint.tried.filter((t) => t.session === "good"))).toEqual(seqsOf(good));
    // Of bad, only its first entry was ever tried: three times, its own three attempts; then DEAD.
    expect(endpoint.tried.filter((t) => t.session === "bad").map((t) => t.seq)).toEqual([
      bad[0]!.seq,
      bad[0]!.seq,
      bad[0]!.seq,
    ]);
    const items = await outbox(store);
    const badItems = items.filter((i) => i.session_id === "bad");
    expect(badItems[0]).toMatchObject({ status: "DEAD", attempts: 3 });
    expect(badItems[0]!.last_error).toBe(
      "gave up after 3 attempts: HTTP 503 Service Unavailable: bad is down",
    );
    // The rest of bad waits behind its DEAD entry, untried: no attempt spent, none DEAD.
    for (const item of badItems.slice(1)) {
      expect(item).toMatchObject({ status: "PENDING", attempts: 0, claimed_by: null });
      expect(item.last_error).toMatch(
        new RegExp(`^waiting for seq ${bad[0]!.seq} of its session, which is DEAD`),
      );
    }
    expect(await counts(store.substrate)).toEqual({ PENDING: 7, DELIVERED: 8, DEAD: 1 });

    // The cause fixed and the DEAD entry requeued, bad arrives in order, each entry once.
    heal();
    expect(await requeueDead(store.substrate, { all: true })).toBe(1);
    expect(await relay.drain()).toMatchObject({ delivered: 8, failed: 0, dead: 0 });
    expect(seqsOf(ofSession(endpoint.arrived, "bad"))).toEqual(seqsOf(bad));
    expect(seqsOf(endpoint.arrived)).toHaveLength(16);
    expect(await counts(store.substrate)).toEqual({ PENDING: 0, DELIVERED: 16, DEAD: 0 });
  });

  it("in the loop, the failing session waits out its own backoff while the other keeps flowing", async () => {
    const { store, appended, endpoint, relay, heal } = await setUp({
      batchSize: 2,
      maxAttempts: Number.POSITIVE_INFINITY,
      pollMs: 5,
      backoff: { baseMs: 50, maxMs: 50 },
      random: () => 0.99,
    });
    const good = ofSession(appended, "good");
    const bad = ofSession(appended, "bad");
    relay.start();
    expect(
      await eventually(
        async () => (await outbox(store)).filter((i) => i.status === "DELIVERED").length === 8,
      ),
    ).toBe(true);
    // Stopped, so that no batch is in flight (leased entries show the attempt of their lease).
    await relay.stop();
    expect(seqsOf(ofSession(endpoint.arrived, "good"))).toEqual(seqsOf(good));
    // Bad's later entries were never sent while its first one kept failing, and kept no attempts.
    expect(new Set(endpoint.tried.filter((t) => t.session === "bad").map((t) => t.seq))).toEqual(
      new Set([bad[0]!.seq]),
    );
    const badItems = (await outbox(store)).filter((i) => i.session_id === "bad");
    expect(badItems.slice(1).every((i) => i.status === "PENDING" && i.attempts === 0)).toBe(true);

    heal();
    relay.start();
    expect(await eventually(async () => (await counts(store.substrate)).DELIVERED === 16)).toBe(true);
    await relay.stop();
    expect(seqsOf(ofSession(endpoint.arrived, "bad"))).toEqual(seqsOf(bad));
    const triesOfBadHead = endpoint.tried.filter((t) => t.seq === bad[0]!.seq).length;
    expect((await outbox(store)).find((i) => i.seq === bad[0]!.seq)!.attempts).toBe(triesOfBadHead);
  });
});
