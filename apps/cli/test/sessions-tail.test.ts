// `leash sessions list` and `leash tail` as a user runs them: the built binary against a real SQLite
// store that the engine writes in this process (and, with --follow, keeps writing while tail reads).
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import { createEngine, type Engine } from "@leash/engine";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { verdictPainter } from "../src/colour.js";
import { nodeIo } from "../src/io.js";
import { CLI_BIN } from "./helpers.js";

const KEY = generateKeyPair();
let dir: string;
let store: string;
let engine: Engine;
let close: () => Promise<void>;
const ids: Record<string, string> = {};

function leash(args: string[]) {
  if (!existsSync(CLI_BIN)) throw new Error(`${CLI_BIN} is missing: run \`npx tsc --build\` first`);
  const { LEASH_STORE: _s, NO_COLOR: _n, ...env } = process.env;
  return spawnSync(process.execPath, [CLI_BIN, ...args], { encoding: "utf8", env, timeout: 30_000 });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "leash-cli-tail-"));
  const path = join(dir, "leash.db");
  store = `sqlite:${path}`;
  const substrate = await openSqliteSubstrate({ path });
  await substrate.migrate();
  close = () => substrate.close();
  engine = createEngine({ substrate, signer: KEY.signer });
  // support-bot: two lookups allowed, the third identical one denied (repeat limit 2).
  const support = await engine.register({
    agent_id: "support-bot",
    session_id: "s-support",
    config: { max_repeat_calls: 2, budget_usd: 5, default_estimate_usd: 0.5 },
  });
  for (const n of [1, 2, 3]) {
    await engine.evaluate({ session_id: support.session_id, tool_name: "crm.lookup", nonce: `c${n}` });
  }
  // research-bot: paused on a human (HITL on every call).
  const research = await engine.register({
    agent_id: "research-bot",
    session_id: "s-research",
    config: { hitl_mode: "always" },
  });
  await engine.evaluate({ session_id: research.session_id, tool_name: "web.fetch", nonce: 1 });
  ids.support = support.session_id;
  ids.research = research.session_id;
});

afterAll(async () => {
  await close();
  rmSync(dir, { recursive: true, force: true });
});

