// loadPolicy: policy text or object → a CompiledPolicy (bounded, schema-checked, every `when` type-checked
// and cost-bounded, globs compiled, canonical text and hash). It decides nothing; evaluate.ts does.
import { canonicalJson, sha256Hex } from "@leash/core";
import { parse as parseYaml } from "yaml";
import { type CelCondition, compileCondition } from "./condition.js";
import { PolicyError } from "./errors.js";
import { compileGlobs, type GlobSet } from "./glob.js";
import { MAX_DOCUMENT_DEPTH, MAX_FLOW_DEPTH, MAX_POLICY_BYTES, MAX_YAML_ALIASES } from "./limits.js";
import {
  type Mode,
  type PolicyAction,
  type PolicyDocument,
  type PolicyRule,
  validateDocument,
} from "./schema.js";

export interface CompiledRule {
  readonly name: string;
  readonly index: number;
  readonly tools: GlobSet | undefined;
  readonly agents: GlobSet | undefined;
  readonly tags: readonly string[];
  readonly when: CelCondition | undefined;
  readonly action: PolicyAction;
  readonly message: string | undefined;
  readonly mode: Mode;
}

/** What a call's tool and agent select of a policy, worked out once per (tool, agent) and kept. */
export interface CallMatch {
  /** The tags the policy's `tags:` gives the tool, in declaration order. */
  readonly tags: readonly string[];
  /** The rules whose `match` holds for the tool, agent and those tags, in order. */
  readonly rules: readonly CompiledRule[];
}

export interface CompiledPolicy {
  readonly name: string;
  readonly org: string | undefined;
  readonly agents: GlobSet | undefined;
  readonly default: "allow" | "deny";
  readonly mode: Mode;
  readonly rules: readonly CompiledRule[];
  /** The declared tool tags, in order. */
  readonly tagSets: readonly { readonly name: string; readonly tools: GlobSet }[];
  /** The tags and candidate rules of a call by `tool` from `agent` (cached; pure in its arguments). */
  matchOf(tool: string, agent: string): CallMatch;
  /** The document with its defaults filled in, as canonical JSON: what a `policy_published` entry carries. */
  readonly canonical: string;
  /** Lowercase hex SHA-256 of `canonical`: the version every decision names. */
  readonly hash: string;
  /** Where the policy came from (a file name), for messages only; not part of the hash. */
  readonly source: string | undefined;
}

export interface LoadOptions {
  /** A file name or other label, put in front of error messages. */
  readonly source?: string;
}

/**
 * Loads a policy from YAML or JSON text, or from an already parsed object.
 * @throws PolicyError (code, path such as `rules[1].when`, column inside an expression).
 */
export function loadPolicy(input: string | object, options: LoadOptions = {}): CompiledPolicy {
  const source = options.source;
  try {
    const value = typeof input === "string" ? parseText(input) : input;
    checkPlainJson(value);
    return compileDocument(validateDocument(value), source);
  } catch (error) {
    if (source !== undefined && PolicyError.isInstance(error)) {
      const e = error as PolicyError;
      throw new PolicyError(e.code, e.path, e.detail, {
        ...(e.column === undefined ? {} : { column: e.column }),
        source,
        cause: e.cause,
      });
    }
    throw error;
  }
}

function utf8Length(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0x80) bytes += 1;
    else if (unit < 0x800) bytes += 2;
    else if (unit >= 0xd800 && unit < 0xdc00) {
      bytes += 4;
      i++;
    } else bytes += 3;
  }
  return bytes;
}

function parseText(text: string): unknown {
  // A UTF-8 character is at most 3 bytes per UTF-16 unit, so a short string needs no encoding.
  if (text.length * 3 > MAX_POLICY_BYTES && utf8Length(text) > MAX_POLICY_BYTES) {
    throw new PolicyError("policy_too_large", "", `a policy may have at most ${MAX_POLICY_BYTES} bytes`);
  }
  const trimmed = text.trimStart();
  if (!trimmed.startsWith("{") && flowDepth(text) > MAX_FLOW_DEPTH) {
    throw new PolicyError(
      "policy_unparsable",
      "",
      `flow collections ([ ], { }) nest deeper than ${MAX_FLOW_DEPTH}`,
    );
  }
  try {
    if (trimmed.startsWith("{")) return JSON.parse(text);
    return parseYaml(text, { maxAliasCount: MAX_YAML_ALIASES, uniqueKeys: true, prettyErrors: true });
  } catch (cause) {
    const kind = trimmed.startsWith("{") ? "JSON" : "YAML";
    const message = cause instanceof RangeError ? "nested too deeply" : (cause as Error).message;
    throw new PolicyError("policy_unparsable", "", `not valid ${kind}: ${message}`, { cause });
  }
}

/**
 * How deep `[` and `{` nest outside quotes and comments: the YAML parser recurses per level (a
 * 100,000-deep flow list overflows its stack after a second), so depth is counted before it runs.
 * Over-counting (a bracket inside a plain scalar) only makes the check stricter.
 */
