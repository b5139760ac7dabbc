// Test helper: child-process tests run the built dist, so make sure it is current before spawning.
// `tsc --build` is incremental: when nothing changed it costs about a second.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

export const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));

let built = false;
export function ensureBuilt(): void {
  if (built) return;
  execFileSync(`${REPO_ROOT}node_modules/.bin/tsc`, ["--build"], { cwd: REPO_ROOT, stdio: "inherit" });
  built = true;
}