describe("leash sessions list", { timeout: 60_000 }, () => {
  it("prints every session as a table, most recently active first, with its budget left", () => {
    const r = leash(["sessions", "list", "--store", store]);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(
      /^SESSION\s+AGENT\s+ORG\s+STATUS\s+CIRCUIT\s+CALLS\s+BUDGET LEFT\s+LAST ACTIVITY$/,
    );
    expect(lines).toHaveLength(4);
    expect(lines[2]).toMatch(/^s-research\s+research-bot\s+default\s+PAUSED\s+closed\s+1\s+-\s+\d{4}-/);
    expect(lines[3]).toMatch(/^s-support\s+support-bot\s+default\s+ACTIVE\s+open\s+3\s+\$4\.00 of \$5\.00\s/);
  });

  it("filters by status and agent, prints JSON Lines, and says when nothing matches", () => {
    const paused = leash(["sessions", "list", "--store", store, "--status", "PAUSED", "--json"]);
    expect(paused.status).toBe(0);
    const rows = paused.stdout
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(rows.map((row) => [row.session_id, row.status, row.calls])).toEqual([["s-research", "PAUSED", 1]]);
    const byAgent = leash(["sessions", "list", "--store", store, "--agent", "support-bot", "--json"]);
    expect(JSON.parse(byAgent.stdout)).toMatchObject({
      session_id: "s-support",
      circuit_open: true,
      budget_usd: 5,
      budget_remaining_usd: 4,
    });
    const none = leash(["sessions", "list", "--store", store, "--agent", "nobody"]);
    expect([none.status, none.stdout]).toEqual([0, `no sessions in ${store} match the filter\n`]);
    const memory = leash(["sessions", "list", "--store", "memory:"]);
    expect([memory.status, memory.stdout]).toEqual([
      0,
      "no sessions: a memory: store lives in one process and starts empty in each command (list a sqlite: or postgres:// store)\n",
    ]);
  });

  it("refuses a bad status and a store that does not exist with one line, exit 2", () => {
    const bad = leash(["sessions", "list", "--store", store, "--status", "asleep"]);
    expect(bad.status).toBe(2);
    expect(bad.stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(bad.stderr).toMatch(/--status <status>.*asleep/);
    const missing = leash(["sessions", "list", "--store", `sqlite:${join(dir, "none.db")}`]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/^leash: error: no store at .*none\.db: the file does not exist\n$/);
    expect(existsSync(join(dir, "none.db"))).toBe(false);
  });
});

describe("leash tail", { timeout: 60_000 }, () => {
  const LINE = /^(\S+)\s{2}(\S+)\s{2}(\S+)\s{2}(ALLOW|DENY |HITL )\s{2}(\S+)$/;

  it("prints the latest decisions one line each: time, session, tool, verdict, reason (no colour in a pipe)", () => {
    const r = leash(["tail", "--store", store]);
    expect(r.status).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines).toHaveLength(4);
    const cells = lines.map((l) => LINE.exec(l)?.slice(1));
    expect(cells.map((c) => c?.slice(1).map((x) => x.trim()))).toEqual([
      ["s-support", "crm.lookup", "ALLOW", "within_thresholds"],
      ["s-support", "crm.lookup", "ALLOW", "within_thresholds"],
      ["s-support", "crm.lookup", "DENY", "max_repeat_exceeded"],
      ["s-research", "web.fetch", "HITL", "hitl_all_calls"],
    ]);
    expect(new Date(cells[0]![0]!).toISOString()).toBe(cells[0]![0]);
    expect(r.stdout).not.toContain("\x1b[");
    const last = leash(["tail", "--store", store, "-n", "1", "--session", ids.support!, "--json"]);
    expect(JSON.parse(last.stdout)).toMatchObject({
      session_id: "s-support",
      agent_id: "support-bot",
      verdict: "DENY",
      reason: "max_repeat_exceeded",
      budget_after_usd: "4",
    });
  });

  it("--daemon without its organization is one line, exit 2 (tail-daemon.test.ts runs it against a daemon)", () => {
    const r = leash(["tail", "--daemon", "/tmp/leash.sock"]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^leash: error: --daemon needs --org .*\n$/);
  });

  it("--follow prints each new decision as it is committed, and exits 0 on SIGTERM", async () => {
    const child: ChildProcess = spawn(
      process.execPath,
      [CLI_BIN, "tail", "--store", store, "-f", "-n", "1"],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let out = "";
    child.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
    });
    const seen = (pattern: RegExp) =>
      new Promise<void>((resolve, reject) => {
        const check = () => {
          if (!pattern.test(out)) return;
          child.stdout!.off("data", check);
          resolve();
        };
        child.stdout!.on("data", check);
        child.once("exit", () => reject(new Error(`tail exited early: ${out}`)));
        check();
      });
    try {
      // The last decision so far first (so the test knows tail is reading), then each new one.
      await seen(/web\.fetch\s+HITL/);
      const late = await engine.register({ agent_id: "late-bot", config: {} });
      await engine.evaluate({ session_id: late.session_id, tool_name: "shell.run", nonce: "x" });
      await seen(/shell\.run\s+ALLOW\s+within_thresholds/);
      await engine.evaluate({ session_id: late.session_id, tool_name: "shell.run", nonce: "x" });
      await seen(/shell\.run\s+DENY\s+policy_violation:duplicate_nonce/);
      expect(out.trimEnd().split("\n")).toHaveLength(3);
      expect(out).not.toMatch(/crm\.lookup/);
    } finally {
      child.kill("SIGTERM");
    }
    const code = await new Promise<number | null>((resolve) => {
      if (child.exitCode !== null) resolve(child.exitCode);
      else child.once("exit", (c) => resolve(c));
    });
    expect(code).toBe(0);
  });
});

describe("verdict colours", () => {
  it("paint only on a terminal, and never with NO_COLOR set", () => {
    const base = nodeIo();
    const tty = verdictPainter({ ...base, stdoutIsTTY: true, env: {} });
    expect(tty("DENY ", "DENY")).toBe("\x1b[31mDENY \x1b[39m");
    expect(tty("ALLOW", "ALLOW")).toBe("\x1b[32mALLOW\x1b[39m");
    expect(verdictPainter({ ...base, stdoutIsTTY: true, env: { NO_COLOR: "1" } })("DENY", "DENY")).toBe(
      "DENY",
    );
    expect(verdictPainter({ ...base, stdoutIsTTY: false, env: {} })("DENY", "DENY")).toBe("DENY");
  });
});
