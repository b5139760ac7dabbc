// The Leash configuration file (JSON or YAML): where state lives and the default guard config.
// Reading and validating only (errors name the field); opening the store is the app's job.
import { open, stat } from "node:fs/promises";
import type { Config } from "@leash/core";
import { configSchema, describeSchemaError } from "@leash/core/schema";
import { Ajv } from "ajv";
import { parse as parseYaml } from "yaml";
import { LeashError } from "./errors.js";
import { MAX_RESERVATION_TTL_S } from "./limits.js";

export interface LeashConfigFile {
  /** `sqlite:./leash.db` (default) or `postgres://user@host:5432/db`. */
  store: string;
  /** The guard config new sessions get unless they bring their own. */
  guard: Config;
  /** Budget holds without a postExec are charged at their estimate after this many seconds. */
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

/** Validates an already parsed config object; throws config_invalid naming every bad field. */
export function parseConfigObject(value: unknown, source = "config"): LeashConfigFile {
  validate ??= new Ajv({ allErrors: true, allowUnionTypes: true, strict: false }).compile(fileSchema);
  if (!validate(value)) {
    const errors = (validate.errors ?? []).map((e) => describeSchemaError(e));
    throw new LeashError("config_invalid", `${source}: ${errors.join("; ")}`);
  }
  const v = value as Partial<LeashConfigFile>;
  return { ...DEFAULT_CONFIG, ...v, guard: { ...DEFAULT_CONFIG.guard, ...v.guard } };
}

/**
 * The largest config file read. A config is a few hundred bytes; a YAML parser handed megabytes
 * spends seconds and gigabytes before any field is checked, so size is refused before reading.
 */
export const MAX_CONFIG_FILE_BYTES = 1024 * 1024;

function unreadable(path: string, problem: string, cause?: unknown): LeashError {
  return new LeashError("config_invalid", `cannot read config file ${path}: ${problem}`, { cause });
}

/**
 * The file's text, refusing anything but a regular file of at most MAX_CONFIG_FILE_BYTES. The
 * type is checked before opening (opening a FIFO blocks until a writer comes), and the read
 * stops one byte past the limit, so a file that grows after the check is still refused.
 */
async function readConfigText(path: string): Promise<string> {
  let size: number;
  try {
    const info = await stat(path);
    if (!info.isFile()) throw unreadable(path, "not a regular file");
    size = info.size;
  } catch (cause) {
    if (LeashError.isInstance(cause)) throw cause;
    throw unreadable(path, String((cause as NodeJS.ErrnoException).code ?? cause), cause);
  }
  const tooBig = () =>
    unreadable(path, `larger than the ${MAX_CONFIG_FILE_BYTES} bytes (1 MiB) a config file may have`);
  if (size > MAX_CONFIG_FILE_BYTES) throw tooBig();
  let bytes: Buffer;
  try {
    const file = await open(path, "r");
    try {
      const buffer = Buffer.alloc(MAX_CONFIG_FILE_BYTES + 1);
      let length = 0;
      for (;;) {
        const { bytesRead } = await file.read(buffer, length, buffer.length - length, null);
        if (bytesRead === 0) break;
        length += bytesRead;
        if (length === buffer.length) break;
      }
      bytes = buffer.subarray(0, length);
    } finally {
      await file.close();
    }
  } catch (cause) {
    throw unreadable(path, String((cause as NodeJS.ErrnoException).code ?? cause), cause);
  }
  if (bytes.length > MAX_CONFIG_FILE_BYTES) throw tooBig();
  return bytes.toString("utf8");
}

/** Reads a `.json`, `.yaml` or `.yml` file of at most MAX_CONFIG_FILE_BYTES. */
export async function loadConfigFile(path: string): Promise<LeashConfigFile> {
  return parseConfigObject((await readConfigDocument(path)) ?? {}, path);
}

/**
 * The parsed document of a `.json`, `.yaml` or `.yml` config file (at most MAX_CONFIG_FILE_BYTES),
 * not yet validated: for a tool whose file holds a Leash config beside sections of its own (the MCP
 * proxy's `tools`), which it takes out before parseConfigObject sees the rest.
 */
export async function readConfigDocument(path: string): Promise<unknown> {
  const text = await readConfigText(path);
  let value: unknown;
  try {
    value = /\.ya?ml$/i.test(path) ? parseYaml(text) : JSON.parse(text);
  } catch (cause) {
    throw new LeashError(
      "config_invalid",
      `${path} is not valid ${/\.ya?ml$/i.test(path) ? "YAML" : "JSON"}: ${(cause as Error).message}`,
      { cause },
    );
  }
  return value;
}
