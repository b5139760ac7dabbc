// The gRPC transport end to end: a real @grpc/grpc-js client (from the same service definition) against a
// real daemon — Appendix A on insecure loopback (SQLite, PostgreSQL), mTLS with openssl-made certificates, refusals.
import { create } from "@bufbuild/protobuf";
import { type Client, credentials, Metadata, makeGenericClientConstructor, status } from "@grpc/grpc-js";
import { verifyChain } from "@leash/chain";
import { verifyReceipt } from "@leash/receipts";
import { makeTestPki } from "@leash/test-stores";
import {
  DenyReason,
  GetSessionStateRequestSchema,
  HeartbeatSchema,
  PostExecNotificationSchema,
  PreExecRequestSchema,
  type PreExecResponse,
  paramsDigest,
  paramsToJson,
  RegisterRequestSchema,
  type RegisterResponse,
  type SessionState,
  Verdict,
} from "@leash/wire";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { checkGrpcOptions, GrpcConfigError, shackleServiceDefinition } from "../src/index.js";
import { RawClient } from "./raw-client.js";
import { ACME, type Running, runDaemon, scratchDir } from "./support.js";

const PARAMS = { query: "leash sidecar" };
const ShackleClient = makeGenericClientConstructor(shackleServiceDefinition(), "ShackleDaemon");

interface GrpcFailure {
  code: number;
  details: string;
  metadata: Metadata;
}

/** One unary call, as a promise; a refusal rejects with the ServiceError. */
function call<T>(client: Client, method: string, request: unknown, metadata = new Metadata()): Promise<T> {
  return new Promise((resolve, reject) => {
    type Unary = (
      request: unknown,
      metadata: Metadata,
      options: { deadline: number },
      callback: (error: GrpcFailure | null, response: T) => void,
    ) => void;
    const fn = (client as unknown as Record<string, Unary>)[method]!.bind(client);
    fn(request, metadata, { deadline: Date.now() + 10_000 }, (error: GrpcFailure | null, response: T) =>
      error ? reject(error) : resolve(response),
    );
  });
}

const asAcme = () => {
  const m = new Metadata();
  m.set("leash-organization", "acme");
  return m;
};

