// The README's three policy examples (blocks tagged `test:policy-*`), as written: each passes
// `leash policy check` and decides the calls its comment promises under `leash policy test`.
import { spawnSync } from "node:child_process";
import { afterAll, describe, expect, it } from "vitest";
import { CLI_BIN, scratchDir } from "./helpers.js";
import { block } from "./readme-support.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());

function leashBin(args: string[]) {
  const r = spawnSync(process.execPath, [CLI_BIN, ...args], { encoding: "utf8", timeout: 30_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** What each README policy promises, as `leash policy test` cases. */
const CASES: Record<string, string> = {
  "payments-hitl": `cases:
  - name: a small payment goes through
    call: { tool: payments.send, agent: finance-bot, args: { amount_usd: 20 } }
    expect: { verdict: ALLOW }
  - name: a large one waits for a human
    call: { tool: payments.send, agent: finance-bot, args: { amount_usd: 900 } }
    expect: { verdict: HITL, reason: "policy_hitl:rule:big-payments-need-a-human" }
`,
  "filesystem-allowlist": `cases:
  - name: reading the workspace is allowed
    call: { tool: fs.read, agent: coder, args: { path: /workspace/src/a.ts } }
    expect: { verdict: ALLOW, rule: read-workspace }
  - name: reading /etc is denied by default
    call: { tool: fs.read, agent: coder, args: { path: /etc/passwd } }
    expect: { verdict: DENY, reason: "policy_violation:default_deny" }
  - name: climbing out is denied by its rule
    call: { tool: fs.read, agent: coder, args: { path: /workspace/../etc/passwd } }
    expect: { verdict: DENY, reason: "policy_violation:rule:no-parent-segments" }
  - name: writing outside /workspace/out is denied
    call: { tool: fs.write, agent: coder, args: { path: /workspace/src/a.ts } }
    expect: { verdict: DENY }
  - name: writing the output folder is allowed
    call: { tool: fs.write, agent: coder, args: { path: /workspace/out/report.md } }
    expect: { verdict: ALLOW, rule: write-output }
`,
  "rate-and-budget": `cases:
  - name: the fourth search in a minute is refused
    sequence:
      - call: { tool: search.web, agent: bot, session: { id: s1 }, time: { unix_s: 1000 } }
        expect: { verdict: ALLOW }
      - call: { tool: search.web, agent: bot, session: { id: s1 }, time: { unix_s: 1001 } }
        expect: { verdict: ALLOW }
      - call: { tool: search.web, agent: bot, session: { id: s1 }, time: { unix_s: 1002 } }
        expect: { verdict: ALLOW }
      - call: { tool: search.web, agent: bot, session: { id: s1 }, time: { unix_s: 1003 } }
        expect: { verdict: DENY, reason: "policy_violation:rule:search-rate" }
  - name: the LLM tool stops at $1 a day
    sequence:
      - call: { tool: llm.complete, agent: bot, estimate_usd: 0.6, time: { unix_s: 86400 } }
        expect: { verdict: ALLOW }
      - call: { tool: llm.complete, agent: bot, estimate_usd: 0.6, time: { unix_s: 90000 } }
        expect: { verdict: DENY, reason: "policy_violation:rule:llm-daily-budget" }
`,
};

describe("the README's policies", () => {
  for (const [name, cases] of Object.entries(CASES)) {
    it(`${name}: checks, and decides as its comment says`, () => {
      const policy = scratch.write(`${name}.yaml`, block(`policy-${name}`).code);
      const casesFile = scratch.write(`${name}.cases.yaml`, cases);
      const check = leashBin(["policy", "check", policy]);
      expect(check.stderr).toBe("");
      expect(check.code).toBe(0);
      const test = leashBin(["policy", "test", policy, casesFile]);
      expect(test.stdout + test.stderr).not.toMatch(/FAIL/);
      expect(test.code).toBe(0);
    });
  }
});
