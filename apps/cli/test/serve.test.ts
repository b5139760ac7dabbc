// `leash serve`: refusals before anything starts (no key, no config, bad config, bad --http), the help text,
// and a real serve process answering on its socket, shut down cleanly by SIGTERM (socket file removed).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { credentials, Metadata, makeGenericClientConstructor } from "@grpc/grpc-js";
import { shackleServiceDefinition } from "@leash/daemon";
import { afterAll, describe, expect, it } from "vitest";
import { CLI_BIN, expectOneLineError, leash, scratchDir, testKey } from "./helpers.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());
const hmac = scratch.write("acme.hmac", randomBytes(32).toString("hex"));
const config = scratch.write(
  "daemon.yaml",
  `organizations:\n  acme:\n    hmac_keys: { k1: { file: ${hmac} } }\n    default_guard: { budget_usd: 1 }\n`,
);

describe("leash serve", () => {
  it("refuses to start without a signing key, naming --ephemeral-key", async () => {
    const r = await leash([
      "serve",
      "--config",
      config,
      "--store",
      "memory:",
      "--socket",
      join(scratch.dir, "a.sock"),
    ]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain("no signing key");
    expect(r.stderr).toContain("--ephemeral-key");
    expect(existsSync(join(scratch.dir, "a.sock"))).toBe(false);
  });

  it("refuses without --config, with a bad config, and with a bad --http", async () => {
    const none = await leash(["serve", "--store", "memory:", "--ephemeral-key"]);
    expect([none.code, none.stderr]).toEqual([
      2,
      "leash: error: leash serve needs --config FILE: the organizations, their HMAC keys and policies (see `leash serve --help`)\n",
    ]);
    const shortKey = scratch.write(
      "short.json",
      JSON.stringify({ organizations: { acme: { hmac_keys: { k: { hex: "abcd" } } } } }),
    );
    const bad = await leash(["serve", "--config", shortKey, "--store", "memory:", "--ephemeral-key"]);
    expect(bad.code).toBe(2);
    expectOneLineError(bad.stderr);
    expect(bad.stderr).toContain("/organizations/acme/hmac_keys/k: the key has 2 bytes, at least 32 needed");
    const http = await leash(["serve", "--config", config, "--http", "9464", "--ephemeral-key"]);
    expect(http.code).toBe(2);
    expect(http.stderr).toContain("--http wants HOST:PORT");
  });

  it("refuses an all-zero HMAC key, an empty organization id and a hold TTL under a second: exit 2, one line", async () => {
    const cases: [unknown, string][] = [
      [
        { organizations: { acme: { hmac_keys: { k: { hex: "00".repeat(32) } } } } },
        "/organizations/acme/hmac_keys/k: the key is all zeros",
      ],
      [
        { organizations: { "": { hmac_keys: { k: { file: hmac } } } } },
        "/organizations: an organization id must not be empty",
      ],
      [
        { reservation_ttl_s: 0.2, organizations: { acme: { hmac_keys: { k: { file: hmac } } } } },
        "/reservation_ttl_s is 0.2: at least 1 second is needed",
      ],
    ];
    for (const [i, [value, message]] of cases.entries()) {
      const file = scratch.write(`unsafe-${i}.json`, JSON.stringify(value));
      const r = await leash(["serve", "--config", file, "--store", "memory:", "--ephemeral-key"]);
      expect(r.code).toBe(2);
      expectOneLineError(r.stderr);
      expect(r.stderr).toContain(message);
    }
  });

  it("--help shows an example and the default socket path", async () => {
    const r = await leash(["serve", "--help"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("leash serve --config daemon.yaml --key-file ~/.config/leash/leash.key");
    expect(r.stdout).toContain("$XDG_RUNTIME_DIR/leash.sock");
  });

  it("serves on its socket and shuts down on SIGTERM, removing the socket file", async () => {
    const key = testKey(scratch.dir, "serve");
    const socket = join(scratch.dir, "serve.sock");
    const child = spawn(
      process.execPath,
      [
        CLI_BIN,
        "serve",
        "--config",
        config,
        "--store",
        `sqlite:${join(scratch.dir, "serve.db")}`,
        "--key-file",
        key.file,
        "--socket",
        socket,
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    await new Promise<void>((resolve, reject) => {
      child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk;
        if (out.includes("\n")) resolve();
      });
      child.once("exit", (code) => reject(new Error(`exited ${code}`)));
    });
    const line = JSON.parse(out.trim()) as { listening: string; public_key: string };
    expect(line.listening).toBe(socket);
    expect(existsSync(socket)).toBe(true);
    child.kill("SIGTERM");
    const code = await new Promise((resolve) => child.once("exit", resolve));
    expect(code).toBe(0);
    expect(existsSync(socket)).toBe(false);
  });

  it("refuses the gRPC flags' unsafe or incomplete combinations before anything starts", async () => {
    const base = ["serve", "--config", config, "--store", "memory:", "--ephemeral-key"];
    const cases: [string[], string][] = [
      [["--grpc", "0.0.0.0:50051"], "needs TLS"],
      [["--grpc", "127.0.0.1:50051"], "needs TLS"],
      [
        ["--grpc", "0.0.0.0:50051", "--grpc-insecure"],
        "--grpc-insecure is only allowed on a loopback address",
      ],
      [["--grpc", "127.0.0.1:50051", "--tls-cert", config], "--tls-cert needs --tls-key"],
      [["--grpc-insecure"], "need --grpc HOST:PORT"],
      [["--grpc", "50051", "--grpc-insecure"], "--grpc wants HOST:PORT"],
      [
        ["--grpc", "127.0.0.1:0", "--tls-cert", "/nonexistent.pem", "--tls-key", config],
        "--tls-cert /nonexistent.pem",
      ],
    ];
    for (const [flags, message] of cases) {
      const socket = join(scratch.dir, "grpc-refused.sock");
      const r = await leash([...base, "--socket", socket, ...flags]);
      expect([r.code, r.stderr.includes(message)], `${flags.join(" ")}: ${r.stderr}`).toEqual([2, true]);
      expectOneLineError(r.stderr);
      expect(existsSync(socket)).toBe(false);
    }
  });

  it("serves gRPC on insecure loopback beside its socket, printing the address", async () => {
    const key = testKey(scratch.dir, "serve-grpc");
    const socket = join(scratch.dir, "serve-grpc.sock");
    const child = spawn(
      process.execPath,
      [
        CLI_BIN,
        "serve",
        "--config",
        config,
        "--store",
        `sqlite:${join(scratch.dir, "serve-grpc.db")}`,
        "--key-file",
        key.file,
        "--socket",
        socket,
        "--grpc",
        "127.0.0.1:0",
        "--grpc-insecure",
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    await new Promise<void>((resolve, reject) => {
      child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk;
        if (out.includes("\n")) resolve();
      });
      child.once("exit", (code) => reject(new Error(`exited ${code}`)));
    });
    const line = JSON.parse(out.trim()) as { listening: string; grpc: string };
    expect(line.listening).toBe(socket);
    expect(line.grpc).toMatch(/^127\.0\.0\.1:\d+$/);
    const Client = makeGenericClientConstructor(shackleServiceDefinition(), "ShackleDaemon");
    const client = new Client(line.grpc, credentials.createInsecure());
    const answer = await new Promise<{ sessionId: string }>((resolve, reject) => {
      const register = (client as unknown as Record<string, (...args: unknown[]) => void>).Register!.bind(
        client,
      );
      register(
        {
          $typeName: "shackle.sp1.RegisterRequest",
          agentId: "bot",
          agentVersion: "",
          framework: "",
          sessionId: "",
          organizationId: "",
          runtime: "",
          metadata: {},
        },
        new Metadata(),
        (error: Error | null, response: { sessionId: string }) => (error ? reject(error) : resolve(response)),
      );
    });
    expect(answer.sessionId).not.toBe("");
    client.close();
    child.kill("SIGTERM");
    const code = await new Promise((resolve) => child.once("exit", resolve));
    expect(code).toBe(0);
  });
});
