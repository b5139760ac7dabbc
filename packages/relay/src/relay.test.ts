// The relay on the three real substrates into the real file sink: delivery, exactly-once effect despite
// crashes, per-session order, retries and DEAD, the loop. Webhook and PostgreSQL sinks have their own files.

import { appendFileSync } from "node:fs";
import { join } from "node:path";
import type { ChainEntryRecord } from "@leash/core";
import { requeueDead, systemClock } from "@leash/outbox";
import { afterEach, describe, expect, it } from "vitest";
import {
  appendEntries,
  counts,
  eventually,
  isAscending,
  KINDS,
  manualClock,
  openStore,
  readLines,
  removeTempDirs,
  type Store,
  seqsBySession,
  tempDir,
} from "../test/support.js";
import { backoffDelay } from "./backoff.js";
import { RelayError } from "./errors.js";
import { entryLine } from "./ndjson.js";
import { createRelay, type Relay } from "./relay.js";
import { type DeliveryResult, retryable, SINK_SPECIFICATION_VERSION, type Sink } from "./sink.js";
import { FileSink, openFileSink } from "./sinks/file.js";

const stores: Store[] = [];
const relays: Relay[] = [];
const sinks: Sink[] = [];

afterEach(async () => {
  await Promise.allSettled(relays.splice(0).map((r) => r.stop()));
  await Promise.allSettled(sinks.splice(0).map((s) => s.close?.()));
  await Promise.allSettled(stores.splice(0).map((s) => s.close()));
  removeTempDirs();
});

async function store(kind: (typeof KINDS)[number]): Promise<Store> {
  const s = await openStore(kind);
  stores.push(s);
  return s;
}

async function fileSink(path: string): Promise<FileSink> {
  const sink = await openFileSink({ path });
  sinks.push(sink);
  return sink;
}

function relay(options: Parameters<typeof createRelay>[0]): Relay {
  const r = createRelay(options);
  relays.push(r);
  return r;
}

/** A sink around another that refuses chosen entries (by seq) a given number of times, keeping the order rule. */
function flaky(inner: Sink, failures: Map<number, number>): Sink & { calls: number } {
  const sink = {
    specificationVersion: SINK_SPECIFICATION_VERSION,
    name: `flaky(${inner.name})`,
    calls: 0,
    async deliver(batch: readonly ChainEntryRecord[]): Promise<DeliveryResult> {
      sink.calls++;
      const refused = new Set<string | null>();
      const pass: ChainEntryRecord[] = [];
      const plan = batch.map((entry) => {
        const left = failures.get(entry.seq) ?? 0;
        if (refused.has(entry.session_id)) return "blocked";
        if (left > 0) {
          failures.set(entry.seq, left - 1);
          refused.add(entry.session_id);
          return "refused";
        }
        pass.push(entry);
        return "pass";
      });
      const passed = (await inner.deliver(pass)).outcomes;
      let next = 0;
      return {
        outcomes: plan.map((step) =>
          step === "pass"
            ? passed[next++]!
            : retryable(step === "refused" ? "503 from the destination" : "not sent: session stalled"),
        ),
      };
    },
  };
  return sink;
}

const SESSIONS = ["alpha", "beta", null, "gamma"];
const interleaved = (n: number) => Array.from({ length: n }, (_, i) => SESSIONS[i % SESSIONS.length]!);

