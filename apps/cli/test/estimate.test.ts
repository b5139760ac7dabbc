// Estimates from the shell: `evaluate --estimate` is read as an exact decimal, a budgeted call
// without one is denied unless the config file's guard gives a default, and the hold TTL is bounded.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { type Captured, expectOneLineError, leash, scratchDir, testKey } from "./helpers.js";
import { STORE_KINDS, type TestStore, testStore } from "./stores.js";

const json = (r: Captured) => {
  expect(r.stderr).toBe("");
  return JSON.parse(r.stdout);
};

const keys = scratchDir();
afterAll(() => keys.cleanup());
const KEY_ENV = { LEASH_SIGNING_KEY: testKey(keys.dir).pem };

describe.each(STORE_KINDS)("estimates on %s", (kind) => {
  let store: TestStore;
  beforeEach(async () => {
    store = await testStore(kind);
  });
  afterEach(async () => {
    await store.cleanup();
  });
  const L = (argv: string[]) => leash([...argv, "--store", store.url], "", KEY_ENV);
  const create = async (...flags: string[]): Promise<string> =>
    json(await L(["session", "create", "--agent", "bot", ...flags])).session_id;
  const evaluate = (session: string, ...flags: string[]) =>
    L(["evaluate", "--session", session, "--tool", "search", ...flags]);

  it("reads --estimate as an exact decimal, not through a float", async () => {
    const over = await evaluate(await create("--budget", "1"), "--estimate", "1.0000000000000000000000001");
    expect([over.code, json(over).reason, json(over).budget_remaining_usd]).toEqual([
      3,
      "budget_overrun",
      "1",
    ]);
    const exact = await evaluate(await create("--budget", "1"), "--estimate", "1");
    expect([exact.code, json(exact).budget_remaining_usd, json(exact).estimate_usd]).toEqual([0, "0", "1"]);
  });

  it("denies a budgeted call without --estimate unless the config file gives a default", async () => {
    const missing = await evaluate(await create("--budget", "1"));
    expect([missing.code, json(missing).reason]).toEqual([3, "policy_violation:missing_estimate"]);
    const config = join(store.dir, "defaults.yaml");
    writeFileSync(config, 'guard:\n  default_estimate_usd: "0.25"\n  tool_estimates_usd:\n    search: 0.1\n');
    const s = json(
      await L(["session", "create", "--agent", "bot", "--budget", "1", "--config", config]),
    ).session_id;
    const held = await L(["evaluate", "--session", s, "--tool", "search", "--config", config]);
    expect([held.code, json(held).estimate_usd, json(held).budget_remaining_usd]).toEqual([0, "0.1", "0.9"]);
    const other = await L(["evaluate", "--session", s, "--tool", "fetch", "--config", config]);
    expect([other.code, json(other).estimate_usd, json(other).budget_remaining_usd]).toEqual([
      0,
      "0.25",
      "0.65",
    ]);
  });

  it("refuses a reservation_ttl_s beyond 365 days with one clear line", async () => {
    const config = join(store.dir, "ttl.json");
    writeFileSync(config, JSON.stringify({ reservation_ttl_s: 1e10 }));
    const r = await L(["session", "create", "--agent", "bot", "--budget", "1", "--config", config]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain("/reservation_ttl_s must be <= 31536000");
  });
});
