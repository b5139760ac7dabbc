// The demo end to end, as a user runs it: the built script, its output and its exit status.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const root = fileURLToPath(new URL("../../../", import.meta.url));

it("stops the loop, meets the threshold and the overrun, refuses the replay, and verifies the audit", () => {
  execFileSync(`${root}node_modules/.bin/tsc`, ["--build", "apps/demo"], { cwd: root });
  const output = execFileSync(process.execPath, [`${root}apps/demo/dist/main.js`], {
    cwd: root,
    encoding: "utf8",
  });
  expect(output).toMatch(/attempt 5\s+DENY\s+error_amplified_repeat/);
  expect(output).toMatch(/summary 5\s+HITL\s+budget_threshold/);
  expect(output).toMatch(/approved by alice\s+ALLOW\s+hitl_transition:approve/);
  expect(output).toMatch(/memo 3 \(\$0\.25\)\s+DENY\s+budget_overrun/);
  expect(output).toMatch(/same nonce again\s+DENY\s+policy_violation:duplicate_nonce/);
  expect(output).toMatch(/chain verified: \d+ signed entries/);
  expect(output).toMatch(/receipts: (\d+) of \1 verified offline/);
  expect(output).toMatch(/fails verification at seq \d+: edited/);
});