describe.each(KINDS)("relay on %s", (kind) => {
  it("delivers every entry into the file sink once, bodies byte for byte, and acks them all", async () => {
    const { substrate } = await store(kind);
    const appended = await appendEntries(substrate, interleaved(23));
    const path = join(tempDir(), "audit.ndjson");
    const r = relay({ substrate, sink: await fileSink(path), batchSize: 5, leaseMs: 200 });
    const drained = await r.drain();
    expect(drained).toMatchObject({ claimed: 23, delivered: 23, failed: 0, dead: 0, leaseLost: 0 });
    expect(drained.rounds).toBe(6);
    const lines = readLines(path);
    expect(lines.map((l) => l.entry_id)).toEqual(appended.map((e) => e.entry_id));
    expect(lines.map((l) => l.body)).toEqual(appended.map((e) => e.body));
    expect(await counts(substrate)).toEqual({ PENDING: 0, DELIVERED: 23, DEAD: 0 });
    const stats = await r.stats();
    expect(stats).toMatchObject({
      delivered: 23,
      failed: 0,
      dead: 0,
      lag: { pending: 0, oldestPendingAgeMs: null },
    });
  });

  it("a relay that crashes after delivering but before acking causes no duplicate: the file has each entry once", async () => {
    const st = await store(kind);
    const appended = await appendEntries(st.substrate, interleaved(12));
    const path = join(tempDir(), "audit.ndjson");
    const clock = manualClock();
    // The doomed relay writes the first 7 entries, starts an 8th (a torn line), then hangs forever: a
    // crash between deliver and ack, as seen from outside.
    const doomedFile = await fileSink(path);
    let wrote = false;
    const crashing: Sink = {
      specificationVersion: SINK_SPECIFICATION_VERSION,
      name: "crashes-before-ack",
      async deliver(batch) {
        await doomedFile.deliver(batch.slice(0, 7));
        appendFileSync(path, entryLine(batch[7]!).slice(0, 50));
        wrote = true;
        return new Promise<DeliveryResult>(() => undefined);
      },
    };
    const doomed = createRelay({
      substrate: st.substrate,
      sink: crashing,
      batchSize: 12,
      leaseMs: 150,
      clock,
    });
    void doomed.runOnce();
    expect(await eventually(() => wrote)).toBe(true);
    expect(await counts(st.substrate)).toEqual({ PENDING: 12, DELIVERED: 0, DEAD: 0 });

    // A new process: its own store handle, its own sink on the same file. Until the lease ends it finds nothing.
    const heirSink = await fileSink(path);
    expect(heirSink.stats).toMatchObject({ entries: 7, truncatedBytes: 50 });
    const heir = relay({ substrate: await st.another(), sink: heirSink, batchSize: 5, leaseMs: 150, clock });
    expect((await heir.runOnce()).claimed).toBe(0);
    clock.advanceMs(150);
    const drained = await heir.drain();
    expect(drained).toMatchObject({ claimed: 12, delivered: 12, failed: 0 });

    const lines = readLines(path);
    expect(lines.map((l) => l.entry_id)).toEqual(appended.map((e) => e.entry_id));
    expect(await counts(st.substrate)).toEqual({ PENDING: 0, DELIVERED: 12, DEAD: 0 });
    const items = await st.substrate.transaction((tx) => tx.outbox.list({}));
    expect(items.every((i) => i.attempts === 2 && i.claimed_by === heir.relayId)).toBe(true);
  });

  it("keeps each session's order when an entry fails: later entries of its session wait, others go on", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, interleaved(24));
    const path = join(tempDir(), "audit.ndjson");
    // seq 1 (beta) fails twice, seq 6 (null session) once.
    const sink = flaky(
      await fileSink(path),
      new Map([
        [1, 2],
        [6, 1],
      ]),
    );
    const r = relay({ substrate, sink, batchSize: 10, leaseMs: 200 });
    const first = await r.runOnce();
    // beta: 1 refused, 5 and 9 blocked behind it; null: 6 refused, 2 was delivered before it.
    expect(first).toMatchObject({ claimed: 10, delivered: 6, failed: 2, blocked: 2, dead: 0 });
    const items = await substrate.transaction((tx) => tx.outbox.list({ limit: 10 }));
    expect(items[5]!.last_error).toBe("blocked behind seq 1 of its session: 503 from the destination");
    expect(items[1]!).toMatchObject({
      status: "PENDING",
      last_error: "503 from the destination",
      claimed_by: null,
    });

    for (let round = 0; round < 10 && (await counts(substrate)).PENDING > 0; round++) await r.runOnce();
    expect(await counts(substrate)).toEqual({ PENDING: 0, DELIVERED: 24, DEAD: 0 });
    const lines = readLines(path);
    expect(lines).toHaveLength(24);
    for (const [session, seqs] of seqsBySession(lines)) expect(isAscending(seqs), String(session)).toBe(true);
    // The order changed across sessions (beta's 1 arrived after gamma's 3), never within one.
    expect(lines.map((l) => l.seq)).not.toEqual([...Array(24).keys()]);
  });

  it("two relays at once keep every session's order, and neither stalls for a lease", async () => {
    const st = await store(kind);
    await appendEntries(st.substrate, interleaved(60));
    const path = join(tempDir(), "audit.ndjson");
    const shared = await fileSink(path);
    // The first relay's sink is slow, so the second one's later batches would land first unless deferred.
    const slow: Sink = {
      specificationVersion: SINK_SPECIFICATION_VERSION,
      name: "slow",
      deliver: async (batch) => {
        await new Promise((resolve) => setTimeout(resolve, 15));
        return shared.deliver(batch);
      },
    };
    // Leases far longer than the test may take: progress must never wait for one to run out.
    const options = { batchSize: 4, leaseMs: 60_000, pollMs: 5 };
    const a = relay({ substrate: st.substrate, sink: slow, relayId: "a", ...options });
    const b = relay({ substrate: await st.another(), sink: shared, relayId: "b", ...options });
    a.start();
    b.start();
    expect(await eventually(async () => (await counts(st.substrate)).DELIVERED === 60, 10_000)).toBe(true);
    await Promise.all([a.stop(), b.stop()]);
    const lines = readLines(path);
    expect(lines).toHaveLength(60);
    for (const [session, seqs] of seqsBySession(lines)) expect(isAscending(seqs), String(session)).toBe(true);
    const [sa, sb] = await Promise.all([a.stats(), b.stats()]);
    expect(sa.delivered + sb.delivered).toBe(60);
    // At least one batch overlapped sessions with the other relay's and was given back.
    expect(sa.deferred + sb.deferred).toBeGreaterThan(0);
  }, 15_000);

  it("makes an entry DEAD after maxAttempts retryable failures, keeping the reason, and loses nothing else", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, ["s", "s", "t"]);
    const dir = tempDir();
    // A real sink that cannot write: its path is a directory.
    const broken = new FileSink({ path: dir });
    const r = relay({ substrate, sink: broken, batchSize: 10, leaseMs: 200, maxAttempts: 2 });
    expect(await r.runOnce()).toMatchObject({ claimed: 3, failed: 2, blocked: 1, dead: 0 });
    expect(await r.runOnce()).toMatchObject({ claimed: 3, failed: 2, blocked: 1, dead: 2 });
    const items = await substrate.transaction((tx) => tx.outbox.list({}));
    expect(items.map((i) => i.status)).toEqual(["DEAD", "PENDING", "DEAD"]);
    expect(items[0]!.last_error).toMatch(/^gave up after 2 attempts: cannot open .*EISDIR/);
    // The blocked entry was never counted against (attempts 0), and it waits behind its DEAD elder.
    expect(items[1]).toMatchObject({ attempts: 0, claimed_by: null });
    const path = join(dir, "ok.ndjson");
    const good = relay({ substrate, sink: await fileSink(path), leaseMs: 200 });
    expect(await good.drain()).toMatchObject({ delivered: 0, deferred: 1 });
    expect((await r.stats()).lastError).toContain("EISDIR");
    // Requeued, the session goes on in order.
    await requeueDead(substrate, { all: true });
    expect(await good.drain()).toMatchObject({ delivered: 3 });
    expect(readLines(path).map((l) => l.seq)).toEqual([0, 1, 2]);
  });

  it("a sink that breaks its contract or throws loses nothing: the batch is retried", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, ["s", "t"]);
    const errors: unknown[] = [];
    let mode: "short" | "throw" = "short";
    const broken: Sink = {
      specificationVersion: SINK_SPECIFICATION_VERSION,
      name: "broken",
      deliver: async () => {
        if (mode === "throw") throw new Error("socket hang up");
        return { outcomes: [{ status: "delivered" }] };
      },
    };
    const r = relay({ substrate, sink: broken, leaseMs: 200, onError: (e) => errors.push(e) });
    expect(await r.runOnce()).toMatchObject({ delivered: 0, failed: 2 });
    mode = "throw";
    expect(await r.runOnce()).toMatchObject({ delivered: 0, failed: 2 });
    expect(RelayError.isInstance(errors[0]) && errors[0].code).toBe("sink_contract");
    expect((errors[1] as Error).message).toBe("socket hang up");
    const items = await substrate.transaction((tx) => tx.outbox.list({}));
    expect(items.map((i) => [i.status, i.last_error])).toEqual([
      ["PENDING", "broken: socket hang up"],
      ["PENDING", "broken: socket hang up"],
    ]);
  });

  it("the loop backs off with growing jittered waits while the sink fails, then delivers everything", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, interleaved(30));
    const path = join(tempDir(), "audit.ndjson");
    const inner = await fileSink(path);
    const attemptsAt: number[] = [];
    let failuresLeft = 3;
    const sink: Sink = {
      specificationVersion: SINK_SPECIFICATION_VERSION,
      name: "recovering",
      deliver: async (batch) => {
        attemptsAt.push(performance.now());
        if (failuresLeft-- > 0) throw new Error("destination down");
        return inner.deliver(batch);
      },
    };
    let draws = 0;
    const r = relay({
      substrate,
      sink,
      batchSize: 4,
      leaseMs: 500,
      pollMs: 5,
      backoff: { baseMs: 40, maxMs: 100 },
      random: () => {
        draws++;
        return 0.99;
      },
    });
    r.start();
    expect(await eventually(async () => (await counts(substrate)).DELIVERED === 30, 10_000)).toBe(true);
    await r.stop();
    // One draw per failed round; the waits were 0.99 × 40, 80, then the 100 cap (minus timer slack).
    expect(draws).toBe(3);
    const gaps = [1, 2, 3].map((i) => attemptsAt[i]! - attemptsAt[i - 1]!);
    expect(gaps[0]).toBeGreaterThanOrEqual(38);
    expect(gaps[1]).toBeGreaterThanOrEqual(77);
    expect(gaps[2]).toBeGreaterThanOrEqual(97);
    const stats = await r.stats();
    expect(stats).toMatchObject({ running: false, delivered: 30, failed: 3 * 4, consecutiveFailures: 0 });
    expect(stats.lastError).toContain("destination down");
    expect(readLines(path)).toHaveLength(30);
  });

  it("never runs two rounds at once, and once stopped claims nothing more", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, interleaved(30));
    const path = join(tempDir(), "audit.ndjson");
    const inner = await fileSink(path);
    let active = 0;
    let maxActive = 0;
    const sink: Sink = {
      specificationVersion: SINK_SPECIFICATION_VERSION,
      name: "slow",
      deliver: async (batch) => {
        active++;
        maxActive = Math.max(maxActive, active);
        try {
          await new Promise((resolve) => setTimeout(resolve, 5));
          return await inner.deliver(batch);
        } finally {
          active--;
        }
      },
    };
    const r = relay({ substrate, sink, batchSize: 4, leaseMs: 500, pollMs: 5 });
    r.start();
    r.start();
    // Rounds asked for meanwhile queue behind the loop's, never beside it.
    const extra = await Promise.all([r.runOnce(), r.runOnce(), r.runOnce()]);
    expect(await eventually(async () => (await counts(substrate)).DELIVERED === 30, 10_000)).toBe(true);
    await r.stop();
    expect(maxActive).toBe(1);
    expect(extra.reduce((n, round) => n + round.claimed, 0)).toBeGreaterThan(0);
    expect(await r.stats()).toMatchObject({ running: false, delivered: 30, failed: 0 });

    await appendEntries(substrate, ["late"]);
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect((await counts(substrate)).PENDING).toBe(1);
    expect(readLines(path)).toHaveLength(30);
  });

  it("reports the lag: pending count and the oldest pending entry's age", async () => {
    const { substrate } = await store(kind);
    const clock = manualClock();
    await appendEntries(substrate, ["a", "b", "c"], clock.nowNs());
    const r = relay({ substrate, sink: await fileSink(join(tempDir(), "a.ndjson")), batchSize: 2, clock });
    clock.advanceMs(1500);
    expect((await r.stats()).lag).toEqual({ pending: 3, oldestPendingAgeMs: 1500 });
    await r.runOnce();
    expect((await r.stats()).lag).toEqual({ pending: 1, oldestPendingAgeMs: 1500 });
  });
});

