// Reading the config file: what is refused before a byte is parsed (oversized files, FIFOs, directories).
// Field validation is tested through parseConfigObject in engine.test.ts and the CLI's library tests.
import { execFileSync } from "node:child_process";
import { closeSync, constants, mkdtempSync, openSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LeashError, loadConfigFile, parseConfigObject } from "../src/index.js";

const dir = mkdtempSync(join(tmpdir(), "leash-config-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const LIMIT = 1024 * 1024;

/** A valid YAML config padded with a comment to exactly `bytes` bytes. */
function yamlOfSize(name: string, bytes: number): string {
  const head = "guard:\n  budget_usd: 5\n#";
  const path = join(dir, name);
  writeFileSync(path, `${head}${"x".repeat(bytes - head.length - 1)}\n`);
  return path;
}

async function refusal(promise: Promise<unknown>): Promise<LeashError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!LeashError.isInstance(error)) throw new Error(`expected a LeashError, got ${String(error)}`);
  return error;
}

describe("loadConfigFile", () => {
  it("reads a config of exactly 1 MiB", async () => {
    const file = await loadConfigFile(yamlOfSize("limit.yaml", LIMIT));
    expect(file.guard).toEqual({ budget_usd: 5 });
  });

  it("refuses one byte more, naming the limit", async () => {
    const error = await refusal(loadConfigFile(yamlOfSize("over.yaml", LIMIT + 1)));
    expect(error.code).toBe("config_invalid");
    expect(error.message).toContain("over.yaml");
    expect(error.message).toContain("1048576 bytes (1 MiB)");
  });

  it("refuses a 50 MB file from its size, without reading it", async () => {
    const path = join(dir, "huge.yaml");
    writeFileSync(path, "guard: {}\n");
    truncateSync(path, 50 * 1024 * 1024); // sparse: costs no disk, but a reader would see 50 MB
    const started = performance.now();
    const error = await refusal(loadConfigFile(path));
    expect(performance.now() - started).toBeLessThan(500);
    expect(error.message).toContain("1048576 bytes (1 MiB)");
  });

  it("refuses a FIFO at once instead of waiting for a writer", async () => {
    const fifo = join(dir, "config.fifo.yaml");
    execFileSync("mkfifo", [fifo]);
    const load = loadConfigFile(fifo);
    const timeout = new Promise<"hung">((resolve) => setTimeout(() => resolve("hung"), 2000).unref());
    try {
      const outcome = await Promise.race([
        load.then(
          () => "read",
          (e: unknown) => e,
        ),
        timeout,
      ]);
      expect(outcome).not.toBe("hung");
      expect(LeashError.isInstance(outcome) && outcome.message).toBe(
        `cannot read config file ${fifo}: not a regular file`,
      );
    } finally {
      // Release a reader blocked in open(2), if any, so the test process can exit.
      try {
        closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // ENXIO: nobody has it open for reading, which is what should happen.
      }
      await load.catch(() => undefined);
    }
  });

  it("refuses a directory", async () => {
    const error = await refusal(loadConfigFile(dir));
    expect(error.message).toBe(`cannot read config file ${dir}: not a regular file`);
  });
});

describe("parseConfigObject", () => {
  it("names the allowed values of an enum field (hitl_mode)", () => {
    expect(() => parseConfigObject({ guard: { hitl_mode: "sometimes" } }, "c.yaml")).toThrow(
      'c.yaml: /guard/hitl_mode must be one of "never", "on_deny", "on_threshold", "always"',
    );
  });
});
