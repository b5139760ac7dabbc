// `leash mcp --policy` end to end with the official MCP SDK client, on SQLite and PostgreSQL: a tool the
// policy never allows is left out of tools/list (and denied if called), a rate rule refuses the third call,
// estimate_usd rules give each tool its cost (held against the budget), and `leash verify --replay` passes.
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ChainEntryRecord } from "@leash/core";
import { openStore, type TestStore } from "@leash/test-stores";
import { afterEach, describe, expect, it } from "vitest";
import { CLI, firstText, type Proxied, proxied, TEST_SERVER, workspace } from "./harness.js";

const TIMEOUT = 60_000;

const POLICY = `
version: 1
name: mcp-tools
rules:
  - { name: no-delete, match: { tool: delete_all }, action: deny, message: deleting everything is not allowed }
  - { name: echo-rate, match: { tool: echo }, action: { rate: { limit: 2, window_s: 3600, per: session } } }
  - { name: paid-cost, match: { tool: paid }, action: { estimate_usd: 0.4 } }
  - { name: default-cost, match: { tool: "*" }, action: { estimate_usd: 0.01 } }
`;

let open: Proxied[] = [];
let stores: TestStore[] = [];
afterEach(async () => {
  await Promise.allSettled(open.map((p) => p.close()));
  await Promise.allSettled(stores.map((s) => s.close()));
  open = [];
  stores = [];
});

describe.each(["sqlite", "postgres"] as const)("leash mcp --policy on %s", (kind) => {
  it(
    "hides never-allowed tools, decides by rule, takes each tool's cost from the policy",
    async () => {
      const ws = workspace();
      const store = await openStore(kind, { label: "mcppolicy" });
      stores.push(store);
      const policyFile = join(ws.dir, "policy.yaml");
      writeFileSync(policyFile, POLICY);
      const config = ws.writeConfig("guard: { budget_usd: 1, max_repeat_calls: 10 }\n");
      const proxy = await proxied(ws, [
        "--config",
        config,
        "--store",
        store.url as string,
        "--key-file",
        ws.keyFile,
        "--policy",
        policyFile,
        "--",
        process.execPath,
        TEST_SERVER,
      ]);
      open.push(proxy);
      const { client } = proxy;

      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual(["crash", "echo", "fail", "paid", "slow", "stats"]);

      const deleted = await client.callTool({ name: "delete_all", arguments: {} });
      expect(deleted.isError).toBe(true);
      expect(deleted.structuredContent).toMatchObject({
        verdict: "DENY",
        reason: "policy_violation:rule:no-delete",
      });
      expect(firstText(await client.callTool({ name: "echo", arguments: { text: "a" } }))).toBe("echo: a");
      expect(firstText(await client.callTool({ name: "echo", arguments: { text: "b" } }))).toBe("echo: b");
      const third = await client.callTool({ name: "echo", arguments: { text: "c" } });
      expect(third.isError).toBe(true);
      expect(third.structuredContent).toMatchObject({
        verdict: "DENY",
        reason: "policy_violation:rule:echo-rate",
      });
      const paid = await client.callTool({ name: "paid", arguments: { q: "x" } });
      expect(paid.isError).toBeFalsy();
      expect(ws.calls().map((c) => c.tool)).toEqual(["echo", "echo", "paid"]);

      const rows: ChainEntryRecord[] = await store.substrate.transaction((tx) => tx.chain.range(0, 10_000));
      const decisions = rows.filter((r) => r.kind === "decision").map((r) => JSON.parse(r.body).data);
      expect(decisions.map((d) => [d.tool_name, d.verdict, d.estimate_usd])).toEqual([
        ["delete_all", "DENY", "0.01"],
        ["echo", "ALLOW", "0.01"],
        ["echo", "ALLOW", "0.01"],
        ["echo", "DENY", "0.01"],
        ["paid", "ALLOW", "0.4"],
      ]);
      await proxy.close();
      const pub = join(ws.dir, "leash.pub.hex");
      writeFileSync(pub, ws.publicKeyHex);
      const verified = spawnSync(
        process.execPath,
        [CLI, "verify", "--replay", "--store", store.url as string, "--pubkey", pub],
        { encoding: "utf8" },
      );
      expect(verified.status, verified.stderr).toBe(0);
    },
    TIMEOUT,
  );
});
