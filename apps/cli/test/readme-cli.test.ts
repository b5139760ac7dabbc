// The README's CLI blocks run as written by a newcomer: `leash` linked onto PATH, the signing key, the
// short tour, the HITL walkthrough, the daemon's secrets (0600, git-ignored) and its console.
import { execFileSync } from "node:child_process";
import { mkdirSync, statSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "./helpers.js";
import { block, Newcomer, SHARED_DIR, stop } from "./readme-support.js";

const user = new Newcomer();
afterAll(() => user.cleanup());

beforeAll(async () => {
  const linked = await user.link();
  expect(linked.code, linked.stderr).toBe(0);
  const key = await user.bash(block("key").code);
  expect(key.code, key.stderr).toBe(0);
}, 120_000);

describe("the README, followed word for word", () => {
  it("links `leash` onto PATH and makes the signing key outside the working tree, mode 0600", async () => {
    const which = await user.bash("command -v leash && leash --version");
    expect(which.stdout).toContain(join(user.prefix, "bin", "leash"));
    const key = join(user.home, ".config", "leash", "leash.key");
    expect(statSync(key).mode & 0o777).toBe(0o600);
    expect(statSync(join(user.home, ".config", "leash")).mode & 0o777).toBe(0o700);
  });

  it("the short tour and the HITL walkthrough: every line succeeds, and the approved call runs once", async () => {
    // A clone with shared/ beside it, as the tour's conformance line expects.
    const clone = join(user.root, "clone");
    mkdirSync(clone);
    symlinkSync(SHARED_DIR, join(user.root, "shared"));
    const tour = await user.bash(`${block("tour").code}\n${block("hitl").code}`, { cwd: clone });
    expect(tour.code, tour.stderr).toBe(0);
    expect(tour.stdout).toContain(
      '"verdict":"ALLOW","reason":"within_thresholds","budget_remaining_usd":"0.75"',
    );
    expect(tour.stdout).toMatch(/OK: 3 entries verified, head /);
    expect(tour.stdout).toMatch(/29 passed, 0 failed/);
    // HITL: listed, shown, approved; the re-sent call is released once.
    expect(tour.stdout).toMatch(/ pending +pay +session /);
    expect(tour.stdout).toMatch(/"decision":"approve"/);
    expect(tour.stdout).toMatch(/"verdict":"ALLOW","reason":"hitl_transition:approve"/);
  }, 120_000);

  it("the daemon's secrets: HMAC key and console tokens are 0600 under ~/.config/leash, and git ignores them", async () => {
    const setup = await user.bash(`${block("daemon-setup").code}\n${block("console-tokens").code}`);
    expect(setup.code, setup.stderr).toBe(0);
    const dir = join(user.home, ".config", "leash");
    for (const file of ["acme-k1.hmac", "tokens.json", "alice.token", "auditor.token"]) {
      expect(statSync(join(dir, file)).mode & 0o777, file).toBe(0o600);
    }
    // Written into a clone instead, git would not pick them up.
    const ignored = execFileSync(
      "git",
      [
        "check-ignore",
        "acme-k1.hmac",
        "tokens.json",
        "alice.token",
        "leash.key",
        "leash.db",
        "leash-tarballs/x.tgz",
      ],
      { cwd: REPO_ROOT, encoding: "utf8" },
    );
    expect(ignored.trim().split("\n")).toHaveLength(6);

    // The console block serves; the operator's token file reads the (empty) queue through it.
    const { child, listening } = await user.background(block("console-serve").code);
    try {
      expect(listening.console).toBe("http://127.0.0.1:8788/");
      const listed = await user.bash(
        "leash hitl list --console http://127.0.0.1:8788 --token-file ~/.config/leash/alice.token",
      );
      expect([listed.code, listed.stdout, listed.stderr]).toEqual([0, "no HITL requests\n", ""]);
    } finally {
      await stop(child);
    }
  }, 120_000);
});
