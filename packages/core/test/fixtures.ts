// Test helper: loads the published SP/1.0 fixture files from ../shared/spec/fixtures (never copied here).
// Only for tests; it validates nothing.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const FIXTURE_DIR = fileURLToPath(new URL("../../../../shared/spec/fixtures/", import.meta.url));
export const FIXTURE_FILES = ["conformance.json", "conformance-1.0.1.json"] as const;

export interface Vector {
  name: string;
  config: unknown;
  state: unknown;
  call: unknown;
  expected_verdict: string;
  expected_reason: string;
}

export function loadVectors(): Vector[] {
  return FIXTURE_FILES.flatMap(
    (file) => (JSON.parse(readFileSync(`${FIXTURE_DIR}${file}`, "utf8")) as { fixtures: Vector[] }).fixtures,
  );
}
