// Tests for the program shell: --help and --version everywhere, and usage errors as one line, never a stack.
// Command behaviour is tested in the per-command files; this covers what commander and run() add.
import { describe, expect, it } from "vitest";
import { expectOneLineError, leash } from "./helpers.js";

describe("leash program", () => {
  it("prints the package version", async () => {
    const r = await leash(["--version"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^\d+\.\d+\.\d+\S*\n$/);
  });

  it.each([[[]], [["conformance"]], [["hash"]], [["decide"]], [["bench"]], [["bench", "decide"]]])(
    "has --help on %j",
    async (path) => {
      const r = await leash([...path, "--help"]);
      expect(r.code).toBe(0);
      expect(r.stderr).toBe("");
      expect(r.stdout).toContain(`Usage: leash${path.length ? ` ${path.join(" ")}` : ""}`);
    },
  );

  it.each([
    [["conformance", "--bogus", "x.json"], "unknown option '--bogus'"],
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

  it("folds commander's suggestion onto the error line", async () => {
    const r = await leash(["conformance", "--verbos", "x.json"]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain("Did you mean --verbose?");
  });
});