describe("gRPC transport", () => {
  let running: Running | undefined;
  const clients: Client[] = [];
  afterEach(async () => {
    for (const c of clients.splice(0)) c.close();
    await running?.stop();
    running = undefined;
  });

  it.each(["sqlite", "postgres"] as const)(
    "Appendix A over insecure loopback gRPC on %s: ALLOW 0.498 → postExec 0.0015 → repeats → max_repeat_exceeded → circuit_open; receipts verify; the socket still serves",
    async (kind) => {
      running = await runDaemon(kind, { grpc: { listen: "127.0.0.1:0", insecure: true } });
      const address = running.daemon.grpcAddress!;
      expect(address).toMatch(/^127\.0\.0\.1:\d+$/);
      const client = new ShackleClient(address, credentials.createInsecure());
      clients.push(client);

      const reg = await call<RegisterResponse>(
        client,
        "Register",
        create(RegisterRequestSchema, {
          agentId: "research-bot",
          framework: "crewai",
          organizationId: "acme",
        }),
        asAcme(),
      );
      expect(reg.negotiatedProtocol).toBe("1.0.0");
      expect(reg.activeConfig?.budgetUsdDecimal).toBe("0.5");
      expect(reg.activeConfig?.maxRepeatCalls).toBe(3);
      expect(reg.activeConfig?.deniedTools).toEqual(["delete_file"]);
      const sessionId = reg.sessionId;

      const preExec = (n: number) =>
        call<PreExecResponse>(
          client,
          "PreExec",
          create(PreExecRequestSchema, {
            sessionId,
            callNumber: BigInt(n),
            toolName: "web_search",
            toolParamsJson: paramsToJson(PARAMS),
            toolParamsHash: paramsDigest(PARAMS),
            estimatedCostUsd: 0.002,
            estimatedCostUsdDecimal: "0.002",
          }),
          asAcme(),
        );
      const responses: PreExecResponse[] = [];
      const first = await preExec(1);
      responses.push(first);
      expect([first.verdict, first.reason, first.budgetRemainingUsdDecimal]).toEqual([
        Verdict.ALLOW,
        "within_thresholds",
        "0.498",
      ]);
      await call(
        client,
        "PostExec",
        create(PostExecNotificationSchema, {
          sessionId,
          callNumber: 1n,
          actualCostUsd: 0.0015,
          actualCostUsdDecimal: "0.0015",
          success: true,
        }),
        asAcme(),
      );
      const state = await call<SessionState>(
        client,
        "GetSessionState",
        create(GetSessionStateRequestSchema, { sessionId }),
        asAcme(),
      );
      expect(state.budgetRemainingUsdDecimal).toBe("0.4985");
      expect(state.budgetSpentUsdDecimal).toBe("0.0015");
      for (const n of [2, 3]) {
        const r = await preExec(n);
        responses.push(r);
        expect([r.verdict, r.reason]).toEqual([Verdict.ALLOW, "within_thresholds"]);
      }
      const fourth = await preExec(4);
      responses.push(fourth);
      expect([fourth.verdict, fourth.reason, fourth.denyReason]).toEqual([
        Verdict.DENY,
        "max_repeat_exceeded",
        DenyReason.MAX_REPEAT_EXCEEDED,
      ]);
      const fifth = await preExec(5);
      responses.push(fifth);
      expect([fifth.verdict, fifth.reason, fifth.denyReason]).toEqual([
        Verdict.DENY,
        "circuit_open",
        DenyReason.CIRCUIT_OPEN,
      ]);
      const hb = await call<{ daemonBudgetRemainingDecimal: string }>(
        client,
        "Heartbeat",
        create(HeartbeatSchema, { sessionId, lastCallNumber: 5n }),
        asAcme(),
      );
      expect(hb.daemonBudgetRemainingDecimal).toBe("0.4945");

      // Another organization cannot see acme's session: NOT_FOUND with the Appendix B name.
      const foreign = new Metadata();
      foreign.set("leash-organization", "globex");
      const refused = await call(
        client,
        "GetSessionState",
        create(GetSessionStateRequestSchema, { sessionId }),
        foreign,
      ).catch((e: GrpcFailure) => e);
      expect((refused as GrpcFailure).code).toBe(status.NOT_FOUND);
      expect((refused as GrpcFailure).metadata.get("leash-error-code")).toEqual(["SESSION_NOT_FOUND"]);
      // Several organizations and no metadata: who the caller is is unknown.
      const anonymous = await call(
        client,
        "GetSessionState",
        create(GetSessionStateRequestSchema, { sessionId }),
      ).catch((e: GrpcFailure) => e);
      expect((anonymous as GrpcFailure).code).toBe(status.UNAUTHENTICATED);
      // Over §7.5's 1 MiB: refused before the handler sees it.
      const huge = await call(
        client,
        "GetSessionState",
        create(GetSessionStateRequestSchema, { sessionId: "x".repeat(1_100_000) }),
        asAcme(),
      ).catch((e: GrpcFailure) => e);
      expect((huge as GrpcFailure).code).toBe(status.RESOURCE_EXHAUSTED);
      // Another major version: FAILED_PRECONDITION.
      const v2 = asAcme();
      v2.set("leash-protocol-version", "2.0.0");
      const mismatch = await call(
        client,
        "Register",
        create(RegisterRequestSchema, { agentId: "research-bot", organizationId: "acme" }),
        v2,
      ).catch((e: GrpcFailure) => e);
      expect((mismatch as GrpcFailure).code).toBe(status.FAILED_PRECONDITION);
      expect((mismatch as GrpcFailure).metadata.get("leash-error-code")).toEqual([
        "PROTOCOL_VERSION_MISMATCH",
      ]);
      // A malformed request maps to INVALID_ARGUMENT.
      const bad = await call(
        client,
        "GetSessionState",
        create(GetSessionStateRequestSchema, { sessionId: "" }),
        asAcme(),
      ).catch((e: GrpcFailure) => e);
      expect((bad as GrpcFailure).code).toBe(status.INVALID_ARGUMENT);
      expect((bad as GrpcFailure).metadata.get("leash-error-code")).toEqual(["INVALID_MESSAGE"]);

      const entries = await running.store.substrate.transaction((tx) => tx.chain.range(0, 1000));
      for (const r of responses) {
        const checked = await verifyReceipt(r.receipt, running.key.publicKeyHex);
        expect(checked.ok, JSON.stringify(checked)).toBe(true);
        expect(entries[Number(r.chainSeq)]?.entry_hash).toBe(r.entryHash);
      }
      expect((await verifyChain(entries, { publicKeys: [running.key.publicKeyHex] })).ok).toBe(true);

      // The Unix socket serves the same daemon alongside gRPC.
      const raw = await RawClient.connect(running.socket, ACME);
      const viaSocket = await raw.request({
        case: "getSessionState",
        value: create(GetSessionStateRequestSchema, { sessionId }),
      });
      expect(viaSocket.payload.case).toBe("sessionState");
      if (viaSocket.payload.case === "sessionState") expect(viaSocket.payload.value.totalCalls).toBe(5n);
      raw.close();
    },
  );

  it("refuses to start with plaintext off loopback, insecure off loopback, or no TLS", () => {
    expect(() => checkGrpcOptions({ listen: "0.0.0.0:50051", insecure: true })).toThrow(GrpcConfigError);
    expect(() => checkGrpcOptions({ listen: "0.0.0.0:50051" })).toThrow(/needs TLS/);
    expect(() => checkGrpcOptions({ listen: "127.0.0.1:50051" })).toThrow(/needs TLS/);
    expect(() => checkGrpcOptions({ listen: "nonsense" })).toThrow(/HOST:PORT/);
    expect(checkGrpcOptions({ listen: "[::1]:0", insecure: true }).host).toBe("::1");
  });

  describe("mTLS", () => {
    let pki: Record<string, Buffer>;
    beforeAll(() => {
      pki = makeTestPki(scratchDir(), {
        cas: ["ca", "other-ca"],
        leaves: [
          { name: "server", signedBy: "ca", subject: "/CN=localhost", san: "DNS:localhost,IP:127.0.0.1" },
          { name: "acme", signedBy: "ca", subject: "/CN=acme", san: "DNS:acme.example" },
          { name: "globex-uri", signedBy: "ca", subject: "/CN=ignored", san: "URI:leash:org:globex" },
          { name: "initech", signedBy: "ca", subject: "/CN=initech", san: "DNS:initech.example" },
          { name: "impostor", signedBy: "other-ca", subject: "/CN=acme", san: "DNS:acme.example" },
        ],
      });
    });

    const connect = (address: string, who?: string) => {
      const creds =
        who === undefined
          ? credentials.createSsl(pki["ca.pem"]!)
          : credentials.createSsl(pki["ca.pem"]!, pki[`${who}.key`]!, pki[`${who}.pem`]!);
      const client = new ShackleClient(address, creds);
      clients.push(client);
      return client;
    };
    const register = (client: Client, org: string) =>
      call<RegisterResponse>(
        client,
        "Register",
        create(RegisterRequestSchema, { agentId: "research-bot", organizationId: org }),
      );

    it("serves a client whose certificate names a configured organization; refuses no certificate, another CA, an unknown organization", async () => {
      running = await runDaemon("sqlite", {
        grpc: {
          listen: "127.0.0.1:0",
          tls: { cert: pki["server.pem"]!, key: pki["server.key"]!, clientCa: pki["ca.pem"]! },
        },
      });
      const address = running.daemon.grpcAddress!.replace("127.0.0.1", "localhost");

      const acme = await register(connect(address, "acme"), "acme");
      expect(acme.activeConfig?.budgetUsdDecimal).toBe("0.5");
      // The URI SAN wins over the CN.
      const globex = await register(connect(address, "globex-uri"), "globex");
      expect(globex.sessionId).not.toBe("");
      // A certificate for acme cannot register for globex (the organization is the certificate's).
      const wrong = await register(connect(address, "acme"), "globex").catch((e: GrpcFailure) => e);
      expect((wrong as GrpcFailure).code).toBe(status.UNAUTHENTICATED);
      expect((wrong as GrpcFailure).metadata.get("leash-error-code")).toEqual(["AUTHENTICATION_FAILED"]);

      const anonymous = await register(connect(address), "acme").catch((e: GrpcFailure) => e);
      expect((anonymous as GrpcFailure).code).toBe(status.UNAVAILABLE);
      const impostor = await register(connect(address, "impostor"), "acme").catch((e: GrpcFailure) => e);
      expect((impostor as GrpcFailure).code).toBe(status.UNAVAILABLE);
      const unknown = await register(connect(address, "initech"), "initech").catch((e: GrpcFailure) => e);
      expect((unknown as GrpcFailure).code).toBe(status.UNAUTHENTICATED);
      // None of the refused ones reached the engine: only acme's and globex's registrations are recorded.
      const sessions = await running.store.substrate.transaction((tx) => tx.chain.range(0, 100));
      expect(sessions.length).toBe(2);
    });

    it("TLS without client certificates ignores the leash-organization metadata (several organizations: refused)", async () => {
      running = await runDaemon("sqlite", {
        grpc: { listen: "127.0.0.1:0", tls: { cert: pki["server.pem"]!, key: pki["server.key"]! } },
      });
      const address = running.daemon.grpcAddress!.replace("127.0.0.1", "localhost");
      const client = connect(address);
      const claimed = await call(
        client,
        "Register",
        create(RegisterRequestSchema, { agentId: "research-bot", organizationId: "acme" }),
        asAcme(),
      ).catch((e: GrpcFailure) => e);
      expect((claimed as GrpcFailure).code).toBe(status.UNAUTHENTICATED);
    });
  });
});
