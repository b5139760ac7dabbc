// The daemon config: policies by organization and agent, HMAC keys from files or hex, and one-line refusals
// naming the field. Plus the per-connection in-flight limit, answered RATE_LIMITED on a live daemon.
import { randomBytes } from "node:crypto";
import { chmodSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { ErrorCode, GetSessionStateRequestSchema, RegisterRequestSchema } from "@leash/wire";
import { describe, expect, it } from "vitest";
import {
  addConsoleToken,
  DaemonConfigError,
  keyMayActAs,
  loadConsoleTokens,
  loadDaemonConfig,
  parseDaemonConfig,
  policyFor,
} from "../src/index.js";
import { RawClient } from "./raw-client.js";
import { ACME, configObject, runDaemon, scratchDir } from "./support.js";

const HEX = randomBytes(32).toString("hex");
const only = (hex: string) => ({ organizations: { o: { hmac_keys: { k: { hex } } } } });

describe("daemon config", () => {
  it("reads keys from files and hex, merges an agent's guard over the default, loads YAML", () => {
    const dir = scratchDir();
    const config = parseDaemonConfig(configObject(dir));
    const acme = config.organizations.get("acme")!;
    expect(Buffer.from(acme.hmacKeys.get(ACME.keyId)!).equals(Buffer.from(ACME.key))).toBe(true);
    expect(acme.currentKeyId).toBe(ACME.keyId);
    expect(policyFor(acme, "research-bot")).toEqual({
      budget_usd: 0.5,
      max_repeat_calls: 3,
      denied_tools: ["delete_file"],
    });
    expect(policyFor(acme, "someone-else")).toEqual({ budget_usd: 1 });
    expect(config.keyOwners.get("globex-k1")).toBe("globex");
    const yaml = join(dir, "d.yaml");
    writeFileSync(
      yaml,
      `store: sqlite:./x.db\nreservation_ttl_s: 5\norganizations:\n  o:\n    hmac_keys: { k: { file: ./acme-k1.hmac } }\n    agents:\n      a: { guard: { window_max_calls: 2, window_duration_s: 60, denied_tools: [delete_all] } }\n`,
    );
    const loaded = loadDaemonConfig(yaml);
    expect([loaded.store, loaded.reservationTtlS]).toEqual(["sqlite:./x.db", 5]);
    expect(policyFor(loaded.organizations.get("o")!, "a")).toEqual({
      window_max_calls: 2,
      window_duration_s: 60,
      denied_tools: ["delete_all"],
    });
  });

  it("refuses an HMAC key file or a console tokens file that group or others can read, saying chmod 600", () => {
    const dir = scratchDir();
    const keyFile = join(dir, "open.hmac");
    writeFileSync(keyFile, HEX, { mode: 0o644 });
    chmodSync(keyFile, 0o644);
    expect(() =>
      parseDaemonConfig({ organizations: { o: { hmac_keys: { k: { file: keyFile } } } } }),
    ).toThrow(
      `/organizations/o/hmac_keys/k.file: ${keyFile} is readable by group or others (mode 0644); run: chmod 600 ${keyFile}`,
    );
    chmodSync(keyFile, 0o600);
    expect(
      parseDaemonConfig({ organizations: { o: { hmac_keys: { k: { file: keyFile } } } } }).organizations.size,
    ).toBe(1);
    const tokens = join(dir, "tokens.json");
    addConsoleToken(tokens, "alice", false, ["acme"]);
    expect(statSync(tokens).mode & 0o777).toBe(0o600);
    chmodSync(tokens, 0o640);
    expect(() => loadConsoleTokens(tokens)).toThrow(`chmod 600 ${tokens}`);
  });

  it("binds a key to agents (file or hex form); a key without agents acts for the whole organization", () => {
    const dir = scratchDir();
    const base = configObject(dir) as { organizations: { acme: { hmac_keys: Record<string, unknown> } } };
    base.organizations.acme.hmac_keys = {
      [ACME.keyId]: { file: join(dir, "acme-k1.hmac"), agents: ["research-bot"] },
      "acme-k2": { hex: HEX, agents: ["writer-bot", "editor-bot"] },
      "acme-k3": { hex: randomBytes(32).toString("hex") },
    };
    (base.organizations.acme as Record<string, unknown>).current_key = "acme-k3";
    const acme = parseDaemonConfig(base).organizations.get("acme")!;
    expect(Buffer.from(acme.hmacKeys.get(ACME.keyId)!).equals(Buffer.from(ACME.key))).toBe(true);
    expect([...acme.keyAgents.get(ACME.keyId)!]).toEqual(["research-bot"]);
    expect(acme.keyAgents.has("acme-k3")).toBe(false);
    expect(keyMayActAs(acme, ACME.keyId, "research-bot")).toBe(true);
    expect(keyMayActAs(acme, ACME.keyId, "writer-bot")).toBe(false);
    expect(keyMayActAs(acme, "acme-k2", "editor-bot")).toBe(true);
    expect(keyMayActAs(acme, "acme-k3", "anyone")).toBe(true);
  });

  it.each([
    [{}, "/organizations must name at least one organization"],
    [
      { organizations: { o: { hmac_keys: { k: { hex: "abcd" } } } } },
      "the key has 2 bytes, at least 32 needed",
    ],
    [{ organizations: { o: { hmac_keys: { k: { hex: "zz".repeat(32) } } } } }, "the key must be hex"],
    [{ organizations: { o: { hmac_keys: { k: { file: "/nonexistent/key" } } } } }, "cannot be read: ENOENT"],
    [
      { organizations: { a: { hmac_keys: { k: { hex: HEX } } }, b: { hmac_keys: { k: { hex: HEX } } } } },
      "key id already used by organization a",
    ],
    [{ organizations: { o: { hmac_keys: { k: { hex: HEX } }, colour: 1 } } }, 'has unknown field "colour"'],
    [
      { organizations: { o: { hmac_keys: { k: { hex: HEX } }, default_guard: { budget_usd: -1 } } } },
      "budget_usd",
    ],
    [
      { organizations: { o: { hmac_keys: { k: { hex: HEX } }, current_key: "nope" } } },
      "current_key must name one of its hmac_keys",
    ],
    [
      { organizations: { o: { hmac_keys: { k: { hex: HEX } }, default_guard: { denied_tools: "rm" } } } },
      "/organizations/o/default_guard/denied_tools must be array",
    ],
    [
      { organizations: { o: { hmac_keys: { k: { hex: HEX, agents: [] } } } } },
      "/organizations/o/hmac_keys/k/agents must be a non-empty list of agent ids",
    ],
    [
      { organizations: { o: { hmac_keys: { k: { hex: HEX, agents: ["bot", ""] } } } } },
      "/organizations/o/hmac_keys/k/agents must be a non-empty list of agent ids",
    ],
    [
      { organizations: { o: { hmac_keys: { k: { hex: HEX, agents: "bot" } } } } },
      "/organizations/o/hmac_keys/k/agents must be a non-empty list of agent ids",
    ],
    [
      { organizations: { o: { hmac_keys: { k: { hex: HEX } } } }, reservation_ttl_s: 0 },
      "reservation_ttl_s must be a positive number",
    ],
    // Parses, but is unsafe to serve with.
    [only("00".repeat(32)), "/organizations/o/hmac_keys/k: the key is all zeros"],
    [
      only("ab".repeat(32)),
      "/organizations/o/hmac_keys/k: the key has only 1 distinct byte value: not random",
    ],
    [only(randomBytes(8).toString("hex").repeat(4)), "/organizations/o/hmac_keys/k: the key has only"],
    [
      only("000102030405060708090a0b0c0d0e0f".repeat(2)),
      "/organizations/o/hmac_keys/k: the key repeats a 16-byte pattern",
    ],
    [
      only(Buffer.from("correct horse battery staple, ok?").toString("hex")),
      "/organizations/o/hmac_keys/k: the key is printable text (a password?)",
    ],
    [
      { organizations: { "": { hmac_keys: { k: { hex: HEX } } } } },
      '/organizations: an organization id must not be empty (got "")',
    ],
    [
      { organizations: { " ": { hmac_keys: { k: { hex: HEX } } } } },
      '/organizations: an organization id must not be empty (got " ")',
    ],
    [
      { organizations: { o: { hmac_keys: { k: { hex: HEX } } } }, reservation_ttl_s: 0.5 },
      "/reservation_ttl_s is 0.5: at least 1 second is needed",
    ],
  ])("refuses %j: %s", (value, message) => {
    expect(() => parseDaemonConfig(value, "test.json")).toThrow(DaemonConfigError);
    expect(() => parseDaemonConfig(value, "test.json")).toThrow(message);
  });

  it("a file that is not YAML is one line naming it", () => {
    const dir = scratchDir();
    const path = join(dir, "bad.yaml");
    writeFileSync(path, "organizations: [\n");
    expect(() => loadDaemonConfig(path)).toThrow(
      new RegExp(`^cannot read daemon config ${path}: not valid YAML`),
    );
  });
});

describe("in-flight limit", () => {
  it("past maxInFlight on one connection, requests are answered RATE_LIMITED with retry_after_ms", async () => {
    const running = await runDaemon("sqlite", { maxInFlight: 2 });
    try {
      const client = await RawClient.connect(running.socket, ACME);
      const reg = await client.request({
        case: "register",
        value: create(RegisterRequestSchema, { agentId: "research-bot", organizationId: "acme" }),
      });
      const sessionId = (reg.payload.value as { sessionId: string }).sessionId;
      const answers = await Promise.all(
        Array.from({ length: 12 }, () =>
          client.request({
            case: "getSessionState",
            value: create(GetSessionStateRequestSchema, { sessionId }),
          }),
        ),
      );
      const limited = answers.filter((a) => a.payload.case === "error");
      expect(limited.length).toBeGreaterThan(0);
      expect(answers.length - limited.length).toBeGreaterThanOrEqual(2);
      for (const a of limited) {
        expect(a.payload.value).toMatchObject({
          code: ErrorCode.RATE_LIMITED,
          detail: "too_many_in_flight",
          retryAfterMs: 10n,
        });
      }
      expect(client.closed).toBe(false);
      client.close();
    } finally {
      await running.stop();
    }
  });
});
