// The policy document's JSON Schema and its validation, with errors that name the field (`rules[2].action`).
// It checks shape only; expressions, globs and rule names are compiled in compile.ts.
import { Ajv, type ErrorObject } from "ajv";
import { PolicyError } from "./errors.js";
import {
  MAX_BUDGET_USD,
  MAX_EXPRESSION_LENGTH,
  MAX_GLOB_LENGTH,
  MAX_GLOBS,
  MAX_MESSAGE_LENGTH,
  MAX_RATE_LIMIT,
  MAX_RULES,
  MAX_TAGS,
  MAX_WINDOW_S,
} from "./limits.js";

export type Verdict = "allow" | "deny" | "hitl";
export type Mode = "enforce" | "monitor";
export type Per = "tool" | "agent" | "session";
export type Period = "hour" | "day" | "week" | "month";

export type PolicyAction =
  | Verdict
  | { readonly rate: { readonly limit: number; readonly window_s: number; readonly per?: Per } }
  | { readonly budget_usd: { readonly limit: number; readonly period: Period; readonly per?: Per } }
  | { readonly max_repeat: number }
  | { readonly require_estimate: true }
  | { readonly estimate_usd: number };

export interface PolicyMatch {
  readonly tool?: string | readonly string[];
  readonly agent?: string | readonly string[];
  readonly tags?: readonly string[];
}

export interface PolicyRule {
  readonly name: string;
  readonly description?: string;
  readonly match?: PolicyMatch;
  readonly when?: string;
  readonly action: PolicyAction;
  readonly message?: string;
  readonly mode?: Mode;
}

export interface PolicyDocument {
  readonly version: 1;
  readonly name: string;
  readonly description?: string;
  /** The organization the policy is for; absent = every organization. */
  readonly org?: string;
  /** Agent globs the policy applies to; absent = every agent. */
  readonly agent?: string | readonly string[];
  readonly default?: "allow" | "deny";
  readonly mode?: Mode;
  /**
   * Tool tags: each tag names the tool globs it covers (`payments: ["wire_transfer", "refund_*"]`). A call's
   * tags are those whose globs match its tool; `match.tags` and the condition's `tags` see them.
   */
  readonly tags?: Readonly<Record<string, string | readonly string[]>>;
  readonly rules: readonly PolicyRule[];
}

const name = { type: "string", pattern: "^[a-z0-9][a-z0-9_.-]{0,63}$" } as const;
const glob = { type: "string", minLength: 1, maxLength: MAX_GLOB_LENGTH } as const;
const globs = { anyOf: [glob, { type: "array", items: glob, minItems: 1, maxItems: MAX_GLOBS }] } as const;
const per = { enum: ["tool", "agent", "session"] } as const;
const mode = { enum: ["enforce", "monitor"] } as const;
const tagName = { type: "string", minLength: 1, maxLength: 64 } as const;
const usd = { type: "number", minimum: 0, maximum: MAX_BUDGET_USD } as const;

