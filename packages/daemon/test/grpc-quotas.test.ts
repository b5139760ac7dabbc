// An organization's rate and in-flight quotas hold over gRPC as over the socket, in one shared account:
// a real @grpc/grpc-js client and a real socket client against one daemon (acme floods, globex is served).
import { create } from "@bufbuild/protobuf";
import { type Client, credentials, Metadata, makeGenericClientConstructor, status } from "@grpc/grpc-js";
import {
  type Envelope,
  ErrorCode,
  HeartbeatSchema,
  PreExecRequestSchema,
  type PreExecResponse,
  paramsToJson,
  RegisterRequestSchema,
  type RegisterResponse,
  Verdict,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { shackleServiceDefinition } from "../src/index.js";
import { RawClient } from "./raw-client.js";
import { ACME, GLOBEX, type Running, runDaemon } from "./support.js";

type StoreKind = Parameters<typeof runDaemon>[0];

const ShackleClient = makeGenericClientConstructor(shackleServiceDefinition(), "ShackleDaemon");

interface GrpcFailure {
  code: number;
  details: string;
  metadata: Metadata;
}

let running: Running | undefined;
const grpcClients: Client[] = [];
const socketClients: RawClient[] = [];
afterEach(async () => {
  for (const c of grpcClients.splice(0)) c.close();
  for (const c of socketClients.splice(0)) c.close();
  await running?.stop();
  running = undefined;
});

const asOrg = (org: string) => {
  const m = new Metadata();
  m.set("leash-organization", org);
  return m;
};

/** One unary call: "ok", or "STATUS:detail" from the refusal's trailing metadata. */
function call<T>(org: string, method: string, request: unknown): Promise<T | string> {
  const client = grpcClients[0]!;
  return new Promise((resolve) => {
    const fn = (client as unknown as Record<string, (...args: unknown[]) => void>)[method]!.bind(client);
    fn(request, asOrg(org), { deadline: Date.now() + 10_000 }, (error: GrpcFailure | null, answer: T) => {
      if (error === null) return resolve(answer);
      const detail = error.metadata.get("leash-error-detail")[0];
      const retry = error.metadata.get("leash-retry-after-ms")[0];
      resolve(`${status[error.code]}:${String(detail)}${retry === undefined ? "" : "+retry"}`);
    });
  });
}

const heartbeat = (org: string, i: number) =>
  call(org, "Heartbeat", create(HeartbeatSchema, { sessionId: `${org}-hb-${i}` })).then((a) =>
    typeof a === "string" ? a : "ok",
  );

async function start(perOrganization: Record<string, number>, kind: StoreKind = "memory"): Promise<void> {
  running = await runDaemon(kind, {
    grpc: { listen: "127.0.0.1:0", insecure: true },
    extra: { limits: { per_organization: perOrganization } },
  });
  grpcClients.push(new ShackleClient(running.daemon.grpcAddress!, credentials.createInsecure()));
}

async function socketClient(key = ACME): Promise<RawClient> {
  const c = await RawClient.connect(running!.socket, key);
  socketClients.push(c);
  return c;
}

const detailOf = (envelope: Envelope) =>
  envelope.payload.case === "error"
    ? `${ErrorCode[envelope.payload.value.code]}:${envelope.payload.value.detail}`
    : envelope.payload.case;

async function refusalsOf(limit: string): Promise<number> {
  const counted = await running!.daemon.metrics.limitRefusals.get();
  return counted.values.find((v) => v.labels.limit === limit)?.value ?? 0;
}

/** globex registers and gets an ALLOW over gRPC, then over the socket. */
async function globexWorks(): Promise<void> {
  const reg = await call<RegisterResponse>(
    "globex",
    "Register",
    create(RegisterRequestSchema, { agentId: "beta-bot", organizationId: "globex" }),
  );
  expect(typeof reg).toBe("object");
  const pre = await call<PreExecResponse>(
    "globex",
    "PreExec",
    create(PreExecRequestSchema, {
      sessionId: (reg as RegisterResponse).sessionId,
      toolName: "search",
      toolParamsJson: paramsToJson({ q: "beta" }),
    }),
  );
  expect((pre as PreExecResponse).verdict).toBe(Verdict.ALLOW);
  const beta = await socketClient(GLOBEX);
  const socketReg = await beta.request({
    case: "register",
    value: create(RegisterRequestSchema, { agentId: "beta-bot", organizationId: "globex" }),
  });
  expect(socketReg.payload.case).toBe("registerResponse");
}

describe("per-organization quotas over gRPC", () => {
  it("acme over its rate on gRPC is refused RESOURCE_EXHAUSTED org_rate_limited, its socket shares the bucket; globex is served on both", async () => {
    await start({ rate_per_s: 1, burst: 5 });
    const flood = await Promise.all(Array.from({ length: 12 }, (_, i) => heartbeat("acme", i)));
    const limited = flood.filter((a) => a === "RESOURCE_EXHAUSTED:org_rate_limited+retry");
    expect(limited.length).toBeGreaterThanOrEqual(6);
    // Admitted ones reached the handler: an unknown session.
    expect(flood.filter((a) => !limited.includes(a)).every((a) => a === "NOT_FOUND:session_not_found")).toBe(
      true,
    );
    expect(await refusalsOf("org_rate_limited")).toBe(limited.length);
    // acme's socket draws on the bucket its gRPC calls emptied (a token comes back each second).
    const acme = await socketClient();
    const overSocket = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        acme.request({ case: "heartbeat", value: create(HeartbeatSchema, { sessionId: `s-${i}` }) }),
      ),
    );
    expect(
      overSocket.map(detailOf).filter((d) => d === "RATE_LIMITED:org_rate_limited").length,
    ).toBeGreaterThanOrEqual(3);
    await globexWorks();
  });

  it("acme past its in-flight quota on gRPC is refused RESOURCE_EXHAUSTED org_in_flight_limit; the slots come back; globex is served", async () => {
    // On PostgreSQL each call waits on the store, so calls overlap and hold their slots meanwhile.
    await start({ in_flight: 1 }, "postgres");
    const flood = await Promise.all(Array.from({ length: 40 }, (_, i) => heartbeat("acme", i)));
    const limited = flood.filter((a) => a === "RESOURCE_EXHAUSTED:org_in_flight_limit+retry").length;
    expect(limited).toBeGreaterThan(0);
    expect(flood.length - limited).toBeGreaterThan(0);
    expect(await refusalsOf("org_in_flight_limit")).toBe(limited);
    // Every answered call gave its slot back: one at a time is always admitted, on either transport.
    for (let i = 0; i < 3; i++) expect(await heartbeat("acme", 100 + i)).toBe("NOT_FOUND:session_not_found");
    const acme = await socketClient();
    const one = await acme.request({ case: "heartbeat", value: create(HeartbeatSchema, { sessionId: "s" }) });
    expect(detailOf(one)).toBe("SESSION_NOT_FOUND:session_not_found");
    await globexWorks();
  });
});
