// Large requests on a live daemon: params over the guard's cap are a recorded DENY that is answered (socket and
// gRPC); a PreExec whose answer could not fit a frame is refused before anything is decided; ids are bounded.
import { create } from "@bufbuild/protobuf";
import { type Client, credentials, Metadata, makeGenericClientConstructor } from "@grpc/grpc-js";
import { verifyChain } from "@leash/chain";
import type { ChainEntryRecord } from "@leash/core";
import { PARAMS_INLINE_MAX } from "@leash/engine";
import {
  type Envelope,
  ErrorCode,
  MAX_FRAME_BYTES,
  PreExecRequestSchema,
  type PreExecResponse,
  paramsToJson,
  RegisterRequestSchema,
  type RegisterResponse,
  Verdict,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { preExecAnswerBound, shackleServiceDefinition } from "../src/index.js";
import { RawClient } from "./raw-client.js";
import { ACME, type Running, runDaemon } from "./support.js";

/** About 790 KB of params: a request that fits the 1 MiB frame, an answer with them inline that would not. */
const BIG = { blob: "x".repeat(790_000) };

const readChain = (running: Running): Promise<ChainEntryRecord[]> =>
  running.store.substrate.transaction((tx) => tx.chain.range(0, 1_000_000));

const decisions = (entries: ChainEntryRecord[]) =>
  entries.filter((e) => e.kind === "decision").map((e) => JSON.parse(e.body).data as Record<string, unknown>);

async function register(client: RawClient, fields: { agentId?: string; sessionId?: string } = {}) {
  const answer = await client.request({
    case: "register",
    value: create(RegisterRequestSchema, { agentId: "uploader", organizationId: "acme", ...fields }),
  });
  return answer;
}

const preExec = (sessionId: string, toolName: string, params: unknown, nonce = 1n) => ({
  case: "preExec" as const,
  value: create(PreExecRequestSchema, {
    sessionId,
    toolName,
    toolParamsJson: paramsToJson(params),
    nonce,
    estimatedCostUsdDecimal: "0.10",
  }),
});

function errorOf(envelope: Envelope): { code: ErrorCode; detail: string } {
  expect(envelope.payload.case).toBe("error");
  const { code, detail } = envelope.payload.value as { code: ErrorCode; detail: string };
  return { code, detail };
}

describe.each(["sqlite", "postgres"] as const)("large requests over the socket on %s", (kind) => {
  let running: Running | undefined;
  let client: RawClient | undefined;
  afterEach(async () => {
    client?.close();
    await running?.stop();
    running = client = undefined;
  });

  it("a 790 KB params PreExec is answered: DENY params_too_large, recorded without the params, nothing held", async () => {
    running = await runDaemon(kind);
    client = await RawClient.connect(running.socket, ACME);
    const sessionId = ((await register(client)).payload.value as RegisterResponse).sessionId;
    const answer = await client.request(preExec(sessionId, "upload", BIG));
    expect(answer.payload.case).toBe("preExecResponse");
    const response = answer.payload.value as PreExecResponse;
    expect([response.verdict, response.reason]).toEqual([Verdict.DENY, "policy_violation:params_too_large"]);
    expect(response.budgetRemainingUsdDecimal).toBe("1");

    const entries = await readChain(running);
    const recorded = decisions(entries);
    expect(recorded.map((d) => [d.verdict, d.reason, d.reservation_id])).toEqual([
      ["DENY", "policy_violation:params_too_large", null],
    ]);
    expect(recorded[0]!.params_json).toBeUndefined();
    expect(entries.some((e) => e.body.includes("xxxxxxxx"))).toBe(false);
    expect(
      await running.store.substrate.transaction((tx) => tx.budgets.getReservation(`${sessionId}#1`)),
    ).toBeNull();
    expect((await verifyChain(entries, { publicKeys: [running.key.publicKeyHex] })).ok).toBe(true);
    // The daemon goes on serving the session: a small call is allowed.
    const next = await client.request(preExec(sessionId, "upload", { blob: "x" }, 2n));
    expect((next.payload.value as PreExecResponse).verdict).toBe(Verdict.ALLOW);
  }, 30_000);
});

describe("answers that could not fit a frame (SQLite)", () => {
  let running: Running | undefined;
  let client: RawClient | undefined;
  afterEach(async () => {
    client?.close();
    await running?.stop();
    running = client = undefined;
  });

  it("refuses a PreExec whose answer could exceed the frame before deciding: nothing is recorded", async () => {
    running = await runDaemon("sqlite");
    client = await RawClient.connect(running.socket, ACME);
    const sessionId = ((await register(client)).payload.value as RegisterResponse).sessionId;
    const before = (await readChain(running)).length;
    const answer = await client.request(preExec(sessionId, "t".repeat(800_000), {}));
    expect(errorOf(answer)).toEqual({ code: ErrorCode.MESSAGE_TOO_LARGE, detail: "answer_too_large" });
    expect((await readChain(running)).length).toBe(before);
    const next = await client.request(preExec(sessionId, "upload", {}, 2n));
    expect((next.payload.value as PreExecResponse).verdict).toBe(Verdict.ALLOW);
  }, 30_000);

  it("refuses a Register whose agent_id or session_id is longer than 256 bytes", async () => {
    running = await runDaemon("sqlite");
    client = await RawClient.connect(running.socket, ACME);
    for (const fields of [{ agentId: "a".repeat(257) }, { sessionId: "é".repeat(129) }]) {
      expect(errorOf(await register(client, fields))).toEqual({
        code: ErrorCode.INVALID_MESSAGE,
        detail: "id_too_long",
      });
    }
    expect(await readChain(running)).toEqual([]);
  });

  it("the bound holds for an answer at its largest: longest ids, control characters, inline params at their longest", async () => {
    running = await runDaemon("sqlite");
    client = await RawClient.connect(running.socket, ACME);
    const sessionId = "\u0001".repeat(256);
    const agentId = "\u0002".repeat(256);
    const reg = await register(client, { agentId, sessionId });
    expect((reg.payload.value as RegisterResponse).sessionId).toBe(sessionId);
    // Canonical {"p":"\"\"…"} one unit short of being stored by digest: every quote 2 bytes there, 4 in the entry.
    const params = { p: '"'.repeat((PARAMS_INLINE_MAX - 9) / 2) };
    const toolName = "\u0003".repeat(40_000);
    const answer = await client.request(preExec(sessionId, toolName, params));
    const response = answer.payload.value as PreExecResponse;
    expect([response.verdict, response.reason]).toEqual([Verdict.ALLOW, "within_thresholds"]);
    const entries = await readChain(running);
    expect(entries.at(-1)!.body).toContain('"params_json":"{');
    const size = client.bodySizes.at(-1)!;
    const bound = preExecAnswerBound({ sessionId, toolName, organizationId: "acme" });
    expect(size).toBeGreaterThan(300_000);
    expect(size).toBeLessThanOrEqual(bound);
    expect(bound).toBeLessThanOrEqual(MAX_FRAME_BYTES);
  }, 30_000);

  it("answers params of any size the policy allows: stored by digest, the receipt carries their digest only", async () => {
    running = await runDaemon("sqlite", {
      extra: {
        organizations: {
          acme: {
            hmac_keys: { [ACME.keyId]: { hex: Buffer.from(ACME.key).toString("hex") } },
            default_guard: { budget_usd: 1, max_params_bytes: 900_000 },
          },
        },
      },
    });
    client = await RawClient.connect(running.socket, ACME);
    const sessionId = ((await register(client)).payload.value as RegisterResponse).sessionId;
    const answer = await client.request(preExec(sessionId, "upload", BIG));
    const response = answer.payload.value as PreExecResponse;
    expect([response.verdict, response.reason]).toEqual([Verdict.ALLOW, "within_thresholds"]);
    expect(client.bodySizes.at(-1)!).toBeLessThan(8 * 1024);
    const data = decisions(await readChain(running))[0]!;
    expect([data.params_blob, data.params_json]).toEqual([true, undefined]);
    const stored = await running.store.substrate.transaction((tx) =>
      tx.chain.params([data.params_hash as string]),
    );
    expect(stored.get(data.params_hash as string)?.length).toBeGreaterThan(790_000);
  }, 30_000);
});

const ShackleClient = makeGenericClientConstructor(shackleServiceDefinition(), "ShackleDaemon");

function unary<T>(client: Client, method: string, request: unknown): Promise<T> {
  const metadata = new Metadata();
  metadata.set("leash-organization", "acme");
  return new Promise((resolve, reject) => {
    const fn = (client as unknown as Record<string, (...args: unknown[]) => void>)[method]!.bind(client);
    fn(request, metadata, { deadline: Date.now() + 20_000 }, (error: unknown, response: T) =>
      error ? reject(error) : resolve(response),
    );
  });
}

describe("large requests over gRPC (SQLite)", () => {
  let running: Running | undefined;
  let client: Client | undefined;
  afterEach(async () => {
    client?.close();
    await running?.stop();
    running = client = undefined;
  });

  it("a 790 KB params PreExec is answered within the 1 MiB frame: DENY params_too_large, no hold", async () => {
    running = await runDaemon("sqlite", { grpc: { listen: "127.0.0.1:0", insecure: true } });
    // A client that holds the daemon to SP/1.0's frame, as the socket does.
    client = new ShackleClient(running.daemon.grpcAddress!, credentials.createInsecure(), {
      "grpc.max_receive_message_length": MAX_FRAME_BYTES,
    });
    const reg = await unary<RegisterResponse>(
      client,
      "Register",
      create(RegisterRequestSchema, { agentId: "uploader", organizationId: "acme" }),
    );
    const response = await unary<PreExecResponse>(
      client,
      "PreExec",
      preExec(reg.sessionId, "upload", BIG).value,
    );
    expect([response.verdict, response.reason]).toEqual([Verdict.DENY, "policy_violation:params_too_large"]);
    const recorded = decisions(await readChain(running));
    expect(recorded.map((d) => [d.verdict, d.reservation_id])).toEqual([["DENY", null]]);
    expect(
      await running.store.substrate.transaction((tx) => tx.budgets.getReservation(`${reg.sessionId}#1`)),
    ).toBeNull();
  }, 30_000);
});
