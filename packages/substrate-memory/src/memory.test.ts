// Memory-only behaviour the shared contract cannot ask of every substrate: private vs shared data sets,
// nested and leaked transactions, close() waiting for queued work. The port contract is memory.contract.test.ts.

import { type SessionRecord, SubstrateError, type SubstrateTx } from "@leash/core";
import { describe, expect, it } from "vitest";
import { createMemorySubstrate, deleteSharedMemory } from "./index.js";

const session = (id: string): SessionRecord => ({
  session_id: id,
  agent_id: "agent",
  organization_id: "org",
  status: "ACTIVE",
  config: {},
  state: {},
  call_count: 0,
  created_ns: 1,
  updated_ns: 1,
  last_heartbeat_ns: null,
});

async function codeOf(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  return SubstrateError.isInstance(error) ? error.code : `not a SubstrateError: ${String(error)}`;
}

describe("memory substrate", () => {
  it("declares kind memory, not durable, not multi-process", () => {
    const sub = createMemorySubstrate();
    expect(sub.kind).toBe("memory");
    expect(sub.capabilities).toEqual({ multiProcess: false, durable: false });
  });

  it("handles without a shared key each get private data", async () => {
    const a = createMemorySubstrate();
    const b = createMemorySubstrate();
    await a.transaction((tx) => tx.sessions.insert(session("s")));
    expect(await b.transaction((tx) => tx.sessions.get("s"))).toBeNull();
    expect(await a.transaction((tx) => tx.sessions.get("s"))).toEqual(session("s"));
  });

  it("handles with one shared key share data; deleteSharedMemory starts the key afresh", async () => {
    const key = `memory-test-${process.pid}-shared`;
    const a = createMemorySubstrate({ shared: key });
    await a.transaction((tx) => tx.sessions.insert(session("s")));
    await a.close();
    const b = createMemorySubstrate({ shared: key });
    expect(await b.transaction((tx) => tx.sessions.get("s"))).toEqual(session("s"));
    const other = createMemorySubstrate({ shared: `${key}-other` });
    expect(await other.transaction((tx) => tx.sessions.get("s"))).toBeNull();
    expect(deleteSharedMemory(key)).toBe(true);
    expect(deleteSharedMemory(key)).toBe(false);
    const c = createMemorySubstrate({ shared: key });
    expect(await c.transaction((tx) => tx.sessions.get("s"))).toBeNull();
    deleteSharedMemory(`${key}-other`);
    deleteSharedMemory(key);
  });

  it("a transaction started inside another on the same data fails with busy instead of deadlocking", async () => {
    const key = `memory-test-${process.pid}-nested`;
    const a = createMemorySubstrate({ shared: key, detectNestedTransactions: true });
    const b = createMemorySubstrate({ shared: key, detectNestedTransactions: true });
    const other = createMemorySubstrate();
    const codes = await a.transaction(async () => ({
      sameHandle: await codeOf(a.transaction(async () => 1)),
      sameData: await codeOf(b.transaction(async () => 1)),
      otherData: await other.transaction(async () => "ran"),
    }));
    expect(codes).toEqual({ sameHandle: "busy", sameData: "busy", otherData: "ran" });
    // After the outer transaction ended, the same context may start transactions again.
    expect(await a.transaction(async () => "ok")).toBe("ok");
    deleteSharedMemory(key);
  });

  it("stores used after their transaction ended fail with closed and write nothing", async () => {
    const sub = createMemorySubstrate();
    let leaked: SubstrateTx | undefined;
    await sub.transaction(async (tx) => {
      leaked = tx;
    });
    expect(await codeOf(leaked!.sessions.insert(session("late")))).toBe("closed");
    expect(await codeOf(leaked!.nonces.has("late", 1))).toBe("closed");
    expect(await codeOf(leaked!.chain.head())).toBe("closed");
    expect(
      await codeOf(leaked!.outbox.enqueue({ seq: 0, entry_id: "e", session_id: null, created_ns: 1 })),
    ).toBe("closed");
    expect(await sub.transaction((tx) => tx.sessions.get("late"))).toBeNull();
    expect(await sub.transaction((tx) => tx.outbox.counts())).toEqual({ PENDING: 0, DELIVERED: 0, DEAD: 0 });
  });

  it("close() refuses new work at once and resolves after queued transactions finish", async () => {
    const sub = createMemorySubstrate();
    const order: string[] = [];
    const first = sub.transaction(async (tx) => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      await tx.sessions.insert(session("queued-1"));
      order.push("first");
    });
    const second = sub.transaction(async (tx) => {
      await tx.sessions.insert(session("queued-2"));
      order.push("second");
    });
    const closed = sub.close().then(() => order.push("closed"));
    expect(await codeOf(sub.transaction(async () => 1))).toBe("closed");
    expect(await codeOf(sub.migrate())).toBe("closed");
    await Promise.all([first, second, closed]);
    expect(order).toEqual(["first", "second", "closed"]);
    await expect(sub.close()).resolves.toBeUndefined();
  });

  it("a rolled-back transaction does not block the queue", async () => {
    const sub = createMemorySubstrate();
    const failing = sub.transaction(async () => {
      throw new Error("no");
    });
    const next = sub.transaction(async () => "next");
    await expect(failing).rejects.toThrow("no");
    await expect(next).resolves.toBe("next");
  });
});
