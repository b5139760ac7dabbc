// Way 2 of the README, as written: the clone's tarballs (`pack:all`) installed with npm into a new
// project, the TypeScript snippet run with tsx on SQLite and on PostgreSQL (only LEASH_STORE changes),
// and the daemon client's snippet against the README's daemon.
// One npm install of better-sqlite3 from source: the slow test of the README's set.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { block, Newcomer, stop } from "./readme-support.js";

const PG_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA = `leash_readme_${process.pid}`;
const user = new Newcomer();
const project = join(user.home, "my-agent");

beforeAll(async () => {
  expect((await user.link()).code).toBe(0);
  for (const name of ["key"]) {
    const r = await user.bash(block(name).code);
    expect(r.code, `${name}: ${r.stderr}`).toBe(0);
  }
}, 120_000);

afterAll(async () => {
  await user.bash(`psql "${PG_URL}" -qc 'DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE'`);
  user.cleanup(); // a node_modules with a compiled better-sqlite3: seconds to remove
}, 120_000);

describe("guard a TypeScript agent (README way 2)", () => {
  it("installs from the tarballs and runs the snippet on SQLite and PostgreSQL: three results, then max_repeat_exceeded, and the process exits", async () => {
    // The install blocks in one shell: the later ones use the first's $LEASH and directory.
    const install = await user.bash(
      ["ts-install", "ts-install-postgres", "ts-client-install"].map((name) => block(name).code).join("\n"),
      { timeoutMs: 900_000 },
    );
    expect(install.code, install.stdout + install.stderr).toBe(0);
    expect(block("ts-agent").lang).toBe("ts");
    writeFileSync(join(project, "agent.ts"), `${block("ts-agent").code}\n`);
    const expected = `${"results for circuit breakers\n".repeat(3)}stopped: max_repeat_exceeded\n`;
    for (const store of [undefined, `${PG_URL}?schema=${SCHEMA}`]) {
      const run = await user.bash("npx -y tsx agent.ts", {
        cwd: project,
        env: store === undefined ? {} : { LEASH_STORE: store },
        timeoutMs: 180_000,
      });
      // A process that lingered (a store left open) would be killed by the timeout, not exit 0.
      expect([run.code, run.stdout], `${store ?? "sqlite"}: ${run.stderr}`).toEqual([0, expected]);
    }
    // The daemon client's snippet, against the daemon of way 3.
    const setup = await user.bash(block("daemon-setup").code);
    expect(setup.code, setup.stderr).toBe(0);
    const daemon = await user.background(block("daemon-serve").code);
    try {
      writeFileSync(join(project, "client.ts"), `${block("ts-client").code}\n`);
      const client = await user.bash("npx -y tsx client.ts", { cwd: project, timeoutMs: 180_000 });
      expect([client.code, client.stdout], client.stderr).toEqual([0, "results for pricing\n"]);
    } finally {
      await stop(daemon.child);
    }
    const verified = await user.bash(
      `leash verify --store "sqlite:${project}/leash.db" --pubkey ~/.config/leash/leash.pub.hex`,
    );
    expect(verified.stdout, verified.stderr).toMatch(/^OK: \d+ entries verified/);
  }, 1_200_000);
});
