// The HTTP probes (/healthz, /readyz, /metrics) and the socket's lifecycle: mode 0660, a stale socket file
// replaced, a live one refused, in-flight requests finished on close and the socket file removed.
import { statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair } from "@leash/chain";
import { ErrorCode, PreExecRequestSchema, paramsToJson, RegisterRequestSchema, Verdict } from "@leash/wire";
import { describe, expect, it } from "vitest";
import { parseDaemonConfig, SocketInUseError, startDaemon } from "../src/index.js";
import { RawClient } from "./raw-client.js";
import { ACME, configObject, openStore, quietLogger, runDaemon, scratchDir } from "./support.js";

async function register(client: RawClient, agentId = "research-bot"): Promise<string> {
  const reg = await client.request({
    case: "register",
    value: create(RegisterRequestSchema, { agentId, organizationId: "acme" }),
  });
  return (reg.payload.value as { sessionId: string }).sessionId;
}

const preExec = (client: RawClient, sessionId: string, n: number) =>
  client.request({
    case: "preExec",
    value: create(PreExecRequestSchema, {
      sessionId,
      callNumber: BigInt(n),
      toolName: "web_search",
      toolParamsJson: paramsToJson({ n }),
      estimatedCostUsdDecimal: "0.001",
    }),
  });

describe("HTTP probes", () => {
  it("/healthz is live, /readyz ready while the store answers, /metrics has the verdict counter after some calls", async () => {
    const running = await runDaemon("sqlite", { http: "127.0.0.1:0" });
    try {
      const base = `http://${running.daemon.httpAddress}`;
      const health = await fetch(`${base}/healthz`);
      expect([health.status, await health.text()]).toEqual([200, "ok\n"]);
      const ready = await fetch(`${base}/readyz`);
      expect([ready.status, await ready.text()]).toEqual([200, "ready\n"]);
      const client = await RawClient.connect(running.socket, ACME);
      const sessionId = await register(client);
      for (let n = 1; n <= 3; n++) {
        const answer = await preExec(client, sessionId, n);
        expect((answer.payload.value as { verdict: Verdict }).verdict).toBe(Verdict.ALLOW);
      }
      // A refused envelope counts as an authentication failure.
      const bad = await RawClient.connect(running.socket, {
        key: new Uint8Array(32).fill(9),
        keyId: ACME.keyId,
      });
      bad.notify({ case: "register", value: create(RegisterRequestSchema, { agentId: "x" }) });
      await bad.closedPromise;
      const metrics = await fetch(`${base}/metrics`);
      expect(metrics.status).toBe(200);
      expect(metrics.headers.get("content-type")).toContain("text/plain");
      const text = await metrics.text();
      expect(text).toContain('leash_daemon_verdicts_total{verdict="ALLOW",reason="within_thresholds"} 3');
      expect(text).toContain('leash_daemon_request_duration_seconds_count{rpc="PreExec"} 3');
      expect(text).toContain('leash_daemon_auth_failures_total{detail="bad_hmac"} 1');
      expect(text).toContain("leash_daemon_budget_holds_placed_total 3");
      expect((await fetch(`${base}/nope`)).status).toBe(404);
      client.close();
      await running.daemon.close();
      // Closed: the store is closed, so the daemon is no longer ready (the endpoint is gone too).
      await expect(fetch(`${base}/readyz`)).rejects.toThrow();
    } finally {
      await running.daemon.close();
      await running.store.close();
    }
  });
});

describe("socket lifecycle", () => {
  it("mode 0660; a second daemon on the same path is refused; close finishes in-flight requests and removes the socket", async () => {
    const running = await runDaemon("sqlite");
    try {
      expect(statSync(running.socket).mode & 0o777).toBe(0o660);
      await expect(
        startDaemon({
          config: parseDaemonConfig(configObject(running.dir)),
          signer: running.key.signer,
          store: running.store.url!,
          socketPath: running.socket,
          logger: quietLogger(),
        }),
      ).rejects.toThrow(SocketInUseError);
      const client = await RawClient.connect(running.socket, ACME);
      const sessionId = await register(client, "loader");
      // Several requests in flight on one connection, then close at once: each still gets its verdict.
      const answers = Array.from({ length: 20 }, (_, k) => preExec(client, sessionId, k + 1));
      await answers[0];
      await running.daemon.close();
      const settled = await Promise.allSettled(answers);
      const verdicts = settled.filter(
        (s) => s.status === "fulfilled" && s.value.payload.case === "preExecResponse",
      );
      const refused = settled.filter((s) => s.status === "fulfilled" && s.value.payload.case === "error");
      expect(verdicts.length + refused.length, "every request answered, none cut off").toBe(20);
      expect(verdicts.length).toBeGreaterThan(0);
      expect(() => statSync(running.socket)).toThrow();
    } finally {
      await running.daemon.close();
      await running.store.close();
    }
  });

  it("a request that reaches a closing daemon is told DAEMON_UNAVAILABLE shutting_down, not cut off", async () => {
    const running = await runDaemon("sqlite");
    try {
      const client = await RawClient.connect(running.socket, ACME);
      const sessionId = await register(client, "loader");
      const closing = running.daemon.close();
      const late = await preExec(client, sessionId, 1);
      expect(late.payload.case).toBe("error");
      expect(late.payload.value).toMatchObject({
        code: ErrorCode.DAEMON_UNAVAILABLE,
        detail: "shutting_down",
      });
      await closing;
    } finally {
      await running.daemon.close();
      await running.store.close();
    }
  });

  it("a stale socket file (a killed daemon's) is replaced; a regular file at the path is refused and kept", async () => {
    const store = await openStore("sqlite");
    const dir = scratchDir();
    const key = generateKeyPair();
    const config = parseDaemonConfig(configObject(dir));
    try {
      // A socket file nobody listens on: what a SIGKILLed listener leaves behind.
      const socketPath = join(dir, "stale.sock");
      const { spawn } = await import("node:child_process");
      const listener = spawn(
        process.execPath,
        ["-e", "require('net').createServer().listen(process.argv[1], () => console.log('up'))", socketPath],
        { stdio: ["ignore", "pipe", "inherit"] },
      );
      await new Promise((resolve) => listener.stdout!.once("data", resolve));
      listener.kill("SIGKILL");
      await new Promise((resolve) => listener.once("exit", resolve));
      expect(statSync(socketPath).isSocket()).toBe(true);
      const daemon = await startDaemon({
        config,
        signer: key.signer,
        store: store.url!,
        socketPath,
        logger: quietLogger(),
      });
      const client = await RawClient.connect(socketPath, ACME);
      expect(await register(client)).not.toBe("");
      client.close();
      await daemon.close();

      const filePath = join(dir, "not-a-socket");
      writeFileSync(filePath, "keep me");
      await expect(
        startDaemon({
          config,
          signer: key.signer,
          store: store.url!,
          socketPath: filePath,
          logger: quietLogger(),
        }),
      ).rejects.toThrow(/not a socket/);
      expect(statSync(filePath).isFile()).toBe(true);
    } finally {
      await store.close();
    }
  });
});