describe("relay options and backoff", () => {
  it("rejects malformed options with invalid_argument", async () => {
    const { substrate } = await store("memory");
    const sink = await fileSink(join(tempDir(), "x.ndjson"));
    const bad = [
      { batchSize: 0 },
      { leaseMs: 0 },
      { maxAttempts: 0 },
      { backoff: { baseMs: 100, maxMs: 10 } },
      { pollMs: -1 },
      { relayId: " " },
    ];
    for (const options of bad) {
      const error = (() => {
        try {
          createRelay({ substrate, sink, ...options });
          return null;
        } catch (e) {
          return e;
        }
      })();
      expect(RelayError.isInstance(error) && error.code, JSON.stringify(options)).toBe("invalid_argument");
    }
    expect(createRelay({ substrate, sink, maxAttempts: Number.POSITIVE_INFINITY }).relayId).toMatch(
      /^relay:/,
    );
  });

  it("backoffDelay is full jitter under a doubling, capped ceiling", () => {
    const options = { baseMs: 100, maxMs: 1000 };
    const top = (n: number) => backoffDelay(n, options, () => 0.999999);
    expect([1, 2, 3, 4, 5, 50].map(top)).toEqual([99, 199, 399, 799, 999, 999]);
    expect(backoffDelay(3, options, () => 0)).toBe(0);
    expect(backoffDelay(3, options, () => 0.5)).toBe(200);
  });

  it("systemClock from @leash/outbox is the default clock", () => {
    expect(systemClock.nowNs()).toBeGreaterThan(1.7e18);
  });
});
