// `leash evaluate --policy`, `leash policy report` and `leash policy explain` on SQLite and PostgreSQL
// (STORE_KINDS): rule verdicts from the shell, would-be verdicts of monitor rules summed per rule,
// and the rule that decided one call with its inputs, all read back from the chain.
import { verify } from "node:crypto";
import { readFileSync } from "node:fs";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { type Captured, leash, scratchDir, testKey } from "./helpers.js";
import { STORE_KINDS, type TestStore, testStore } from "./stores.js";

const json = (r: Captured) => {
  expect(r.stderr).toBe("");
  return JSON.parse(r.stdout);
};

const scratch = scratchDir();
afterAll(() => scratch.cleanup());
const KEY = testKey(scratch.dir);
const KEY_ENV = { LEASH_SIGNING_KEY: KEY.pem };
const PUB = KEY.pubHex;
const POLICY = scratch.write(
  "ops.yaml",
  `version: 1
name: ops
rules:
  - name: big-refunds
    match: { tool: refund }
    when: "has(args.usd) && args.usd > 100"
    action: deny
    message: refunds over $100 need finance
  - name: shadow-search
    match: { tool: search }
    action: { rate: { limit: 1, window_s: 3600 } }
    mode: monitor
`,
);

describe.each(STORE_KINDS)("policies from the shell on %s", (kind) => {
  let store: TestStore;
  beforeEach(async () => {
    store = await testStore(kind);
  });
  afterEach(async () => {
    await store.cleanup();
  });
  const L = (argv: string[]) => leash([...argv, "--store", store.url], "", KEY_ENV);

  it("evaluate --policy decides by rule; report sums per rule; explain names the rule and its inputs", async () => {
    const sid = json(await L(["session", "create", "--agent", "bot", "--session", "s1"])).session_id;
    const evaluate = (tool: string, params: string, nonce: string) =>
      L([
        "evaluate",
        "--session",
        sid,
        "--tool",
        tool,
        "--params",
        params,
        "--nonce",
        nonce,
        "--policy",
        POLICY,
      ]);
    const denied = await evaluate("refund", '{"usd":250}', "1");
    expect(denied.code).toBe(3);
    expect(JSON.parse(denied.stdout).reason).toBe("policy_violation:rule:big-refunds");
    expect((await evaluate("refund", '{"usd":5}', "2")).code).toBe(0);
    for (const n of ["3", "4", "5"]) expect((await evaluate("search", `{"q":${n}}`, n)).code).toBe(0);

    const report = json(await L(["policy", "report", "--json"]));
    expect(report.decisions).toBe(5);
    expect(report.versions).toHaveLength(1);
    expect(report.versions[0]).toMatchObject({ name: "ops", decisions: 5 });
    expect(report.rules).toEqual([
      { rule: "big-refunds", decided: { DENY: 1 }, would: {} },
      { rule: "shadow-search", decided: {}, would: { DENY: 2 } },
    ]);
    const text = await L(["policy", "report"]);
    expect(text.stdout).toContain("rule shadow-search: decided -; would DENY 2");

    const explained = json(await L(["policy", "explain", "--session", sid, "--call", "1"]));
    expect(explained).toMatchObject({
      verdict: "DENY",
      reason: "policy_violation:rule:big-refunds",
      policy_name: "ops",
      decided_by: { rule: "big-refunds", verdict: "DENY" },
      rule: { name: "big-refunds", when: "has(args.usd) && args.usd > 100", action: "deny" },
      inputs: { tool: "refund", agent: "bot", args: { usd: 250 }, session: { id: sid, calls: 0 } },
    });
    const missing = await L(["policy", "explain", "--session", sid, "--call", "99"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`no decision for call 99 of session ${sid}`);
    const verified = await L(["verify", "--replay", "--pubkey", PUB]);
    expect(verified.code, verified.stderr).toBe(0);
  });
});

describe("leash policy sign", () => {
  it("writes FILE.sig, the Ed25519 signature of the file's bytes by the operator's key", async () => {
    const signed = await leash(["policy", "sign", POLICY, "--key-file", KEY.file]);
    expect(signed.code, signed.stderr).toBe(0);
    expect(signed.stdout).toContain(`signed by key ${KEY.keyId}`);
    const sig = Buffer.from(readFileSync(`${POLICY}.sig`, "utf8").trim(), "hex");
    const der = Buffer.concat([
      Buffer.from("302a300506032b6570032100", "hex"),
      Buffer.from(KEY.publicKeyHex, "hex"),
    ]);
    expect(verify(null, readFileSync(POLICY), { key: der, format: "der", type: "spki" }, sig)).toBe(true);
    const unsigned = await leash(["policy", "sign", POLICY]);
    expect(unsigned.code).toBe(2);
  });
});
