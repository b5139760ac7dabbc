// Property: the load-time checker is sound for what it accepts — when it gives an expression a type
// other than dyn, running it through @bufbuild/cel yields a value of that type (or a run-time error,
// such as a missing key or division by zero, which a rule treats as fail-closed).
import { isCelError, isCelList, isCelMap, isCelUint } from "@bufbuild/cel";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type ConditionBindings, checkAndRun } from "../src/condition.js";

const BINDINGS: ConditionBindings = {
  tool: "payments.send",
  agent: "finance-bot",
  org: "acme",
  tags: ["write", "prod"],
  args: { n: 3, amount: 750.5, s: "hello", list: [1, 2, 3], nested: { k: "v" } },
  estimate_usd: 0.25,
  has_estimate: true,
  session: { id: "s1", calls: 7n, repeat: 1n, denied: 0n, spent_usd: 1.5 },
  budget: { limit_usd: 10, spent_usd: 1.5, remaining_usd: 8.5 },
  time: { unix_s: 1_700_000_000n, hour_utc: 22n, minute_utc: 13n, weekday_utc: 2n },
};

const LEAVES = [
  "1",
  "-4",
  "2u",
  "2.5",
  "'s'",
  "true",
  "null",
  "tool",
  "agent",
  "tags",
  "session.calls",
  "session.spent_usd",
  "budget.remaining_usd",
  "time.hour_utc",
  "estimate_usd",
  "has_estimate",
  "args.n",
  "args.s",
  "args.list",
  "args.nested",
  "[1, 2]",
  "['a', 'b']",
  "{'k': 1}",
];
const BINARY = ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "in"];

const expression: fc.Arbitrary<string> = fc.letrec<{ e: string }>((tie) => ({
  e: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constantFrom(...LEAVES),
    fc.tuple(tie("e"), fc.constantFrom(...BINARY), tie("e")).map(([a, op, b]) => `(${a} ${op} ${b})`),
    tie("e").map((a) => `!(${a})`),
    tie("e").map((a) => `-(${a})`),
    fc.tuple(tie("e"), tie("e"), tie("e")).map(([c, a, b]) => `(${c} ? ${a} : ${b})`),
    tie("e").map((a) => `size(${a})`),
    fc.tuple(tie("e"), tie("e")).map(([a, b]) => `${a}[${b}]`),
    fc.tuple(tie("e"), tie("e")).map(([a, b]) => `${a}.startsWith(${b})`),
    fc.tuple(tie("e"), tie("e")).map(([a, b]) => `${a}.contains(${b})`),
    fc
      .tuple(fc.constantFrom("int", "double", "string", "uint", "bool"), tie("e"))
      .map(([f, a]) => `${f}(${a})`),
    fc.tuple(tie("e"), tie("e")).map(([range, b]) => `${range}.exists(x, x == ${b})`),
    fc.tuple(tie("e"), tie("e")).map(([range, b]) => `${range}.map(x, ${b})`),
    fc.constantFrom("has(args.n)", "has(args.missing)", "has(session.calls)"),
  ),
})).e;

/** Whether a @bufbuild/cel value has the type the checker printed. */
function hasType(value: unknown, type: string): boolean {
  if (type.startsWith("list(")) return isCelList(value);
  if (type.startsWith("map(")) return isCelMap(value);
  switch (type) {
    case "bool":
      return typeof value === "boolean";
    case "int":
      return typeof value === "bigint";
    case "uint":
      return isCelUint(value);
    case "double":
      return typeof value === "number";
    case "string":
      return typeof value === "string";
    case "null":
      return value === null;
    default:
      // session / budget / time records are CEL maps.
      return isCelMap(value);
  }
}

describe("the checker is sound for what it accepts", () => {
  it("an accepted expression's value has the type the checker gave it", () => {
    let typed = 0;
    fc.assert(
      fc.property(expression, (text) => {
        const r = checkAndRun(text, BINDINGS);
        if ("rejected" in r || r.type === "dyn" || isCelError(r.value)) return;
        typed++;
        expect(hasType(r.value, r.type), `${text} : ${r.type} gave ${String(r.value)}`).toBe(true);
      }),
      { numRuns: 3000 },
    );
    // The property is not vacuous: many generated expressions are accepted with a concrete type.
    expect(typed).toBeGreaterThan(300);
  });
});
