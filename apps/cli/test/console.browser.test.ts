// The HITL console end to end in a real browser (Debian's chromium via playwright-core): a real daemon on
// SQLite and on PostgreSQL, an agent calling a guarded tool through @leash/client and waiting, operators
// signing in with console tokens. Screenshots go to apps/cli/test-artifacts/ (gitignored).
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateKeyPair } from "@leash/chain";
import { type Client, createClient, guard, LeashDenied } from "@leash/client";
import { type Daemon, parseDaemonConfig, startDaemon, tokenHash } from "@leash/daemon";
import { openStore, type TestStore } from "@leash/test-stores";
import { pino } from "pino";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";

const ARTIFACTS = fileURLToPath(new URL("../test-artifacts/", import.meta.url));
const HMAC = randomBytes(32);
const ALICE = `lct_${randomBytes(24).toString("base64url")}`;
const VIEWER = `lct_${randomBytes(24).toString("base64url")}`;

let browser: Browser;

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}, 60_000);

afterAll(async () => {
  await browser?.close();
});

async function signIn(page: Page, url: string, token: string): Promise<void> {
  const first = await page.goto(url);
  expect(first?.status()).toBe(401);
  await page.fill("#token", token);
  await Promise.all([page.waitForURL(url), page.click("button[type=submit]")]);
  await page.waitForSelector("#who:has-text('Signed in as')");
}

