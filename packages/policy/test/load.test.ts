// loadPolicy: errors name the field (and the column inside an expression), CEL is type-checked and
// cost-bounded at load, hostile documents are refused by their bounds, versions hash canonically.
import { describe, expect, it } from "vitest";
import { limits, loadPolicy, PolicyError } from "../src/index.js";

function rule(extra: Record<string, unknown>) {
  return { name: "r", action: "allow", ...extra };
}
function doc(rules: unknown[], extra: Record<string, unknown> = {}) {
  return { version: 1, name: "p", rules, ...extra };
}

/** The PolicyError loadPolicy throws for `input`. */
function refusal(input: string | object): PolicyError {
  try {
    loadPolicy(input);
  } catch (e) {
    expect(PolicyError.isInstance(e), String(e)).toBe(true);
    return e as PolicyError;
  }
  throw new Error("the policy loaded");
}

describe("schema errors name the field", () => {
  it.each([
    [{ version: 1, name: "p" }, "rules", "is required"],
    [doc([], { version: 2 }), "version", "must be 1"],
    [doc([rule({ action: "block" })]), "rules[0].action", "must be one of allow, deny, hitl"],
    [doc([rule({}), rule({ name: "s", wen: "true" })]), "rules[1]", 'unknown field "wen"'],
    [
      doc([rule({ action: { rate: { limit: 0, window_s: 60 } } })]),
      "rules[0].action.rate.limit",
      "must be >= 1",
    ],
    [doc([rule({ action: { rate: { limit: 5 } } })]), "rules[0].action.rate.window_s", "is required"],
    [doc([rule({ action: { raet: { limit: 5 } } })]), "rules[0].action", 'unknown field "raet"'],
    [doc([rule({ name: "Big Payments" })]), "rules[0].name", "lowercase letters"],
    [doc([rule({ match: { tool: [] } })]), "rules[0].match.tool", "must"],
    [doc([rule({ mode: "shadow" })]), "rules[0].mode", "must be one of enforce, monitor"],
    [doc([], { default: "block" }), "default", "must be one of allow, deny"],
  ])("%j → %s", (input, path, message) => {
    const e = refusal(input);
    expect(e.code).toBe("policy_invalid");
    expect(e.path).toBe(path);
    expect(e.message).toContain(message);
    expect(e.message.startsWith(`${path}: `)).toBe(true);
  });

  it("refuses two rules with one name and a deny without a message, naming the second rule's field", () => {
    expect(refusal(doc([rule({}), rule({})])).path).toBe("rules[1].name");
    expect(refusal(doc([rule({ action: "deny" })])).path).toBe("rules[0].message");
  });

  it("puts the source in front of the message", () => {
    const e = refusal("version: 1\nname: p\nrules: [{name: r, action: nope}]\n");
    expect(() =>
      loadPolicy("version: 1\nname: p\nrules: [{name: r, action: nope}]\n", { source: "p.yaml" }),
    ).toThrow(/^p\.yaml: rules\[0\]\.action: must be one of/);
    expect(e.source).toBeUndefined();
  });

  it("refuses an object holding what JSON cannot (undefined, NaN, Infinity), naming the field", () => {
    expect(refusal({ ...doc([]), description: undefined }).path).toBe("description");
    const nan = refusal(doc([rule({ action: { estimate_usd: Number.NaN } })]));
    expect([nan.path, nan.detail]).toEqual(["rules[0].action.estimate_usd", "NaN is not a JSON value"]);
    expect(refusal(doc([rule({ action: { rate: { limit: Infinity, window_s: 1 } } })])).path).toBe(
      "rules[0].action.rate.limit",
    );
  });

  it("says what a policy is when the document is not an object", () => {
    for (const input of ["", "hello", "[1, 2]"]) {
      expect(refusal(input).message).toBe("a policy must be an object with version, name and rules");
    }
  });

  it("refuses text that is neither YAML nor JSON, and duplicate YAML keys", () => {
    expect(refusal("{ not json").code).toBe("policy_unparsable");
    expect(refusal("version: 1\nversion: 1\nname: p\nrules: []\n").code).toBe("policy_unparsable");
  });
});

