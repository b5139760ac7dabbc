import { describe, expect, it } from "vitest";
import { WireError } from "./errors.js";
import {
  negotiateProtocolVersion,
  PROTOCOL_VERSION,
  parseProtocolVersion,
  requireSupportedVersion,
} from "./version.js";

const refusal = (f: () => unknown) => {
  try {
    f();
    return null;
  } catch (e) {
    if (!WireError.isInstance(e)) throw e;
    return { code: e.code, supported: e.supportedVersions, wire: e.wireCode };
  }
};

describe("negotiateProtocolVersion (§9.4)", () => {
  it("the spec's example: a 1.2.0 client with a 1.0.0 daemon gets 1.0.0", () => {
    expect(PROTOCOL_VERSION).toBe("1.0.0");
    expect(negotiateProtocolVersion("1.2.0")).toBe("1.0.0");
    expect(negotiateProtocolVersion("1.0.0")).toBe("1.0.0");
    expect(negotiateProtocolVersion("1.0.7")).toBe("1.0.0");
  });

  it("picks the highest supported version not above the client's, same major", () => {
    const supported = ["1.2.0", "1.0.0", "1.1.3", "2.0.0"];
    expect(negotiateProtocolVersion("1.1.9", supported)).toBe("1.1.3");
    expect(negotiateProtocolVersion("1.9.0", supported)).toBe("1.2.0");
    expect(negotiateProtocolVersion("2.5.0", supported)).toBe("2.0.0");
    expect(refusal(() => negotiateProtocolVersion("0.9.0", ["1.1.0"]))?.code).toBe(
      "protocol_version_mismatch",
    );
    expect(refusal(() => negotiateProtocolVersion("1.0.0", ["1.1.0"]))?.code).toBe(
      "protocol_version_mismatch",
    );
  });

  it("refuses another major with PROTOCOL_VERSION_MISMATCH and the supported list", () => {
    expect(refusal(() => negotiateProtocolVersion("2.0.0"))).toEqual({
      code: "protocol_version_mismatch",
      supported: ["1.0.0"],
      wire: 1,
    });
    expect(refusal(() => negotiateProtocolVersion("0.1.0"))?.code).toBe("protocol_version_mismatch");
  });

  it("refuses what is not MAJOR.MINOR.PATCH", () => {
    for (const v of ["", "1", "1.0", "1.0.0.0", "01.0.0", "1.0.0-rc.1", "1.0.0+build", " 1.0.0", "v1.0.0"]) {
      expect(refusal(() => negotiateProtocolVersion(v))?.code, v).toBe("protocol_version_mismatch");
      expect(parseProtocolVersion(v), v).toBeNull();
    }
    expect(parseProtocolVersion("10.20.30")).toEqual({ major: 10, minor: 20, patch: 30 });
  });

  it("requireSupportedVersion takes exactly the versions spoken", () => {
    expect(refusal(() => requireSupportedVersion("1.0.0"))).toBeNull();
    expect(refusal(() => requireSupportedVersion("1.2.0"))?.code).toBe("protocol_version_mismatch");
    expect(refusal(() => requireSupportedVersion(""))?.code).toBe("protocol_version_mismatch");
  });
});
