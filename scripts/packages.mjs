// The workspace's public packages and their tarballs (`pnpm pack`), shared by `pnpm pack:all` and
// scripts/check-packages.mjs. It packs; it lints, installs and publishes nothing.
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const root = fileURLToPath(new URL("..", import.meta.url));
export const PNPM = ["-y", "pnpm@12.4.2"];

/** Every package.json under packages/ and apps/ without `private`: { dir, name }. */
export function publicPackages() {
  const found = [];
  for (const group of ["packages", "apps"]) {
    for (const entry of readdirSync(join(root, group), { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      const dir = join(root, group, entry.name);
      let manifest;
      try {
        manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
      } catch {
        continue;
      }
      if (manifest.private === true) continue;
      found.push({ dir, name: manifest.name });
    }
  }
  return found;
}

/** Packs every public package into `destination`; returns package name → tarball path. */
export function packAll(destination) {
  mkdirSync(destination, { recursive: true });
  const packed = new Map();
  for (const { dir, name } of publicPackages()) {
    const out = execFileSync("npx", [...PNPM, "pack", "--pack-destination", destination], {
      cwd: dir,
      stdio: ["ignore", "pipe", "pipe"],
      encoding: "utf8",
    });
    const file = out.trim().split("\n").pop().trim();
    packed.set(name, file.startsWith("/") ? file : join(destination, file));
  }
  return packed;
}
