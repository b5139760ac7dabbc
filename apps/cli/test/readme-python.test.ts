// Way 3 of the README, as written: the daemon's secrets and config, `leash serve`, the Python client in a
// venv that reuses Debian's grpcio/protobuf, and the agent snippet against the real daemon.
// Needs /usr/bin/python3 with python3-venv, python3-setuptools, python3-protobuf (.ci/run installs them).
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { block, Newcomer, stop } from "./readme-support.js";

const user = new Newcomer();
let daemon: Awaited<ReturnType<Newcomer["background"]>> | undefined;

beforeAll(async () => {
  expect((await user.link()).code).toBe(0);
  for (const name of ["key", "daemon-setup"]) {
    const r = await user.bash(block(name).code);
    expect(r.code, `${name}: ${r.stderr}`).toBe(0);
  }
  daemon = await user.background(block("daemon-serve").code);
}, 120_000);

afterAll(async () => {
  await stop(daemon?.child);
  user.cleanup();
});

describe("guard a Python agent (README way 3)", () => {
  it("installs the client into a --system-site-packages venv without PyPI; the snippet runs three calls and is denied the fourth", async () => {
    const install = await user.bash(block("python-install").code, { timeoutMs: 300_000 });
    expect(install.code, install.stdout + install.stderr).toBe(0);
    expect(block("python-agent").lang).toBe("python");
    writeFileSync(join(user.home, "agent.py"), `${block("python-agent").code}\n`);
    const run = await user.bash("~/.venvs/leash/bin/python agent.py", { cwd: user.home });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout, run.stderr).toBe(`${"results for pricing\n".repeat(3)}denied: max_repeat_exceeded\n`);
    // The daemon signed every decision with the key the snippet pinned.
    expect(daemon?.listening.public_key).toBe(
      (await user.bash("cat ~/.config/leash/leash.pub.hex")).stdout.trim(),
    );
  }, 300_000);
});
