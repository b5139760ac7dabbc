// Key paths that are not regular files (FIFOs, directories) are refused at once, naming the flag.
// Runs the built binary in a child process: opening a FIFO blocks the whole process, so a hang shows as a timeout.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CLI_BIN, scratchDir, testKey } from "./helpers.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());

function leashBin(args: string[]) {
  if (!existsSync(CLI_BIN)) throw new Error(`${CLI_BIN} is missing: run \`npx tsc --build\` first`);
  const { LEASH_STORE: _store, LEASH_SIGNING_KEY: _key, ...env } = process.env;
  return spawnSync(process.execPath, [CLI_BIN, ...args], { encoding: "utf8", env, timeout: 10_000 });
}

const fifo = join(scratch.dir, "key.fifo");
spawnSync("mkfifo", [fifo]);

describe.skipIf(process.platform === "win32")(
  "key files that are not regular files",
  { timeout: 30_000 },
  () => {
    it("session create refuses a FIFO --key-file instead of waiting for a writer", () => {
      const r = leashBin(["session", "create", "--agent", "bot", "--store", "memory:", "--key-file", fifo]);
      expect(r.signal).toBeNull(); // not killed by the timeout
      expect(r.status).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toBe(`leash: error: signing key: ${fifo} is a FIFO, not a regular file\n`);
    });

    it("refuses a directory as --key-file", () => {
      const r = leashBin([
        "session",
        "create",
        "--agent",
        "bot",
        "--store",
        "memory:",
        "--key-file",
        scratch.dir,
      ]);
      expect(r.status).toBe(2);
      expect(r.stderr).toBe(`leash: error: signing key: ${scratch.dir} is a directory, not a regular file\n`);
    });

    it("key rotate refuses a FIFO --next-key-file, and receipt verify a FIFO --pubkey", () => {
      const rotate = leashBin([
        "key",
        "rotate",
        "--store",
        "memory:",
        "--key-file",
        testKey(scratch.dir).file,
        "--operator",
        "ops",
        "--next-key-file",
        fifo,
      ]);
      expect(rotate.signal).toBeNull();
      expect(rotate.status).toBe(2);
      expect(rotate.stderr).toContain(`--next-key-file: ${fifo} is a FIFO, not a regular file\n`);

      const receipt = leashBin(["receipt", "verify", "a.b.c", "--pubkey", fifo]);
      expect(receipt.signal).toBeNull();
      expect(receipt.status).toBe(2);
      expect(receipt.stderr).toBe(`leash: error: --pubkey: ${fifo} is a FIFO, not a regular file\n`);
    });
  },
);
