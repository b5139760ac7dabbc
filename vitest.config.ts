// Root Vitest config: one project per package; workspace imports resolve to source.
// It does not build anything: `tsc --build` produces dist for the CLI.
import { existsSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL(".", import.meta.url));
const packageDirs = ["packages", "apps"].flatMap((group) =>
  readdirSync(`${root}${group}`, { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(`${root}${group}/${d.name}/package.json`))
    .map((d) => `${group}/${d.name}`),
);

// `@leash/<name>` and `@leash/<name>/<sub>` map to packages/<name>/src so tests never run stale dist.
const alias = [
  // The CLI is an app, not under packages/; @leash/bench imports its helpers.
  { find: /^@leash\/cli\/internal$/, replacement: `${root}apps/cli/src/internal.ts` },
  { find: /^@leash\/([a-z-]+)\/([a-z-]+)$/, replacement: `${root}packages/$1/src/$2/index.ts` },
  { find: /^@leash\/([a-z-]+)$/, replacement: `${root}packages/$1/src/index.ts` },
];

export default defineConfig({
  test: {
    reporters: ["default", "./scripts/plain-summary-reporter.mjs"],
    projects: packageDirs.map((dir) => ({
      resolve: { alias },
      test: {
        name: dir.split("/")[1],
        root: `${root}${dir}`,
        include: ["src/**/*.test.ts", "test/**/*.test.ts"],
      },
    })),
  },
});
