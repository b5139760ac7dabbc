// The Leash configuration file (JSON or YAML): where state lives and the default guard config.
// Reading and validating only (errors name the field); opening the store is the app's job.
import { readFile } from "node:fs/promises";
import type { Config } from "@leash/core";
import { configSchema } from "@leash/core/schema";
import { Ajv } from "ajv";
import { parse as parseYaml } from "yaml";
import { LeashError } from "./errors.js";
import { MAX_RESERVATION_TTL_S } from "./limits.js";

export interface LeashConfigFile {
  /** `sqlite:./leash.db` (default) or `postgres://user@host:5432/db`. */
  store: string;
  /** The guard config new sessions get unless they bring their own. */
  guard: Config;
  /** Budget holds without a postExec are released after this many seconds. */
  reservation_ttl_s: number;
}

export const DEFAULT_CONFIG: LeashConfigFile = {
  store: "sqlite:./leash.db",
  guard: {},
  reservation_ttl_s: 300,
};

const fileSchema = {
  type: "object",
  additionalProperties: false,
  properties: {
    store: { type: "string", pattern: "^(sqlite:|postgres://|postgresql://|memory:)" },
    guard: { ...configSchema, $id: undefined },
    reservation_ttl_s: { type: "number", exclusiveMinimum: 0, maximum: MAX_RESERVATION_TTL_S },
  },
} as const;

let validate: ReturnType<Ajv["compile"]> | undefined;

/** Validates an already parsed config object; throws CONFIG_INVALID naming every bad field. */
export function parseConfigObject(value: unknown, source = "config"): LeashConfigFile {
  validate ??= new Ajv({ allErrors: true, allowUnionTypes: true, strict: false }).compile(fileSchema);
  if (!validate(value)) {
    const errors = (validate.errors ?? []).map((e) => {
      const where = e.instancePath || "/";
      if (e.keyword === "additionalProperties")
        return `${where} has unknown field "${(e.params as { additionalProperty: string }).additionalProperty}"`;
      return `${where} ${e.message}`;
    });
    throw new LeashError("CONFIG_INVALID", `${source}: ${errors.join("; ")}`);
  }
  const v = value as Partial<LeashConfigFile>;
  return { ...DEFAULT_CONFIG, ...v, guard: { ...DEFAULT_CONFIG.guard, ...v.guard } };
}

/** Reads a `.json`, `.yaml` or `.yml` file. */
export async function loadConfigFile(path: string): Promise<LeashConfigFile> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (cause) {
    throw new LeashError(
      "CONFIG_INVALID",
      `cannot read config file ${path}: ${(cause as NodeJS.ErrnoException).code ?? cause}`,
      { cause },
    );
  }
  let value: unknown;
  try {
    value = /\.ya?ml$/i.test(path) ? parseYaml(text) : JSON.parse(text);
  } catch (cause) {
    throw new LeashError(
      "CONFIG_INVALID",
      `${path} is not valid ${/\.ya?ml$/i.test(path) ? "YAML" : "JSON"}: ${(cause as Error).message}`,
      { cause },
    );
  }
  return parseConfigObject(value ?? {}, path);
}
