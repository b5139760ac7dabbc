// Tests for the program shell: --help and --version everywhere, and usage errors as one line, never a stack.
// Command behaviour is tested in the per-command files; this covers what commander and run() add.
import type { Command } from "commander";
import { describe, expect, it } from "vitest";
import { buildProgram, nodeIo } from "../src/program.js";
import { expectOneLineError, leash } from "./helpers.js";

/** Every command that runs something (no subcommands of its own), as its argv path. */
function leafCommands(command: Command, path: string[] = []): string[][] {
  if (command.commands.length === 0) return [path];
  return command.commands.flatMap((sub) => leafCommands(sub, [...path, sub.name()]));
}
const LEAVES = leafCommands(buildProgram(nodeIo(), () => undefined));

describe("leash program", () => {
  it("prints the package version", async () => {
    const r = await leash(["--version"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^\d+\.\d+\.\d+\S*\n$/);
  });

  it.each([
    [[]],
    [["conformance"]],
    [["hash"]],
    [["decide"]],
    [["bench"]],
    [["bench", "decide"]],
    [["bench", "engine"]],
    [["migrate"]],
    [["session"]],
    [["session", "create"]],
    [["session", "show"]],
    [["session", "reset"]],
    [["session", "resume"]],
    [["guard"]],
    [["guard", "create"]],
    [["evaluate"]],
    [["post-exec"]],
    [["expire"]],
    [["keygen"]],
    [["key"]],
    [["key", "rotate"]],
    [["verify"]],
    [["export"]],
    [["receipt"]],
    [["receipt", "verify"]],
    [["recover"]],
    [["relay"]],
    [["mcp"]],
  ])("has --help on %j", async (path) => {
    const r = await leash([...path, "--help"]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toContain(`Usage: leash${path.length ? ` ${path.join(" ")}` : ""}`);
  });

  it("documents evaluate's exit statuses for scripts", async () => {
    const r = await leash(["evaluate", "--help"]);
    expect(r.stdout).toContain("0  ALLOW");
    expect(r.stdout).toContain("3  DENY");
    expect(r.stdout).toContain("4  HITL");
    expect(r.stdout).toContain("--store <url>");
    expect(r.stdout).toContain("--config <file>");
    // The receipt it prints, and how to check it.
    expect(r.stdout).toContain("receipt");
    expect(r.stdout).toContain("leash receipt verify");
    expect(r.stdout).toContain("--key-file <path>");
    expect(r.stdout).toContain("--ephemeral-key");
    // The worker flag is internal.
    expect((await leash(["bench", "engine", "--help"])).stdout).not.toContain("--worker");
  });

  it.each([
    [["conformance", "--bogus", "x.json"], "unknown option '--bogus'"],
    [["evaluate", "--tool", "t"], "required option '--session <id>' not specified"],
    [["evaluate", "--session", "s", "--tool", "t", "--estimate", "-1"], "expected an amount in USD"],
    [["session", "create"], "required option '--agent <id>' not specified"],
    [["session", "create", "--agent", "a", "--hitl", "sometimes"], "Allowed choices are never, on_deny"],
    [["session", "resume", "s", "--operator", "o"], "required option '--decision <decision>' not specified"],
    [
      ["session", "resume", "s", "--decision", "approve", "--operator", "o", "--successor-digest", "xyz"],
      "64-digit",
    ],
    [["post-exec", "--session", "s", "--call", "0", "--actual", "1"], "at least 1"],
    [["guard", "create", "g", "--limit", "1e3"], "expected an amount in USD"],
    [["bench", "engine", "--concurrency", "0"], "at least 1"],
    [["keygen"], "required option '--out <path>' not specified"],
    [["key", "rotate", "--key-file", "k"], "required option '--next-key-file <path>' not specified"],
    [["export", "--format", "csv"], "Allowed choices are jsonl, shackle-ledger"],
    [["receipt", "verify"], "missing required argument 'receipt'"],
    [["session", "show", "s", "--key-file", "k"], "unknown option '--key-file'"],
    [["--bogus"], "unknown option '--bogus'"],
    [["conformance"], "missing required argument 'files'"],
    [["hash", "a.json", "b.json"], "too many arguments"],
    [["frobnicate"], "unknown command 'frobnicate'"],
    [["bench", "decide", "--seconds", "soon"], "expected a positive number of seconds"],
    [["bench", "decide", "--seconds", "0"], "expected a positive number of seconds"],
    [["bench", "decide", "--warmup", "-1"], "expected a non-negative number of seconds"],
  ])("rejects %j in one line with a non-zero status", async (argv, message) => {
    const r = await leash(argv);
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe("");
    expectOneLineError(r.stderr);
    expect(r.stderr).toMatch(/^leash: error: /);
    expect(r.stderr).toContain(message);
  });

  it("reports an unknown flag before a missing required option", async () => {
    const r = await leash(["evaluate", "--bogus-flag"]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain("unknown option '--bogus-flag'");
    expect(r.stderr).not.toContain("--session");
  });

  it("still names a missing required option once every flag is known", async () => {
    const r = await leash(["evaluate", "--tool", "t", "--store", "memory:"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe("leash: error: required option '--session <id>' not specified\n");
  });

  it("covers every command", () => {
    expect(LEAVES.length).toBeGreaterThan(20);
    expect(LEAVES).toContainEqual(["session", "resume"]);
  });

  it.each(LEAVES.map((path) => [path.join(" "), path] as const))(
    "reports an unknown flag first on `leash %s`",
    async (_, path) => {
      const r = await leash([...path, "--bogus-flag"]);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe("");
      expectOneLineError(r.stderr);
      expect(r.stderr).toMatch(/^leash: error: unknown option '--bogus-flag'/);
    },
  );

  it("folds commander's suggestion onto the error line", async () => {
    const r = await leash(["conformance", "--verbos", "x.json"]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain("Did you mean --verbose?");
  });
});
