// The call gate (call-gate.ts): a lone session's calls and an agent that pauses between calls go at
// once; a call is held for sessions in a tight loop that are due back, until they have all called or the
// hold's time is up; then every held call goes, in order. The clock is a number the test moves.
import { describe, expect, it } from "vitest";
import { CallGate } from "../src/call-gate.js";

function gateAt(options: { maxHoldMs?: number; loopMs?: number } = {}) {
  const clock = { ms: 1000 };
  return { clock, gate: new CallGate({ ...options, now: () => clock.ms }) };
}

/** One call of `session`: enters, is answered, and the clock moves `gapMs` before its next call. */
function loop(gate: CallGate, clock: { ms: number }, session: string, gapMs: number): void {
  expect(gate.enter(session)).toBeUndefined();
  gate.answered(session);
  clock.ms += gapMs;
}

/** Sessions that each called back within `gapMs` of their last answer, all answered now: looping. */
function looping(gate: CallGate, clock: { ms: number }, sessions: string[], gapMs: number): void {
  for (let round = 0; round < 2; round++) {
    for (const s of sessions) expect(gate.enter(s)).toBeUndefined();
    for (const s of sessions) gate.answered(s);
    clock.ms += gapMs;
  }
}

describe("CallGate", () => {
  it("never holds a lone session, however quickly it calls again", () => {
    const { clock, gate } = gateAt();
    for (let i = 0; i < 20; i++) loop(gate, clock, "s1", 0.1);
    expect(gate.stats).toMatchObject({ direct: 20, held: 0, holds: 0 });
  });

  it("holds a call for a looping session due back and lets both go when it calls", async () => {
    const { clock, gate } = gateAt({ maxHoldMs: 10_000 });
    // Both sessions called back within 1 ms of their answers last time: they are looping.
    looping(gate, clock, ["a", "b"], 0.5);
    const order: string[] = [];
    const heldA = gate.enter("a");
    expect(heldA).toBeInstanceOf(Promise);
    const doneA = heldA!.then(() => order.push("a"));
    // b is the one a waits for: its call ends the hold, and both go, a first.
    const heldB = gate.enter("b");
    expect(heldB).toBeInstanceOf(Promise);
    await Promise.all([doneA, heldB!.then(() => order.push("b"))]);
    expect(order).toEqual(["a", "b"]);
    expect(gate.stats).toMatchObject({ direct: 4, holds: 1, held: 2, complete: 1 });
  });

  it("lets a held call go after maxHoldMs when the session it waits for does not call", async () => {
    const { clock, gate } = gateAt({ maxHoldMs: 20 });
    looping(gate, clock, ["a", "b"], 0.5);
    const started = performance.now();
    await gate.enter("a");
    const waited = performance.now() - started;
    expect(waited).toBeGreaterThanOrEqual(19);
    expect(waited).toBeLessThan(2000);
    expect(gate.stats).toMatchObject({ holds: 1, held: 1, complete: 0 });
  });

  it("does not wait for a session that pauses between calls (a tool running), nor one long overdue", () => {
    const { clock, gate } = gateAt({ loopMs: 50 });
    // "slow" comes back 5 s after each answer; "gone" looped quickly once, then stopped calling.
    loop(gate, clock, "slow", 5000);
    loop(gate, clock, "slow", 0);
    loop(gate, clock, "gone", 1);
    loop(gate, clock, "gone", 1000);
    expect(gate.enter("fresh")).toBeUndefined();
    gate.answered("fresh");
    expect(gate.stats.holds).toBe(0);
  });

  it("does not wait for a looping session that was answered just now and is not due yet", () => {
    const { clock, gate } = gateAt({ maxHoldMs: 2, loopMs: 50 });
    // b comes back 40 ms after its answers: answered 1 ms ago, it is not expected within the hold.
    loop(gate, clock, "b", 40);
    loop(gate, clock, "b", 0);
    clock.ms += 1;
    expect(gate.enter("a")).toBeUndefined();
    // 19 ms later (half its gap, within the hold's reach) it is.
    clock.ms += 19;
    expect(gate.enter("c")).toBeInstanceOf(Promise);
    expect(gate.enter("b")).toBeInstanceOf(Promise);
    expect(gate.stats).toMatchObject({ holds: 1, complete: 1 });
  });
});
