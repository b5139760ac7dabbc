// The committed src/gen is exactly what `buf generate` makes from the proto now, so the two cannot drift.
// It runs the buf binary from node_modules (no network); it does not check the proto's content.

import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const pkg = fileURLToPath(new URL("..", import.meta.url));

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((d) => d.isFile())
    .map((d) => relative(dir, join(d.parentPath, d.name)))
    .sort();
}

it("src/gen matches buf generate", () => {
  const out = mkdtempSync(join(tmpdir(), "leash-wire-gen-"));
  try {
    const bin = join(pkg, "node_modules/.bin");
    execFileSync(join(bin, "buf"), ["generate", "--output", out], {
      cwd: pkg,
      env: { ...process.env, PATH: `${bin}:${process.env.PATH}` },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const fresh = join(out, "src/gen");
    const committed = join(pkg, "src/gen");
    expect(files(fresh)).toEqual(files(committed));
    for (const f of files(fresh)) {
      expect(
        readFileSync(join(committed, f), "utf8"),
        `${f} is stale: run pnpm --filter @leash/wire generate`,
      ).toBe(readFileSync(join(fresh, f), "utf8"));
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}, 60_000);
