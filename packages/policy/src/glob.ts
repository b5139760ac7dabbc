// Tool and agent name globs: `*` any run of characters, `?` one character, everything else literal.
// Compiled once at load to one anchored RegExp per list; no backtracking blow-up (a run of `*` is one).
import { PolicyError } from "./errors.js";

export interface GlobSet {
  readonly patterns: readonly string[];
  test(name: string): boolean;
}

function globSource(glob: string): string {
  let out = "";
  let previousStar = false;
  for (const ch of glob) {
    if (ch === "*") {
      if (!previousStar) out += ".*";
      previousStar = true;
      continue;
    }
    previousStar = false;
    out += ch === "?" ? "." : ch.replace(/[\\^$.|+()[\]{}]/g, "\\$&");
  }
  return out;
}

export function compileGlobs(globs: string | readonly string[], path: string): GlobSet {
  const patterns = typeof globs === "string" ? [globs] : [...globs];
  if (patterns.some((p) => p.trim() !== p)) {
    throw new PolicyError("policy_invalid", path, "a glob may not start or end with spaces");
  }
  const all = patterns.includes("*");
  const re = new RegExp(`^(?:${patterns.map(globSource).join("|")})$`, "su");
  return { patterns, test: all ? () => true : (name) => re.test(name) };
}
