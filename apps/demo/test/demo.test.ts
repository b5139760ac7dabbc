// The demo end to end, as a user runs it: the built script, its output, its exit status, and its HTML
// report rendered offline in headless Chromium (playwright-core), with a screenshot of it.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { type Browser, chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../../../", import.meta.url));
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

let dir: string;
let report: string;
let output: string;

beforeAll(() => {
  execFileSync(`${root}node_modules/.bin/tsc`, ["--build", "apps/demo"], { cwd: root });
  dir = mkdtempSync(join(tmpdir(), "leash-demo-test-"));
  report = join(dir, "report.html");
  output = execFileSync(process.execPath, [`${root}apps/demo/dist/main.js`, "--report", report], {
    cwd: dir,
    encoding: "utf8",
  });
}, 120_000);

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("pnpm demo", () => {
  it("stops the loop, meets the threshold and the overrun, refuses the replay, and verifies the audit", () => {
    expect(output).toMatch(/attempt 5\s+DENY\s+error_amplified_repeat/);
    expect(output).toMatch(/summary 5\s+HITL\s+budget_threshold/);
    expect(output).toMatch(/approved by alice\s+ALLOW\s+hitl_transition:approve/);
    expect(output).toMatch(/memo 3 \(\$0\.25\)\s+DENY\s+budget_overrun/);
    expect(output).toMatch(/same nonce again\s+DENY\s+policy_violation:duplicate_nonce/);
    expect(output).toMatch(
      /summary 5 again \(replayed\)\s+DENY\s+policy_violation:duplicate_resume_no_effect/,
    );
    // One spelling of a human's answer everywhere: the README's, evaluate --help's and this one.
    expect(output).toContain("`leash hitl approve <request id>`, or the console");
    expect(output).not.toContain("session resume");
    expect(output).toMatch(/chain verified: \d+ signed entries/);
    expect(output).toMatch(/receipts: (\d+) of \1 verified offline/);
    expect(output).toMatch(/fails verification at seq \d+: edited/);
  });

  it("introduces every agent, with its guard config in words, before its first decision", () => {
    for (const agent of ["support-bot", "research-bot", "research-bot-2", "billing-bot"]) {
      const intro = output.indexOf(`Meet ${agent}:`);
      expect(intro, agent).toBeGreaterThan(0);
      const firstSessionLine = output.indexOf("may spend up to", intro);
      expect(firstSessionLine, agent).toBeGreaterThan(intro);
    }
    expect(output.indexOf("Meet research-bot-2:")).toBeLessThan(output.indexOf("memo 1 ($0.20)"));
    expect(output).toMatch(/may repeat the same call \(same tool, same arguments\) 4 times in a row/);
  });

  it("explains every reason code in plain words, and why the decisions make more entries", () => {
    expect(output).toMatch(
      /hitl_transition:approve.*\n\s+↳ a human approved exactly this paused call \(same nonce, same arguments\)/,
    );
    expect(output).toMatch(/budget_overrun.*\n\s+↳ the call's estimated cost is more than what is left/);
    const [, decisions, entries] = /(\d+) decisions make (\d+) entries because/.exec(output) ?? [];
    expect(Number(entries)).toBeGreaterThan(Number(decisions));
    expect(output).toMatch(
      /: 17 verdicts, 4 session registrations, 11 settled costs, 1 request for a human, 1 human answer\./,
    );
    expect(output).toMatch(
      /What to try next[\s\S]*\(cd apps\/cli && npm link\)[\s\S]*\n\s+leash tail --follow/,
    );
    expect(output).toContain(`Report (one HTML file, works offline): ${report}`);
  });
});

describe("the demo's HTML report", () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: CHROMIUM_ARGS });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });

  it("renders offline with the verification results, every receipt's check and a chart per agent", async () => {
    expect(readFileSync(report, "utf8")).not.toMatch(/<script|https?:\/\/|<link /);
    const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    await context.setOffline(true);
    const page = await context.newPage();
    const requested: string[] = [];
    page.on("request", (request) => {
      if (!request.url().startsWith("file:")) requested.push(request.url());
    });
    await page.goto(pathToFileURL(report).href);

    await expect(page.title()).resolves.toBe("Leash demo report");
    expect(await page.locator("#chain-result").textContent()).toMatch(/^✓ Chain verified: 34 signed entries/);
    expect(await page.locator("#tampered").textContent()).toMatch(
      /fails verification at entry \d+: edited\. Editing the log afterwards is detected\./,
    );
    expect(await page.locator("#receipts-result").textContent()).toMatch(
      /^17 of 17 receipts verified offline .*an edited receipt was rejected\./,
    );
    await expect(page.locator("tr.receipt").count()).resolves.toBe(17);
    await expect(page.locator('tr.receipt[data-check="ok"]').count()).resolves.toBe(17);
    const agents = await page.locator("section.agent").evaluateAll((els) =>
      els.map((el) => ({
        id: el.getAttribute("data-agent"),
        dots: el.querySelectorAll("svg circle").length,
        budgetLine: el.querySelector("svg line") !== null,
      })),
    );
    expect(agents).toEqual([
      { id: "support-bot", dots: 5, budgetLine: true },
      { id: "research-bot", dots: 7, budgetLine: true },
      { id: "research-bot-2", dots: 3, budgetLine: true },
      { id: "billing-bot", dots: 2, budgetLine: true },
    ]);
    const rules = await page
      .locator("table.verdicts tbody tr")
      .evaluateAll((rows) => rows.map((r) => [r.getAttribute("data-reason"), r.children[2]?.textContent]));
    // The replayed payment, and the approved summary sent a second time (a used approval, §3.6).
    expect(rules).toContainEqual(["policy_violation:duplicate_nonce", "1"]);
    expect(rules).toContainEqual(["policy_violation:duplicate_resume_no_effect", "1"]);
    expect(rules).toContainEqual(["within_thresholds", "11"]);
    expect(requested).toEqual([]);

    const shot = process.env.LEASH_DEMO_SCREENSHOT ?? join(dir, "demo-report.png");
    await page.screenshot({ path: shot, fullPage: true });
    expect(readFileSync(shot).subarray(1, 4).toString()).toBe("PNG");
    expect(statSync(shot).size).toBeGreaterThan(10_000);
    expect(existsSync(shot)).toBe(true);
    await context.close();
  }, 60_000);
});
