// @leash/client over gRPC with TLS and mTLS against the real daemon (openssl-made certificates): the
// organization's certificate is served and its receipts verify; no certificate or another CA's fails closed.
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import { type Daemon, parseDaemonConfig, startDaemon } from "@leash/daemon";
import { makeTestPki } from "@leash/test-stores";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, createClient, type GrpcTlsOptions } from "../src/index.js";

const dir = mkdtempSync(join(tmpdir(), "leash-client-tls-"));
const pem = (name: string) => readFileSync(join(dir, name));
let daemon: Daemon;
const signer = generateKeyPair();
const clients: Client[] = [];

beforeAll(async () => {
  makeTestPki(dir, {
    cas: ["ca", "other-ca"],
    leaves: [
      { name: "server", signedBy: "ca", subject: "/CN=leash.test", san: "DNS:leash.test,IP:127.0.0.1" },
      { name: "acme", signedBy: "ca", subject: "/CN=acme", san: "URI:leash:org:acme" },
      { name: "impostor", signedBy: "other-ca", subject: "/CN=acme", san: "URI:leash:org:acme" },
      { name: "globex", signedBy: "ca", subject: "/CN=globex", san: "URI:leash:org:globex" },
    ],
  });
  daemon = await startDaemon({
    config: parseDaemonConfig({
      organizations: {
        acme: {
          hmac_keys: { k1: { hex: randomBytes(32).toString("hex") } },
          agents: { "research-bot": { guard: { budget_usd: 0.5, max_repeat_calls: 3 } } },
        },
        globex: { hmac_keys: { k2: { hex: randomBytes(32).toString("hex") } } },
      },
    }),
    signer: signer.signer,
    store: `sqlite:${join(dir, "leash.db")}`,
    socketPath: join(dir, "leash.sock"),
    grpc: {
      listen: "127.0.0.1:0",
      tls: { cert: pem("server.pem"), key: pem("server.key"), clientCa: pem("ca.pem") },
    },
    logger: pino({ level: "silent" }),
  });
}, 60_000);

afterAll(async () => {
  for (const c of clients) c.close();
  await daemon?.close();
  rmSync(dir, { recursive: true, force: true });
});

function client(tls: GrpcTlsOptions, serverName = "leash.test", organizationId = "acme"): Client {
  const c = createClient({
    grpc: { address: daemon.grpcAddress as string, tls, serverName },
    organizationId,
    agentId: "research-bot",
    daemonPublicKey: signer.publicKeyHex,
    timeoutMs: 5000,
    controlTimeoutMs: 5000,
    heartbeatIntervalMs: 0,
  });
  clients.push(c);
  return c;
}

describe("gRPC with mTLS", () => {
  it("a client certificate naming acme registers and gets verified ALLOWs; the policy is the daemon's", async () => {
    const c = client({ ca: pem("ca.pem"), cert: pem("acme.pem"), key: pem("acme.key") });
    const { session_id, active_config } = await c.register();
    expect(active_config?.budgetUsdDecimal).toBe("0.5");
    const r = await c.preExec({
      session_id,
      tool_name: "web_search",
      params: { q: "x" },
      estimated_cost_usd: "0.01",
    });
    expect([r.verdict, r.reason, r.fail_closed, r.budget_remaining_usd]).toEqual([
      "ALLOW",
      "within_thresholds",
      false,
      "0.49",
    ]);
    await c.postExec({ session_id, call_number: r.call_number, actual_cost_usd: "0.01" });
    expect((await c.getSession()).budgetRemainingUsdDecimal).toBe("0.49");
  });

  it("no client certificate, or one from another CA: register throws, preExec fails closed", async () => {
    for (const tls of [
      { ca: pem("ca.pem") },
      { ca: pem("ca.pem"), cert: pem("impostor.pem"), key: pem("impostor.key") },
    ]) {
      const c = client(tls);
      await expect(c.register()).rejects.toMatchObject({ code: "daemon_unavailable" });
      const r = await c.preExec({ session_id: "s1", tool_name: "web_search" });
      expect([r.verdict, r.reason]).toEqual(["DENY", "fail_closed:daemon_unavailable"]);
    }
  });

  it("a server certificate for another name, or from a CA the client does not trust, fails closed", async () => {
    for (const c of [
      client({ ca: pem("ca.pem"), cert: pem("acme.pem"), key: pem("acme.key") }, "elsewhere.test"),
      client({ ca: pem("other-ca.pem"), cert: pem("acme.pem"), key: pem("acme.key") }),
    ]) {
      const r = await c.preExec({ session_id: "s1", tool_name: "web_search" });
      expect([r.verdict, r.reason]).toEqual(["DENY", "fail_closed:daemon_unavailable"]);
    }
  });
});

describe("TailEntries with mTLS", () => {
  it("sends the certificate's organization's entries only, whatever organization the client claims", async () => {
    const acme = client({ ca: pem("ca.pem"), cert: pem("acme.pem"), key: pem("acme.key") });
    const globex = client(
      { ca: pem("ca.pem"), cert: pem("globex.pem"), key: pem("globex.key") },
      "leash.test",
      "globex",
    );
    const mine = (await acme.register()).session_id;
    const theirs = (await globex.register()).session_id;
    await acme.preExec({ session_id: mine, tool_name: "web_search", params: { q: "a" } });
    await globex.preExec({ session_id: theirs, tool_name: "globex_only", params: { q: "g" } });
    // An acme certificate claiming globex (the metadata only counts on insecure loopback).
    const claiming = client(
      { ca: pem("ca.pem"), cert: pem("acme.pem"), key: pem("acme.key") },
      "leash.test",
      "globex",
    );
    for (const c of [acme, claiming]) {
      const seen: { session_id: string; tool_name: string | null }[] = [];
      for await (const e of c.tail({ kinds: ["decision"] })) seen.push(e);
      expect(seen.length).toBeGreaterThan(0);
      expect(seen.some((e) => e.session_id === theirs || e.tool_name === "globex_only")).toBe(false);
      expect(seen.some((e) => e.session_id === mine)).toBe(true);
    }
    const theirsSeen: string[] = [];
    for await (const e of globex.tail({ kinds: ["decision"] })) theirsSeen.push(e.session_id);
    expect(theirsSeen).toEqual([theirs]);
  });

  it("without a client certificate the tail fails with an error, it is never empty", async () => {
    const c = client({ ca: pem("ca.pem") });
    await expect(
      (async () => {
        for await (const _ of c.tail()) return "an entry";
        return "empty";
      })(),
    ).rejects.toMatchObject({ code: "daemon_unavailable" });
  });
});