function flowDepth(text: string): number {
  let depth = 0;
  let max = 0;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === "#" && (i === 0 || /\s/.test(text[i - 1] as string))) {
      const end = text.indexOf("\n", i);
      if (end < 0) break;
      i = end;
    } else if (ch === '"' || ch === "'") {
      for (i++; i < text.length && text[i] !== ch; i++) if (ch === '"' && text[i] === "\\") i++;
    } else if (ch === "[" || ch === "{") max = Math.max(max, ++depth);
    else if ((ch === "]" || ch === "}") && depth > 0) depth--;
  }
  return max;
}

/**
 * Refuses, without recursion, documents nested deeper than MAX_DOCUMENT_DEPTH and values JSON cannot
 * hold (an object passed in may carry undefined, NaN or ±Infinity), naming the field.
 */
function checkPlainJson(root: unknown): void {
  const stack: Array<[unknown, number, string]> = [[root, 0, ""]];
  while (stack.length > 0) {
    const [value, depth, path] = stack.pop() as [unknown, number, string];
    if (value === undefined || (typeof value === "number" && !Number.isFinite(value))) {
      throw new PolicyError("policy_invalid", path, `${String(value)} is not a JSON value`);
    }
    if (typeof value !== "object" || value === null) continue;
    if (depth >= MAX_DOCUMENT_DEPTH) {
      throw new PolicyError(
        "policy_invalid",
        "",
        `the document nests deeper than ${MAX_DOCUMENT_DEPTH} levels`,
      );
    }
    const array = Array.isArray(value);
    for (const [key, child] of Object.entries(value)) {
      stack.push([child, depth + 1, array ? `${path}[${key}]` : path === "" ? key : `${path}.${key}`]);
    }
  }
}

function compileDocument(given: PolicyDocument, source: string | undefined): CompiledPolicy {
  const canonical = canonicalJson({
    ...given,
    default: given.default ?? "allow",
    mode: given.mode ?? "enforce",
  });
  // Compiled from its own canonical text: what runs is exactly what is hashed, and a caller who
  // changes the object it passed in changes nothing here.
  const doc = JSON.parse(canonical) as PolicyDocument & { default: "allow" | "deny"; mode: Mode };
  const seen = new Set<string>();
  const rules = doc.rules.map((rule, index) => {
    if (seen.has(rule.name)) {
      throw new PolicyError(
        "policy_invalid",
        `rules[${index}].name`,
        `"${rule.name}" is used by an earlier rule`,
      );
    }
    seen.add(rule.name);
    return compileRule(rule, index, doc.mode);
  });
  const tagSets = Object.entries(doc.tags ?? {}).map(([name, tools]) => ({
    name,
    tools: compileGlobs(tools, `tags.${name}`),
  }));
  return {
    name: doc.name,
    org: doc.org,
    tagSets,
    matchOf: matcher(rules, tagSets),
    agents: doc.agent === undefined ? undefined : compileGlobs(doc.agent, "agent"),
    default: doc.default,
    mode: doc.mode,
    rules,
    canonical,
    hash: sha256Hex(canonical),
    source,
  };
}

/** Distinct (tool, agent) pairs a policy remembers before it starts its cache afresh. */
const MATCH_CACHE = 4096;

/** The tags of `tool` under `tagSets`. */
export function toolTags(tagSets: CompiledPolicy["tagSets"], tool: string): string[] {
  const tags: string[] = [];
  for (const t of tagSets) if (t.tools.test(tool)) tags.push(t.name);
  return tags;
}

/** Whether a rule's `match` holds for this tool, agent and tags. */
export function ruleMatches(
  rule: CompiledRule,
  tool: string,
  agent: string,
  tags: readonly string[],
): boolean {
  if (rule.tools !== undefined && !rule.tools.test(tool)) return false;
  if (rule.agents !== undefined && !rule.agents.test(agent)) return false;
  return rule.tags.every((t) => tags.includes(t));
}

function matcher(
  rules: readonly CompiledRule[],
  tagSets: CompiledPolicy["tagSets"],
): (tool: string, agent: string) => CallMatch {
  const cache = new Map<string, CallMatch>();
  return (tool, agent) => {
    const key = `${tool}\u0000${agent}`;
    let found = cache.get(key);
    if (found === undefined) {
      const tags = toolTags(tagSets, tool);
      found = { tags, rules: rules.filter((r) => ruleMatches(r, tool, agent, tags)) };
      if (cache.size >= MATCH_CACHE) cache.clear();
      cache.set(key, found);
    }
    return found;
  };
}

function compileRule(rule: PolicyRule, index: number, policyMode: Mode): CompiledRule {
  const at = `rules[${index}]`;
  if (rule.action === "deny" && rule.message === undefined) {
    throw new PolicyError("policy_invalid", `${at}.message`, "a deny rule needs a message for the agent");
  }
  return {
    name: rule.name,
    index,
    tools: rule.match?.tool === undefined ? undefined : compileGlobs(rule.match.tool, `${at}.match.tool`),
    agents: rule.match?.agent === undefined ? undefined : compileGlobs(rule.match.agent, `${at}.match.agent`),
    tags: rule.match?.tags ?? [],
    when: rule.when === undefined ? undefined : compileCondition(rule.when, `${at}.when`),
    action: rule.action,
    message: rule.message,
    mode: rule.mode ?? policyMode,
  };
}