describe("CEL conditions are checked at load", () => {
  const when = (text: string) => refusal(doc([rule({ when: text })]));

  it("reports a syntax error with its column", () => {
    const e = when("args.amount > ");
    expect(e.code).toBe("expression_syntax");
    expect(e.path).toBe("rules[0].when");
    expect(e.column).toBe(13);
    expect(e.message).toMatch(/^rules\[0\]\.when \(column 13\): /);
  });

  it.each([
    ["amount > 5", "undeclared reference to 'amount'", 1],
    ["session.callz > 5", "'session' has no field 'callz'", 8],
    ["tool > 3", "no matching overload for '_>_' applied to (string, int)", undefined],
    ["tool.lowerAscii() == 'x'", "unknown function 'lowerAscii'", undefined],
    ["session.calls + 0.5 > 1.0", "no matching overload for '_+_' applied to (int, double)", undefined],
    ["size(tool)", "must be a bool condition, not int", undefined],
    ["has(tool.x)", "type 'string' has no field 'x'", undefined],
    ["tool.matches(agent)", "matches needs a literal pattern (a quoted string)", 14],
  ])("%s → %s", (text, message, column) => {
    const e = when(text);
    expect(e.code).toBe("expression_type");
    expect(e.message).toContain(message);
    if (column !== undefined) expect(e.column).toBe(column);
  });

  it("compiles every matches pattern at load and refuses a bad one", () => {
    const e = when("tool.matches('(unclosed')");
    expect(e.code).toBe("expression_syntax");
    expect(e.message).toMatch(/^rules\[0\]\.when: invalid regular expression "\(unclosed": /);
  });

  it("accepts conditions over every declared variable", () => {
    const conditions = [
      "args.amount > 500 && tool.startsWith('payments.')",
      "agent == 'a' || org == 'o' || 'x' in tags",
      "session.calls > 3 && session.repeat >= 1 && session.denied < 2 && session.spent_usd <= 1.5",
      "budget.remaining_usd < 10.0 && budget.spent_usd >= 0.0 && budget.limit_usd > 0.0",
      "time.hour_utc >= 9 && time.hour_utc < 17 && time.weekday_utc != 0 && time.unix_s > 0",
      "has_estimate && estimate_usd > 0.5",
      "has(args.items) && args.items.exists(i, i.price > 100)",
      "args.path.matches('^/tmp/')",
    ];
    const p = loadPolicy(doc(conditions.map((w, i) => rule({ name: `r${i}`, when: w }))));
    expect(p.rules).toHaveLength(conditions.length);
  });

  it("refuses an expression whose estimated cost is over the limit (nested comprehensions over args)", () => {
    const e = when("args.a.all(x, args.b.all(y, x == y))");
    expect(e.code).toBe("expression_too_complex");
    expect(e.message).toMatch(/estimated cost \d+ is over the limit of 100000/);
    // Building strings or lists in a loop over args is priced by what it allocates.
    expect(when("has(args.l) && args.l.map(x, args.s + args.s).size() > 0").code).toBe(
      "expression_too_complex",
    );
    expect(loadPolicy(doc([rule({ when: "args.l.map(x, x * 2).size() > 0" })])).rules).toHaveLength(1);
    // One level over args is within the limit.
    expect(loadPolicy(doc([rule({ when: "args.a.all(x, x > 1)" })])).rules[0]?.when?.cost).toBeLessThan(
      limits.MAX_EXPRESSION_COST,
    );
  });
});

