// The bounds a policy document is held to at load, so a hostile file cannot hang or exhaust a decision.
// Each is documented in the README's "Limits"; the evaluator relies on them, it does not re-check them.

/** Largest policy text accepted (bytes of UTF-8), checked before any parsing. */
export const MAX_POLICY_BYTES = 256 * 1024;
/** Deepest nesting of the parsed document (objects and arrays). */
export const MAX_DOCUMENT_DEPTH = 12;
/** `[` / `{` open at once in YAML text (outside quotes and comments), counted before the YAML parser runs. */
export const MAX_FLOW_DEPTH = 32;
/** YAML aliases a document may use (a "billion laughs" document needs thousands). */
export const MAX_YAML_ALIASES = 16;
/** Rules in one policy. */
export const MAX_RULES = 256;
/** Characters in one `when` expression. */
export const MAX_EXPRESSION_LENGTH = 2048;
/** Nesting of one expression's syntax tree (a call or operator inside another counts one). */
export const MAX_EXPRESSION_DEPTH = 24;
/** Brackets open at once in an expression's text, checked before the parser runs. */
export const MAX_BRACKET_DEPTH = 16;
/** The estimated cost of one expression (see estimate in check.ts), beyond which it is refused. */
export const MAX_EXPRESSION_COST = 100_000;
/**
 * Elements a comprehension (`exists`, `all`, `map`, `filter`, …) is assumed to range over when its
 * cost is estimated; a call whose `args` hold a longer list, a larger map or a longer string is not
 * run through an iterating rule (it is refused as `policy_error`), so the estimate stays a bound.
 */
export const MAX_ITERATION = 1000;
/** Values (of any kind, nested) in a call's `args` that an iterating rule is run over. */
export const MAX_ARG_VALUES = 16 * MAX_ITERATION;
/** Longest string in a call's `args` that an iterating or matching rule is run over. */
export const MAX_ARG_STRING = 64 * 1024;
/** Globs in one `match` list, and characters in one glob. */
export const MAX_GLOBS = 64;
export const MAX_GLOB_LENGTH = 256;
/** Tags a policy may declare (`tags:`), each with at most MAX_GLOBS tool globs. */
export const MAX_TAGS = 64;
/** Characters in a rule's `message`. */
export const MAX_MESSAGE_LENGTH = 1024;
/** A rate limit's largest count and window, and a budget's largest amount. */
export const MAX_RATE_LIMIT = 1_000_000;
export const MAX_WINDOW_S = 31 * 24 * 3600;
export const MAX_BUDGET_USD = 1_000_000_000;