describe.each(["sqlite", "postgres"] as const)("the console on %s", (kind) => {
  let dir: string;
  let store: TestStore;
  let daemon: Daemon;
  let POLICY_FILE = "";
  const clients: Client[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "leash-console-"));
    writeFileSync(join(dir, "acme.hmac"), HMAC.toString("hex"), { mode: 0o600 });
    writeFileSync(
      join(dir, "policy.yaml"),
      `version: 1
name: console
rules:
  - { name: big-transfers, match: { tool: wire_transfer }, when: "args.usd > 500", action: hitl }
`,
    );
    POLICY_FILE = join(dir, "policy.yaml");
    store = await openStore(kind, { label: "console" });
    const signer = generateKeyPair();
    daemon = await startDaemon({
      config: parseDaemonConfig({
        organizations: {
          acme: {
            hmac_keys: { k1: { file: join(dir, "acme.hmac") } },
            agents: {
              "ops-bot": { guard: { budget_usd: 5, hitl_mode: "always" } },
              // Asks a human once 60 % of its budget is spent.
              spender: { guard: { budget_usd: 5, hitl_mode: "on_threshold", hitl_budget_threshold: 0.4 } },
              // No SP/1.0 HITL: only the operator's policy asks a human (wire transfers over $500).
              payer: { guard: { budget_usd: 5 } },
            },
          },
        },
      }),
      policyFile: POLICY_FILE,
      signer: signer.signer,
      store: store.url!,
      socketPath: join(dir, "leash.sock"),
      logger: pino({ level: "silent" }),
      console: {
        listen: "127.0.0.1:0",
        tokens: [
          { sha256: tokenHash(ALICE), operator: "alice", readonly: false, organizations: ["acme"] },
          { sha256: tokenHash(VIEWER), operator: "viewer", readonly: true, organizations: ["acme"] },
        ],
      },
    });
  }, 60_000);

  afterAll(async () => {
    await daemon?.close();
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
  });

  async function agent(agentId = "ops-bot"): Promise<{ client: Client; session: string }> {
    const client = createClient({
      socketPath: daemon.address,
      organizationId: "acme",
      agentId,
      hmacKey: HMAC,
      keyId: "k1",
      timeoutMs: 10_000,
      heartbeatIntervalMs: 0,
    });
    clients.push(client);
    const { session_id } = await client.register();
    return { client, session: session_id };
  }

  /** Selects the queue entry of `tool` in session `session` once it shows. */
  async function open(page: Page, session: string, tool: string): Promise<void> {
    const entry = page.locator(`#queue button:has-text("${tool}")`, { hasText: session.slice(0, 20) });
    await entry.first().waitFor();
    await entry.first().click();
    await page.waitForSelector(`#d-tool:text-is("${tool}")`);
  }

  it("shows a waiting agent's request; approve runs the tool; a second (read-only) operator sees it live", async () => {
    const { client, session } = await agent("spender");
    const search = guard(
      client,
      { session_id: session, tool_name: "web_search", estimate: 1 },
      async () => "ok",
    );
    for (const q of ["leash", "shackle", "budgets"]) await search({ q });
    const ran: unknown[] = [];
    const send = guard(
      client,
      { session_id: session, tool_name: "send_email", estimate: "0.25" },
      async (p: { to: string }) => {
        ran.push(p);
        return "sent";
      },
    );
    const call = send({ to: "ops@example.com", subject: "quarterly numbers" } as { to: string });
    call.catch(() => undefined); // awaited below; a failure before that must not go unhandled
    const alice = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const viewer = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    try {
      await signIn(alice, daemon.consoleUrl!, ALICE);
      await signIn(viewer, daemon.consoleUrl!, VIEWER);
      await open(alice, session, "send_email");
      await open(viewer, session, "send_email");
      await expect.poll(() => alice.textContent("#d-params")).toContain('"to": "ops@example.com"');
      expect(await alice.textContent("#d-digest")).toMatch(/^[0-9a-f]{64}$/);
      expect(await alice.textContent("#d-reason")).toBe("budget_threshold");
      expect(await alice.locator("#d-verdicts tr").count()).toBe(4);
      expect(await alice.textContent("#d-countdown")).toMatch(/^1[45]:\d\d$/);
      expect(await alice.locator("#d-budget svg").count()).toBe(1);
      expect(await viewer.textContent("#who")).toContain("read-only");
      expect(await viewer.isDisabled("#b-approve")).toBe(true);
      await alice.screenshot({ path: join(ARTIFACTS, `console-${kind}-pending.png`) });
      // Keyboard: the approve shortcut on the selected request.
      await alice.locator("body").press("a");
      await expect(call).resolves.toBe("sent");
      expect(ran).toEqual([{ to: "ops@example.com", subject: "quarterly numbers" }]);
      await viewer.waitForSelector("#d-status:has-text('Approved by alice')");
      expect(await viewer.textContent("#banner")).toContain("approved by alice");
      await alice.screenshot({ path: join(ARTIFACTS, `console-${kind}-approved.png`) });
    } finally {
      await alice.close();
      await viewer.close();
    }
  }, 60_000);

  it("shows the policy rule that asked for a human; approve releases the call", async () => {
    const { client, session } = await agent("payer");
    const transfer = guard(
      client,
      { session_id: session, tool_name: "wire_transfer", estimate: 1 },
      async () => "wired",
    );
    const call = transfer({ usd: 900 });
    call.catch(() => undefined);
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    try {
      await signIn(page, daemon.consoleUrl!, ALICE);
      await open(page, session, "wire_transfer");
      expect(await page.textContent("#d-reason")).toBe("policy_hitl:rule:big-transfers");
      expect(await page.textContent("#d-rule")).toBe("big-transfers");
      await page.click("#b-approve");
      await expect(call).resolves.toBe("wired");
    } finally {
      await page.close();
    }
  }, 60_000);

  it("the budget panel: after an approved $0.05 call it says 4.95 of 5 USD remain, and its chart is labelled", async () => {
    const { client, session } = await agent();
    const pay = guard(
      client,
      { session_id: session, tool_name: "pay_invoice", estimate: "0.05" },
      async () => "paid",
    );
    const call = pay({ invoice: "inv-7" });
    call.catch(() => undefined);
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    try {
      await signIn(page, daemon.consoleUrl!, ALICE);
      await open(page, session, "pay_invoice");
      expect(await page.textContent("#d-budget-paused")).toBe(
        "When this call paused: 5 USD remaining, 0 USD settled",
      );
      await page.click("#b-approve");
      await expect(call).resolves.toBe("paid");
      // The verdict table and the panel agree: the approved call's hold is counted.
      await expect.poll(() => page.textContent("#d-verdicts")).toContain("4.95");
      await expect
        .poll(() => page.textContent("#d-budget-now"))
        .toMatch(/^Remaining now: 4\.95 of 5 USD \(after call \d+'s verdict\)$/);
      const labels = await page.locator("#d-budget svg text").allTextContents();
      expect(labels).toContain("Used 0.05 of 5 USD (spent and held)");
      expect(labels).toContain("Remaining after each recent verdict (USD)");
      await page.screenshot({ path: join(ARTIFACTS, `console-${kind}-budget.png`) });
    } finally {
      await page.close();
    }
  }, 60_000);

  it("reject: the waiting agent gets LeashDenied and the tool never runs", async () => {
    const { client, session } = await agent();
    let ran = false;
    const drop = guard(client, { session_id: session, tool_name: "drop_table" }, async () => {
      ran = true;
    });
    const call = drop({ table: "users" }).catch((e: unknown) => e);
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    try {
      await signIn(page, daemon.consoleUrl!, ALICE);
      await open(page, session, "drop_table");
      await page.fill("#comment", "not in production");
      await page.click("#b-reject");
      const error = await call;
      expect(LeashDenied.isInstance(error)).toBe(true);
      expect((error as LeashDenied).reason).toBe("hitl_transition:reject");
      expect(ran).toBe(false);
      await page.waitForSelector("#d-status:has-text('Rejected by alice')");
      expect(await page.textContent("#d-status")).toContain("not in production");
      await page.screenshot({ path: join(ARTIFACTS, `console-${kind}-rejected.png`) });
    } finally {
      await page.close();
    }
  }, 60_000);

  it("modify: the editor shows a diff, and the tool receives the operator's params", async () => {
    const { client, session } = await agent();
    const ran: unknown[] = [];
    const pay = guard(
      client,
      { session_id: session, tool_name: "pay_invoice" },
      async (p: { amount: number }) => {
        ran.push(p);
        return p.amount;
      },
    );
    const call = pay({ amount: 900, to: "mallory" } as { amount: number });
    call.catch(() => undefined); // awaited below
    // Phone width: the page must still fit.
    const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
    try {
      await signIn(page, daemon.consoleUrl!, ALICE);
      await open(page, session, "pay_invoice");
      expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
      await page.click("#modify summary");
      await page.fill("#editor", '{\n  "amount": 90,\n  "to": "alice"\n}');
      await page.waitForSelector("#diff .add:has-text('\"amount\": 90')");
      expect(await page.locator("#diff .del").allTextContents()).toEqual([
        '-   "amount": 900,',
        '-   "to": "mallory"',
      ]);
      await page.screenshot({ path: join(ARTIFACTS, `console-${kind}-modify-phone.png`), fullPage: true });
      await page.click("#b-modify");
      await expect(call).resolves.toBe(90);
      expect(ran).toEqual([{ amount: 90, to: "alice" }]);
      await page.waitForSelector("#d-status:has-text('Modified by alice')");
    } finally {
      await page.close();
    }
  }, 60_000);

  it("without a token (or with a wrong one) nothing is shown or sent: 401", async () => {
    const { client, session } = await agent();
    const pending = await client.preExec({ session_id: session, tool_name: "secret_tool", params: { x: 1 } });
    expect(pending.verdict).toBe("HITL");
    const page = await browser.newPage();
    try {
      const response = await page.goto(daemon.consoleUrl!);
      expect(response?.status()).toBe(401);
      expect(await page.content()).not.toContain("secret_tool");
      expect(await page.locator("#queue").count()).toBe(0);
      // The script and the control channel are refused too, even from the same origin.
      expect((await page.request.get(`${daemon.consoleUrl}console.js`)).status()).toBe(401);
      const upgrade = await page.evaluate(
        () =>
          new Promise<string>((resolve) => {
            const ws = new WebSocket(`ws://${location.host}/v1/control`);
            ws.onmessage = () => resolve("message");
            ws.onerror = () => resolve("refused");
          }),
      );
      expect(upgrade).toBe("refused");
      await page.fill("#token", "lct_wrong");
      const [wrong] = await Promise.all([
        page.waitForResponse((r) => r.url().endsWith("/login")),
        page.click("button[type=submit]"),
      ]);
      expect(wrong.status()).toBe(401);
      expect(await page.content()).not.toContain("secret_tool");
      await page.screenshot({ path: join(ARTIFACTS, `console-${kind}-401.png`) });
    } finally {
      await page.close();
    }
  }, 60_000);
});
