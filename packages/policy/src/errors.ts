// The one error a policy load throws: a stable code, the field path it is about, and where in an
// expression. A DENY is a result, never this error.
import { LeashBaseError } from "@leash/core";

export type PolicyErrorCode =
  | "policy_too_large"
  | "policy_unparsable"
  | "policy_invalid"
  | "expression_syntax"
  | "expression_type"
  | "expression_too_complex";

export interface PolicyErrorOptions {
  /** 1-based column inside the expression. */
  readonly column?: number;
  /** The file or label the policy came from. */
  readonly source?: string;
  readonly cause?: unknown;
}

export class PolicyError extends LeashBaseError<PolicyErrorCode> {
  static override readonly marker = Symbol.for("leash.policy.error");
  /** The field, as `rules[2].when`; "" for the whole document. */
  readonly path: string;
  /** 1-based column in the expression, when the error is inside one. */
  readonly column: number | undefined;
  /** What is wrong, without the source, path and column in front. */
  readonly detail: string;
  readonly source: string | undefined;

  constructor(code: PolicyErrorCode, path: string, detail: string, options: PolicyErrorOptions = {}) {
    const column = options.column === undefined ? "" : ` (column ${options.column})`;
    const where = `${options.source === undefined ? "" : `${options.source}: `}${path === "" ? "" : `${path}${column}: `}`;
    super(code, `${where}${detail}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "PolicyError";
    this.path = path;
    this.column = options.column;
    this.detail = detail;
    this.source = options.source;
  }
}
