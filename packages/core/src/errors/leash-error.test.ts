// The error base: codes and causes kept, and the marker check across classes and package copies.
import { describe, expect, it } from "vitest";
import { isLeashError, LeashBaseError } from "./leash-error.js";

class FamilyError extends LeashBaseError<"invalid_argument" | "corrupt"> {
  static override readonly marker = Symbol.for("leash.test.family");
  override readonly name: string = "FamilyError";
}
class DetailError extends FamilyError {
  static override readonly marker = Symbol.for("leash.test.family.detail");
  override readonly name = "DetailError";
  constructor(readonly path: string) {
    super("corrupt", `bad ${path}`);
  }
}
class OtherError extends LeashBaseError<"other"> {
  static override readonly marker = Symbol.for("leash.test.other");
}

describe("LeashBaseError", () => {
  it("keeps the code, the message and the cause", () => {
    const cause = new Error("disk");
    const e = new FamilyError("invalid_argument", "no", { cause });
    expect([e.code, e.message, e.cause, e.name]).toEqual(["invalid_argument", "no", cause, "FamilyError"]);
    expect("cause" in new FamilyError("corrupt", "x")).toBe(false);
  });

  it("recognises each class and its subclasses by marker, not by prototype", () => {
    const detail = new DetailError("a.db");
    expect(FamilyError.isInstance(detail)).toBe(true);
    expect(DetailError.isInstance(detail)).toBe(true);
    expect(DetailError.isInstance(new FamilyError("corrupt", "x"))).toBe(false);
    expect(OtherError.isInstance(detail)).toBe(false);
    expect(isLeashError(detail) && isLeashError(new OtherError("other", "y"))).toBe(true);
    expect(isLeashError(new Error("plain"))).toBe(false);
    expect(FamilyError.isInstance(null) || FamilyError.isInstance("corrupt")).toBe(false);
  });

  it("recognises an error made by another copy of the same family (same Symbol.for name)", () => {
    class CopyOfFamily extends LeashBaseError<"corrupt"> {
      static override readonly marker = Symbol.for("leash.test.family");
    }
    const fromCopy = new CopyOfFamily("corrupt", "from the other copy");
    expect(FamilyError.isInstance(fromCopy)).toBe(true);
    expect(fromCopy instanceof FamilyError).toBe(false);
  });
});