/** JSON Schema (draft-07) of a policy document; published for editors, used by loadPolicy. */
export const policySchema = {
  $schema: "http://json-schema.org/draft-07/schema#",
  title: "Leash policy",
  type: "object",
  additionalProperties: false,
  required: ["version", "name", "rules"],
  properties: {
    version: { const: 1 },
    name,
    description: { type: "string", maxLength: MAX_MESSAGE_LENGTH },
    org: { type: "string", minLength: 1, maxLength: 128 },
    agent: globs,
    default: { enum: ["allow", "deny"] },
    mode,
    tags: {
      type: "object",
      maxProperties: MAX_TAGS,
      propertyNames: tagName,
      additionalProperties: globs,
    },
    rules: {
      type: "array",
      maxItems: MAX_RULES,
      items: {
        type: "object",
        additionalProperties: false,
        required: ["name", "action"],
        properties: {
          name,
          description: { type: "string", maxLength: MAX_MESSAGE_LENGTH },
          match: {
            type: "object",
            additionalProperties: false,
            properties: {
              tool: globs,
              agent: globs,
              tags: {
                type: "array",
                items: tagName,
                maxItems: MAX_GLOBS,
              },
            },
          },
          when: { type: "string", minLength: 1, maxLength: MAX_EXPRESSION_LENGTH },
          action: {
            anyOf: [
              { type: "string", enum: ["allow", "deny", "hitl"] },
              {
                type: "object",
                minProperties: 1,
                maxProperties: 1,
                additionalProperties: false,
                properties: {
                  rate: {
                    type: "object",
                    additionalProperties: false,
                    required: ["limit", "window_s"],
                    properties: {
                      limit: { type: "integer", minimum: 1, maximum: MAX_RATE_LIMIT },
                      window_s: { type: "integer", minimum: 1, maximum: MAX_WINDOW_S },
                      per,
                    },
                  },
                  budget_usd: {
                    type: "object",
                    additionalProperties: false,
                    required: ["limit", "period"],
                    properties: { limit: usd, period: { enum: ["hour", "day", "week", "month"] }, per },
                  },
                  max_repeat: { type: "integer", minimum: 1, maximum: MAX_RATE_LIMIT },
                  require_estimate: { const: true },
                  estimate_usd: usd,
                },
              },
            ],
          },
          message: { type: "string", minLength: 1, maxLength: MAX_MESSAGE_LENGTH },
          mode,
        },
      },
    },
  },
} as const;

let validator: ReturnType<Ajv["compile"]> | undefined;

/** `/rules/0/action` → `rules[0].action`. */
export function fieldPath(pointer: string): string {
  let out = "";
  for (const part of pointer.split("/").slice(1)) {
    const key = part.replace(/~1/g, "/").replace(/~0/g, "~");
    out += /^\d+$/.test(key) ? `[${key}]` : out === "" ? key : `.${key}`;
  }
  return out;
}

function describe(e: ErrorObject): { path: string; message: string } {
  const path = fieldPath(e.instancePath);
  const params = e.params as Record<string, unknown>;
  if (path === "" && e.keyword === "type") {
    return { path, message: "a policy must be an object with version, name and rules" };
  }
  switch (e.keyword) {
    case "additionalProperties":
      return { path, message: `unknown field "${String(params.additionalProperty)}"` };
    case "required": {
      const missing = String(params.missingProperty);
      return { path: path === "" ? missing : `${path}.${missing}`, message: "is required" };
    }
    case "enum":
      return {
        path,
        message: `must be one of ${(params.allowedValues as unknown[]).map(String).join(", ")}`,
      };
    case "const":
      return { path, message: `must be ${JSON.stringify(params.allowedValue)}` };
    case "pattern":
      return {
        path,
        message:
          "must be lowercase letters, digits, '_', '.' or '-' (at most 64, starting with a letter or digit)",
      };
    case "maxProperties":
    case "minProperties":
      if (path === "tags") return { path, message: `a policy may declare at most ${MAX_TAGS} tags` };
      return {
        path,
        message:
          "must be allow, deny, hitl, or an object with exactly one of rate, budget_usd, max_repeat, require_estimate, estimate_usd",
      };
    default:
      return { path, message: e.message ?? "is invalid" };
  }
}

const KEYWORD_RANK: Record<string, number> = { anyOf: 0, type: 1, enum: 2 };

/** The most specific error: deepest path first, then the keyword that says most. */
function mostSpecific(errors: readonly ErrorObject[]): ErrorObject | undefined {
  return [...errors].sort((a, b) => {
    const depth = b.instancePath.split("/").length - a.instancePath.split("/").length;
    if (depth !== 0) return depth;
    return (KEYWORD_RANK[b.keyword] ?? 9) - (KEYWORD_RANK[a.keyword] ?? 9);
  })[0];
}

/** Checks `value` against policySchema; throws policy_invalid naming the field. */
export function validateDocument(value: unknown): PolicyDocument {
  validator ??= new Ajv({ allErrors: true, allowUnionTypes: true, strict: false }).compile(policySchema);
  if (validator(value)) return value as PolicyDocument;
  const e = mostSpecific(validator.errors ?? []);
  if (e === undefined) throw new PolicyError("policy_invalid", "", "the policy does not match its schema");
  const { path, message } = describe(e);
  throw new PolicyError("policy_invalid", path, message);
}
