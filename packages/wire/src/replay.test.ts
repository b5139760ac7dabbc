import { describe, expect, it } from "vitest";
import { WireError } from "./errors.js";
import { ReplayWindow } from "./replay.js";

const MS = 1_000_000n;
const START = 1_764_600_000_000n * MS;

function clockAt(ns: bigint) {
  const c = { now: ns, nowNs: () => Number(c.now) };
  return c;
}
const code = (f: () => unknown) => {
  try {
    f();
    return "ok";
  } catch (e) {
    return WireError.isInstance(e) ? e.code : "not a WireError";
  }
};

describe("ReplayWindow", () => {
  it("accepts an id once and refuses it again", () => {
    const clock = clockAt(START);
    const w = new ReplayWindow({ clock });
    expect(code(() => w.admit("a", START))).toBe("ok");
    expect(code(() => w.admit("a", START))).toBe("replayed_message");
    expect(code(() => w.admit("a", START + 1000n * MS))).toBe("replayed_message");
    expect(code(() => w.admit("b", START))).toBe("ok");
    expect(w.has("a")).toBe(true);
  });

  it("refuses timestamps outside the window either way, and a missing one", () => {
    const clock = clockAt(START);
    const w = new ReplayWindow({ clock, windowMs: 60_000 });
    expect(code(() => w.admit("past", START - 60_001n * MS))).toBe("timestamp_out_of_window");
    expect(code(() => w.admit("future", START + 60_001n * MS))).toBe("timestamp_out_of_window");
    expect(code(() => w.admit("zero", 0n))).toBe("timestamp_out_of_window");
    expect(code(() => w.admit("edge-past", START - 60_000n * MS))).toBe("ok");
    // edge-past expired the instant it was admitted (timestamp + window = now), so it is not kept.
    expect(code(() => w.admit("edge-future", START + 60_000n * MS))).toBe("ok");
    expect(w.size).toBe(1);
  });

  it("forgets expired ids (bounded memory) and a copy of an old envelope is then refused by its timestamp", () => {
    const clock = clockAt(START);
    const w = new ReplayWindow({ clock, windowMs: 1000 });
    for (let i = 0; i < 100; i++) w.admit(`id${i}`, START);
    expect(w.size).toBe(100);
    clock.now = START + 1001n * MS;
    w.admit("fresh", clock.now);
    expect(w.size).toBe(1);
    expect(w.has("id0")).toBe(false);
    expect(code(() => w.admit("id0", START))).toBe("timestamp_out_of_window");
  });

  it("memory stays bounded over a long run at a steady rate", () => {
    const clock = clockAt(START);
    const w = new ReplayWindow({ clock, windowMs: 1000 });
    let max = 0;
    for (let i = 0; i < 20_000; i++) {
      clock.now = START + BigInt(i) * MS; // one envelope per millisecond for 20 s
      w.admit(`m${i}`, clock.now);
      max = Math.max(max, w.size);
    }
    expect(max).toBeLessThanOrEqual(1001);
  });

  it("refuses rather than forgets when full of unexpired ids", () => {
    const clock = clockAt(START);
    const w = new ReplayWindow({ clock, capacity: 3 });
    for (const id of ["a", "b", "c"]) w.admit(id, START);
    expect(code(() => w.admit("d", START))).toBe("replay_cache_full");
    expect(code(() => w.admit("a", START))).toBe("replayed_message");
  });

  it("refuses an empty id and bad options", () => {
    const w = new ReplayWindow({ clock: clockAt(START) });
    expect(code(() => w.admit("", START))).toBe("invalid_envelope");
    expect(code(() => new ReplayWindow({ windowMs: 0 }))).toBe("invalid_argument");
    expect(code(() => new ReplayWindow({ capacity: -1 }))).toBe("invalid_argument");
  });

  it("defaults to the real clock", () => {
    const w = new ReplayWindow();
    expect(code(() => w.admit("x", BigInt(Date.now()) * MS))).toBe("ok");
  });
});
