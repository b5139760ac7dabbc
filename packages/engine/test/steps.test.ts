// runSteps (src/steps.ts): synchronous while every step is at hand, a promise from the first step
// that yields one; a rejected step is thrown at its yield, as an await would throw it.
import { describe, expect, it } from "vitest";
import { runSteps, type Steps } from "../src/steps.js";

function* add(a: unknown, b: unknown): Steps<number> {
  const x: number = yield a;
  const y: number = yield b;
  return x + y;
}

describe("runSteps", () => {
  it("returns the result itself when no step yields a promise", () => {
    expect(runSteps(add(1, 2))).toBe(3);
  });

  it("returns a promise of the result from the first step that yields one, and goes on after it", async () => {
    const result = runSteps(add(1, Promise.resolve(2)));
    expect(result).toBeInstanceOf(Promise);
    expect(await result).toBe(3);
    expect(await runSteps(add(Promise.resolve(1), Promise.resolve(2)))).toBe(3);
  });

  it("throws a rejected step into the generator at its yield, where it may be caught", async () => {
    function* caught(): Steps<string> {
      try {
        yield Promise.reject(new Error("no"));
        return "not here";
      } catch (error) {
        const after: string = yield `caught ${(error as Error).message}`;
        return after;
      }
    }
    expect(await runSteps(caught())).toBe("caught no");
    await expect(runSteps(add(Promise.reject(new Error("lost")), 2))).rejects.toThrow("lost");
  });

  it("throws synchronously what the generator throws before any promise, and rejects after one", async () => {
    function* fails(first: unknown): Steps<never> {
      yield first;
      throw new Error("bad input");
    }
    expect(() => runSteps(fails(1))).toThrow("bad input");
    await expect(runSteps(fails(Promise.resolve(1)))).rejects.toThrow("bad input");
  });
});
