// `leash policy check` and `leash policy test`, run as the built binary: exit statuses, the field and
// column a bad policy is refused at, and the diff of a failing case. The examples are tested here too.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_BIN, REPO_ROOT, scratchDir } from "./helpers.js";

const EXAMPLES = join(REPO_ROOT, "packages", "policy", "examples");
const scratch = scratchDir();
afterAll(() => scratch.cleanup());
beforeAll(() => {
  expect(existsSync(CLI_BIN), "run `npx tsc --build` first: these tests run dist/bin.js").toBe(true);
});

/** Each case spawns the CLI a few times: on a loaded host a node start alone can take seconds. */
const SPAWNS = { timeout: 30_000 };

function leashBin(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [CLI_BIN, ...args], { encoding: "utf8", input, timeout: 30_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("leash policy check", () => {
  it("prints the policy, its rule count and hash, exit 0", SPAWNS, () => {
    const r = leashBin(["policy", "check", join(EXAMPLES, "payments-hitl.yaml")]);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(/payments-hitl\.yaml: ok: policy payments, 3 rules, sha256 [0-9a-f]{64}\n$/);
    expect(r.code).toBe(0);
  });

  it("--json prints the canonical document and the hash of it", SPAWNS, () => {
    const r = leashBin(["policy", "check", "--json", join(EXAMPLES, "filesystem-allowlist.yaml")]);
    const out = JSON.parse(r.stdout);
    expect(out).toMatchObject({
      name: "filesystem",
      rules: 4,
      canonical: { default: "deny", mode: "enforce" },
    });
    expect(out.hash).toMatch(/^[0-9a-f]{64}$/);
  });

  it("exits 2 with one line naming the field for a schema error", SPAWNS, () => {
    const file = scratch.write(
      "bad-action.yaml",
      "version: 1\nname: p\nrules:\n  - { name: r, action: block }\n",
    );
    const r = leashBin(["policy", "check", file]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe(`leash: error: ${file}: rules[0].action: must be one of allow, deny, hitl\n`);
  });

  it("exits 2 naming the expression's field and column for a CEL type error", SPAWNS, () => {
    const file = scratch.write(
      "bad-when.yaml",
      'version: 1\nname: p\nrules:\n  - { name: r, when: "session.callz > 1", action: hitl }\n',
    );
    const r = leashBin(["policy", "check", file]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      `leash: error: ${file}: rules[0].when (column 8): 'session' has no field 'callz' (it has id, calls, repeat, denied, spent_usd)\n`,
    );
  });

  it("reads stdin for `-`, and refuses an oversized file before reading it", SPAWNS, () => {
    const ok = leashBin(["policy", "check", "-"], '{"version":1,"name":"p","rules":[]}');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/^<stdin>: ok: policy p, 0 rules/);
    const big = scratch.write("big.yaml", `version: 1\nname: p\nrules: []\n#${"x".repeat(300 * 1024)}\n`);
    const r = leashBin(["policy", "check", big]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/larger than the 262144 a file may have\n$/);
  });
});

describe("leash policy schema", () => {
  it("prints the JSON Schema a policy is validated with", SPAWNS, () => {
    const r = leashBin(["policy", "schema"]);
    expect(r.code).toBe(0);
    const schema = JSON.parse(r.stdout);
    expect(schema.$schema).toBe("http://json-schema.org/draft-07/schema#");
    expect(schema.required).toEqual(["version", "name", "rules"]);
    expect(schema.properties.rules.maxItems).toBe(256);
  });
});

describe("leash policy test", () => {
  it.each(["payments-hitl", "filesystem-allowlist", "rate-and-budget"])(
    "the %s example passes its cases, exit 0",
    (name) => {
      const r = leashBin([
        "policy",
        "test",
        join(EXAMPLES, `${name}.yaml`),
        join(EXAMPLES, `${name}.cases.yaml`),
      ]);
      expect(r.stderr).toBe("");
      expect(r.stdout).toMatch(/^\d+ passed, 0 failed\n$/);
      expect(r.code).toBe(0);
    },
  );

  it("exits 1 on a mismatch and prints a diff of each failing case", SPAWNS, () => {
    const cases = scratch.write(
      "wrong.cases.yaml",
      `cases:
  - name: right
    call: { tool: search.web, agent: bot }
    expect: { verdict: ALLOW }
  - name: rate limit forgotten
    sequence:
      - call: { tool: search.web, agent: bot, session: { id: s } }
        expect: { verdict: ALLOW }
      - call: { tool: search.web, agent: bot, session: { id: s } }
        expect: { verdict: ALLOW }
      - call: { tool: search.web, agent: bot, session: { id: s } }
        expect: { verdict: ALLOW }
      - call: { tool: search.web, agent: bot, session: { id: s } }
        expect: { verdict: ALLOW, reason: "policy_allow:default" }
`,
    );
    const r = leashBin(["policy", "test", join(EXAMPLES, "rate-and-budget.yaml"), cases]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe(
      [
        "✗ rate limit forgotten (call 4 of 4)",
        "    verdict:",
        '      - expected "ALLOW"',
        '      + actual   "DENY"',
        "    reason:",
        '      - expected "policy_allow:default"',
        '      + actual   "policy_violation:rule:search-rate"',
        "1 passed, 1 failed",
        "",
      ].join("\n"),
    );
  });

  it("exits 2 when the policy or the cases file does not load", SPAWNS, () => {
    const bad = scratch.write("bad.yaml", "version: 1\nname: p\n");
    const r = leashBin(["policy", "test", bad, join(EXAMPLES, "rate-and-budget.cases.yaml")]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`leash: error: ${bad}: rules: is required\n`);
    const cases = scratch.write("bad.cases.yaml", "cases:\n  - name: x\n    expect: {}\n");
    const c = leashBin(["policy", "test", join(EXAMPLES, "rate-and-budget.yaml"), cases]);
    expect(c.code).toBe(2);
    expect(c.stderr).toBe(`leash: error: ${cases}: cases[0].call: is required (an object)\n`);
  });
});