describe("hostile documents are refused at load", () => {
  it("a file over MAX_POLICY_BYTES, before parsing", () => {
    const text = `version: 1\nname: p\nrules: []\n# ${"x".repeat(limits.MAX_POLICY_BYTES)}\n`;
    expect(refusal(text).code).toBe("policy_too_large");
    // Multi-byte characters count as their UTF-8 bytes.
    const wide = `version: 1\nname: p\nrules: []\n# ${"é".repeat(limits.MAX_POLICY_BYTES / 2)}\n`;
    expect(refusal(wide).code).toBe("policy_too_large");
  });

  it("more than MAX_RULES rules", () => {
    const rules = Array.from({ length: limits.MAX_RULES + 1 }, (_, i) => rule({ name: `r${i}` }));
    const e = refusal(doc(rules));
    expect(e.path).toBe("rules");
    expect(e.message).toContain(`must NOT have more than ${limits.MAX_RULES} items`);
  });

  it("a document nested deeper than MAX_DOCUMENT_DEPTH, in YAML and JSON, however deep", () => {
    for (const depth of [limits.MAX_DOCUMENT_DEPTH + 1, 100_000]) {
      const json = `{"version":1,"name":"p","rules":[],"description":${"[".repeat(depth)}${"]".repeat(depth)}}`;
      const e = refusal(json);
      expect(["policy_invalid", "policy_unparsable"]).toContain(e.code);
      const yaml = refusal(
        `version: 1\nname: p\nrules: []\ndescription: ${"[".repeat(depth)}${"]".repeat(depth)}\n`,
      );
      expect(yaml.code).toBe(depth > limits.MAX_FLOW_DEPTH ? "policy_unparsable" : "policy_invalid");
    }
  });

  it("a YAML alias bomb", () => {
    const lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"];
    for (let i = 1; i < 20; i++)
      lines.push(
        `a${i}: &a${i} [${Array(10)
          .fill(`*a${i - 1}`)
          .join(", ")}]`,
      );
    const e = refusal(`version: 1\nname: p\nrules: []\n${lines.join("\n")}\n`);
    expect(e.code).toBe("policy_unparsable");
    expect(e.message).toMatch(/alias/i);
  });

  it("an expression longer than MAX_EXPRESSION_LENGTH", () => {
    const long = Array.from({ length: 400 }, () => "tool == 'x'").join(" || ");
    expect(long.length).toBeGreaterThan(limits.MAX_EXPRESSION_LENGTH);
    const e = refusal(doc([rule({ when: long })]));
    expect(e.path).toBe("rules[0].when");
  });

  it("brackets nested deeper than MAX_BRACKET_DEPTH, before the parser sees them", () => {
    const deep = `${"(".repeat(limits.MAX_BRACKET_DEPTH + 1)}true${")".repeat(limits.MAX_BRACKET_DEPTH + 1)}`;
    const e = refusal(doc([rule({ when: deep })]));
    expect(e.code).toBe("expression_too_complex");
    expect(e.message).toContain("brackets");
  });

  it("a syntax tree deeper than MAX_EXPRESSION_DEPTH without brackets", () => {
    const e = refusal(doc([rule({ when: `args${".a".repeat(limits.MAX_EXPRESSION_DEPTH + 1)} == 1` })]));
    expect(e.code).toBe("expression_too_complex");
    expect(e.message).toContain(`deeper than ${limits.MAX_EXPRESSION_DEPTH}`);
  });
});

describe("versions: canonical text and hash", () => {
  const yaml = `
version: 1
name: payments
rules:
  - name: big
    match: { tool: payments.send }
    when: "args.amount > 500"
    action: hitl
`;
  const json = JSON.stringify({
    rules: [{ action: "hitl", when: "args.amount > 500", match: { tool: "payments.send" }, name: "big" }],
    name: "payments",
    version: 1,
  });

  it("the same policy in YAML, JSON and any key order has one hash; defaults are part of it", () => {
    const a = loadPolicy(yaml);
    const b = loadPolicy(json);
    expect(a.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(b.hash).toBe(a.hash);
    expect(loadPolicy({ ...JSON.parse(json), default: "allow", mode: "enforce" }).hash).toBe(a.hash);
    expect(JSON.parse(a.canonical)).toMatchObject({ default: "allow", mode: "enforce" });
    // The canonical text loads back to the same version.
    expect(loadPolicy(a.canonical).hash).toBe(a.hash);
  });

  it("runs what it hashed: changing the object passed in afterwards changes nothing", () => {
    const input = doc([rule({ action: { rate: { limit: 3, window_s: 60 } } })]);
    const p = loadPolicy(input);
    (input.rules[0] as { action: { rate: { limit: number } } }).action.rate.limit = 1_000_000;
    expect(p.rules[0]?.action).toEqual({ rate: { limit: 3, window_s: 60 } });
    expect(loadPolicy(p.canonical).hash).toBe(p.hash);
  });

  it("any change to a rule is a new version", () => {
    const base = loadPolicy(yaml).hash;
    expect(loadPolicy(yaml.replace("500", "501")).hash).not.toBe(base);
    expect(loadPolicy(yaml.replace("hitl", "allow")).hash).not.toBe(base);
    expect(loadPolicy(`${yaml}default: deny\n`).hash).not.toBe(base);
  });
});
