// @leash/core/schema: ajv validation of config, state and call at the edges (files, CLI, wire).
// Messages name the field ("/config/budget_usd must be number"); validation never reaches decide().
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import type { Call, Config, DecideInputs, State } from "../types.js";
import { callSchema, configSchema, decideInputSchema, stateSchema } from "./schemas.js";

export { callSchema, configSchema, decideInputSchema, stateSchema } from "./schemas.js";

export type Validation<T> = { ok: true; value: T } | { ok: false; errors: string[] };

export interface DecideInput {
  config: Config;
  state: State;
  call: Call;
  inputs?: DecideInputs;
}

let ajv: Ajv | undefined;
const compiled = new Map<string, ValidateFunction>();

/** Compiled lazily: importing the module costs nothing until something is validated. */
function validator(id: string): ValidateFunction {
  let fn = compiled.get(id);
  if (fn === undefined) {
    ajv ??= new Ajv({
      allErrors: true,
      strict: true,
      allowUnionTypes: true,
      schemas: [configSchema, stateSchema, callSchema, decideInputSchema],
    });
    fn = ajv.getSchema(id)!;
    compiled.set(id, fn);
  }
  return fn;
}

/** One validation error as a line that names the field (and, for an enum, the allowed values). */
export function describeSchemaError(error: ErrorObject, root = ""): string {
  const path = `${root}${error.instancePath}` || "/";
  if (error.keyword === "additionalProperties") {
    return `${path} has unknown field "${(error.params as { additionalProperty: string }).additionalProperty}"`;
  }
  if (error.keyword === "required") {
    return `${path} is missing required field "${(error.params as { missingProperty: string }).missingProperty}"`;
  }
  if (error.keyword === "enum") {
    return `${path} must be one of ${(error.params as { allowedValues: unknown[] }).allowedValues.map((v) => JSON.stringify(v)).join(", ")}`;
  }
  return `${path} ${error.message ?? "is invalid"}`;
}

function run<T>(id: string, value: unknown, root: string): Validation<T> {
  const fn = validator(id);
  if (fn(value)) return { ok: true, value: value as T };
  return { ok: false, errors: (fn.errors ?? []).map((e) => describeSchemaError(e, root)) };
}

export const validateConfig = (value: unknown, root = "/config") => run<Config>("leash:config", value, root);
export const validateState = (value: unknown, root = "/state") => run<State>("leash:state", value, root);
export const validateCall = (value: unknown, root = "/call") => run<Call>("leash:call", value, root);
export const validateDecideInput = (value: unknown) => run<DecideInput>("leash:decide-input", value, "");
