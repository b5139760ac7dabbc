// Contract tests for isolation under contention: transactions raced over two handles on one location.
// Each counts outcomes from the transactions' own results, since a substrate may retry fn on serialization.

import type { Substrate } from "@leash/core";
import { SubstrateError } from "@leash/core";
import { describe, expect, it } from "vitest";
import {
  makeAccount,
  makeHitlRequest,
  makeReservation,
  makeSession,
  seedWorld,
  T0,
  WORLD,
} from "./fixtures.js";
import { CONCURRENCY_TIMEOUT_MS, raceWindow, twoHandles, useHarness } from "./harness.js";
import { spendIn } from "./nonces.js";
import type { SubstrateContractOptions } from "./options.js";

const slow = { timeout: CONCURRENCY_TIMEOUT_MS };

/** Runs `count` transactions at once, alternating between the two handles. */
function race<T>(
  handles: [Substrate, Substrate],
  count: number,
  run: (sub: Substrate, i: number) => Promise<T>,
) {
  return Promise.allSettled(Array.from({ length: count }, (_, i) => run(handles[i % 2]!, i)));
}

export function concurrencyContract(opts: SubstrateContractOptions): void {
  describe("concurrency over two handles", () => {
    it(
      "50 concurrent get → add 1 to spent → update transactions on one account lose no update",
      slow,
      async () => {
        const handles = await twoHandles(await useHarness(opts));
        await seedWorld(handles[0]);
        const results = await race(handles, 50, (sub) =>
          sub.transaction(async (tx) => {
            const account = (await tx.budgets.getAccount(WORLD.sessionAccount))!;
            await raceWindow(sub);
            const spent = String(Number(account.spent_usd) + 1);
            await tx.budgets.updateAccount({ ...account, spent_usd: spent });
            return Number(spent);
          }),
        );
        expect(results.filter((r) => r.status === "rejected")).toEqual([]);
        const written = results.map((r) => (r.status === "fulfilled" ? r.value : -1)).sort((x, y) => x - y);
        // Serial execution means every transaction saw a different predecessor: 1, 2, …, 50.
        expect(written).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
        const final = await handles[1].transaction((tx) => tx.budgets.getAccount(WORLD.sessionAccount));
        expect(final?.spent_usd).toBe("50");
      },
    );

    it(
      "20 concurrent read-modify-write transactions on one session's call_count lose no update",
      slow,
      async () => {
        const handles = await twoHandles(await useHarness(opts));
        await handles[0].transaction((tx) => tx.sessions.insert(makeSession("s-count", { call_count: 0 })));
        const results = await race(handles, 20, (sub, i) =>
          sub.transaction(async (tx) => {
            const session = (await tx.sessions.get("s-count"))!;
            await raceWindow(sub);
            const next = session.call_count + 1;
            await tx.sessions.update({
              ...session,
              call_count: next,
              state: { ...session.state, total_calls: next },
            });
            if (i % 2 === 0) await spendIn(tx, "s-count", `n-${next}`);
            return next;
          }),
        );
        const written = results.map((r) => (r.status === "fulfilled" ? r.value : -1)).sort((x, y) => x - y);
        expect(written).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
        const final = await handles[0].transaction(async (tx) => [
          (await tx.sessions.get("s-count"))?.call_count,
          (await tx.sessions.get("s-count"))?.state.total_calls,
          await tx.nonces.count("s-count"),
        ]);
        expect(final).toEqual([20, 20, 10]);
      },
    );

    it(
      'exactly one of 20 concurrent transactions spends nonce "n1"; the rest fail with "conflict"',
      slow,
      async () => {
        const handles = await twoHandles(await useHarness(opts));
        await seedWorld(handles[0]);
        const results = await race(handles, 20, (sub, i) =>
          sub.transaction(async (tx) => {
            await raceWindow(sub);
            // As the engine does: ask first (a store may answer without waiting on its unique index
            // then), append the entry spending it, and keep working (outbox) before the commit.
            const seen = await tx.nonces.has(WORLD.session1, "n1");
            if (seen) return { i, seen };
            const entry = await spendIn(tx, WORLD.session1, "n1");
            await raceWindow(sub);
            return { i, seen, seq: entry.seq };
          }),
        );
        const spent = results.flatMap((r) => (r.status === "fulfilled" && !r.value.seen ? [r.value] : []));
        expect(spent).toHaveLength(1);
        for (const r of results) {
          if (r.status === "rejected") {
            expect(SubstrateError.isInstance(r.reason), String(r.reason)).toBe(true);
            expect((r.reason as SubstrateError).code).toBe("conflict");
          }
        }
        const stored = await handles[1].transaction(async (tx) => ({
          count: await tx.nonces.count(WORLD.session1),
          chain: (await tx.chain.range(0, 100)).map((e) => [e.seq, e.nonce ?? null]),
        }));
        expect(stored).toEqual({ count: 1, chain: [[0, "n1"]] });
      },
    );

    it(
      'two concurrent transactions that both found nonce "n1" unseen: exactly one commits its entry',
      slow,
      async () => {
        const handles = await twoHandles(await useHarness(opts));
        await seedWorld(handles[0]);
        const results = await race(handles, 2, (sub) =>
          sub.transaction(async (tx) => {
            const seen = await tx.nonces.has(WORLD.session1, "n1");
            await raceWindow(sub);
            const entry = await spendIn(tx, WORLD.session1, "n1");
            await raceWindow(sub);
            return { seen, seq: entry.seq };
          }),
        );
        const committed = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
        expect(committed).toHaveLength(1);
        const lost = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
        expect((lost.reason as SubstrateError).code).toBe("conflict");
        const stored = await handles[1].transaction(async (tx) => ({
          count: await tx.nonces.count(WORLD.session1),
          chain: (await tx.chain.range(0, 100)).map((e) => [e.seq, e.nonce ?? null]),
        }));
        expect(stored).toEqual({ count: 1, chain: [[0, "n1"]] });
      },
    );

    it(
      'exactly one of 20 concurrent inserts of one session id succeeds; the rest fail with "conflict"',
      slow,
      async () => {
        const handles = await twoHandles(await useHarness(opts));
        const results = await race(handles, 20, (sub, i) =>
          sub.transaction(async (tx) => {
            await raceWindow(sub);
            await tx.sessions.insert(makeSession("s-dup", { agent_id: `agent-${i}` }));
            await raceWindow(sub);
            return i;
          }),
        );
        const winners = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
        expect(winners).toHaveLength(1);
        for (const r of results) {
          if (r.status === "rejected") {
            expect(SubstrateError.isInstance(r.reason), String(r.reason)).toBe(true);
            expect((r.reason as SubstrateError).code).toBe("conflict");
          }
        }
        const stored = await handles[1].transaction((tx) => tx.sessions.get("s-dup"));
        expect(stored?.agent_id).toBe(`agent-${winners[0]}`);
      },
    );

    it(
      "exactly one of 10 concurrent transactions settles a PENDING reservation (get locks the row)",
      slow,
      async () => {
        const handles = await twoHandles(await useHarness(opts));
        await seedWorld(handles[0]);
        await handles[0].transaction((tx) => tx.budgets.insertReservation(makeReservation("r1")));
        const results = await race(handles, 10, (sub, i) =>
          sub.transaction(async (tx) => {
            const r = (await tx.budgets.getReservation("r1"))!;
            if (r.status !== "PENDING") return null;
            await raceWindow(sub);
            await tx.budgets.updateReservation({
              ...r,
              status: "SETTLED",
              actual_usd: `0.${i + 1}`,
              resolved_ns: T0,
            });
            const account = (await tx.budgets.getAccount(WORLD.sessionAccount))!;
            await tx.budgets.updateAccount({ ...account, spent_usd: `0.${i + 1}` });
            return i;
          }),
        );
        expect(results.filter((r) => r.status === "rejected")).toEqual([]);
        const settledBy = results.flatMap((r) =>
          r.status === "fulfilled" && r.value !== null ? [r.value] : [],
        );
        expect(settledBy).toHaveLength(1);
        const final = await handles[1].transaction(async (tx) => ({
          actual: (await tx.budgets.getReservation("r1"))?.actual_usd,
          spent: (await tx.budgets.getAccount(WORLD.sessionAccount))?.spent_usd,
        }));
        expect(final).toEqual({ actual: `0.${settledBy[0]! + 1}`, spent: `0.${settledBy[0]! + 1}` });
      },
    );

    it(
      "exactly one of 10 concurrent transactions decides a PENDING HITL request (get locks the row)",
      slow,
      async () => {
        const handles = await twoHandles(await useHarness(opts));
        await seedWorld(handles[0]);
        await handles[0].transaction((tx) => tx.hitl.insert(makeHitlRequest("h1")));
        const results = await race(handles, 10, (sub, i) =>
          sub.transaction(async (tx) => {
            const h = (await tx.hitl.get("h1"))!;
            if (h.status !== "PENDING") return null;
            await raceWindow(sub);
            await tx.hitl.update({ ...h, status: "DECIDED", decision: "approve", operator_id: `op-${i}` });
            return i;
          }),
        );
        expect(results.filter((r) => r.status === "rejected")).toEqual([]);
        const decidedBy = results.flatMap((r) =>
          r.status === "fulfilled" && r.value !== null ? [r.value] : [],
        );
        expect(decidedBy).toHaveLength(1);
        const stored = await handles[1].transaction((tx) => tx.hitl.get("h1"));
        expect(stored?.operator_id).toBe(`op-${decidedBy[0]}`);
      },
    );

    it("transactions that throw while others commit leave exactly the committed writes", slow, async () => {
      const handles = await twoHandles(await useHarness(opts));
      await seedWorld(handles[0]);
      const errors = new Map<number, Error>();
      for (let i = 0; i < 12; i++) if (i % 3 !== 0) errors.set(i, new Error(`abort ${i}`));
      const results = await race(handles, 12, (sub, i) =>
        sub.transaction(async (tx) => {
          const account = (await tx.budgets.getAccount(WORLD.orgAccount))!;
          await tx.budgets.updateAccount({ ...account, spent_usd: String(Number(account.spent_usd) + 1) });
          await tx.sessions.insert(makeSession(`s-${i}`));
          await spendIn(tx, WORLD.session1, `n-${i}`);
          await tx.budgets.insertAccount(makeAccount(`acct-${i}`));
          await tx.budgets.insertReservation(makeReservation(`r-${i}`));
          await tx.hitl.insert(makeHitlRequest(`h-${i}`));
          await raceWindow(sub);
          const error = errors.get(i);
          if (error !== undefined) throw error;
          return i;
        }),
      );
      for (const [i, r] of results.entries()) {
        // The rejection is the very error object fn threw, not a wrapper or a copy.
        if (errors.has(i))
          expect(r.status === "rejected" && r.reason === errors.get(i), `transaction ${i}`).toBe(true);
        else expect(r).toEqual({ status: "fulfilled", value: i });
      }
      const committed = [0, 3, 6, 9];
      const state = await handles[1].transaction(async (tx) => {
        const present: number[] = [];
        for (let i = 0; i < 12; i++) {
          const rows = [
            await tx.sessions.get(`s-${i}`),
            await tx.nonces.has(WORLD.session1, `n-${i}`),
            await tx.budgets.getAccount(`acct-${i}`),
            await tx.budgets.getReservation(`r-${i}`),
            await tx.hitl.get(`h-${i}`),
          ].map((row) => row !== null && row !== false);
          // Each transaction's writes are all there or all gone.
          expect(new Set(rows).size, `transaction ${i} is half-applied: ${rows}`).toBe(1);
          if (rows[0]) present.push(i);
        }
        return {
          present,
          spent: (await tx.budgets.getAccount(WORLD.orgAccount))?.spent_usd,
          nonces: await tx.nonces.count(WORLD.session1),
          entries: await tx.chain.count(),
        };
      });
      expect(state).toEqual({
        present: committed,
        spent: String(committed.length),
        nonces: committed.length,
        entries: committed.length,
      });
    });
  });
}
