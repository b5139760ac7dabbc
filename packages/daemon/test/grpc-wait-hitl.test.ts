// WaitHitl over gRPC (a real grpc-js client, insecure loopback, SQLite and PostgreSQL): the paused agent's
// stream sends the request as it is, then its answer, and ends; another organization's call is refused.

import { create } from "@bufbuild/protobuf";
import { credentials, Metadata, makeGenericClientConstructor, status } from "@grpc/grpc-js";
import type { StoreKind } from "@leash/test-stores";
import {
  HitlDecisionKind,
  HitlDecisionSchema,
  HitlStatus,
  type HitlUpdate,
  WaitHitlRequestSchema,
} from "@leash/wire";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { shackleServiceDefinition } from "../src/index.js";
import { type Running, runDaemon } from "./support.js";

const ShackleClient = makeGenericClientConstructor(shackleServiceDefinition(), "ShackleDaemon");

function orgMetadata(org: string): Metadata {
  const m = new Metadata();
  m.set("leash-organization", org);
  return m;
}

describe.each(["sqlite", "postgres"] as StoreKind[])("WaitHitl on %s", (kind) => {
  let running: Running;
  let client: InstanceType<typeof ShackleClient>;

  beforeAll(async () => {
    running = await runDaemon(kind, { grpc: { listen: "127.0.0.1:0", insecure: true } });
    client = new ShackleClient(running.daemon.grpcAddress!, credentials.createInsecure());
  });
  afterAll(async () => {
    client.close();
    await running.stop();
  });

  async function paused(): Promise<{ sessionId: string; requestId: string }> {
    const engine = running.daemon.engine;
    const session = await engine.register({
      agent_id: "hitl-bot",
      organization_id: "acme",
      config: { hitl_mode: "always" },
    });
    const result = await engine.evaluate({ session_id: session.session_id, tool_name: "deploy", params: {} });
    return { sessionId: session.session_id, requestId: result.hitl_request_id! };
  }

  function wait(request: { sessionId: string; requestId: string }, org: string) {
    const updates: HitlUpdate[] = [];
    type Stream = (req: unknown, md: Metadata) => NodeJS.EventEmitter;
    const stream = (client as unknown as Record<string, Stream>).WaitHitl!.call(
      client,
      create(WaitHitlRequestSchema, request),
      orgMetadata(org),
    );
    const ended = new Promise<{ updates: HitlUpdate[]; error: { code: number } | null }>((resolve) => {
      stream.on("data", (u: HitlUpdate) => updates.push(u));
      stream.on("end", () => resolve({ updates, error: null }));
      stream.on("error", (error: { code: number }) => resolve({ updates, error }));
    });
    return { updates, ended };
  }

  it("streams the pending request, then its answer, and ends", async () => {
    const request = await paused();
    const { updates, ended } = wait(request, "acme");
    await expect.poll(() => updates.length).toBe(1);
    expect(updates[0]!.final).toBe(false);
    expect(updates[0]!.request?.status).toBe(HitlStatus.HITL_PENDING);
    await running.daemon.hitl.answer(
      request.requestId,
      create(HitlDecisionSchema, { kind: HitlDecisionKind.HITL_DECISION_APPROVE }),
      "alice",
    );
    const { error } = await ended;
    expect(error).toBeNull();
    expect(updates).toHaveLength(2);
    expect(updates[1]!.final).toBe(true);
    expect(updates[1]!.request).toMatchObject({ status: HitlStatus.HITL_DECIDED, operatorId: "alice" });
  });

  it("refuses another organization as an unknown session", async () => {
    const request = await paused();
    const { ended } = wait(request, "globex");
    const { updates, error } = await ended;
    expect(updates).toHaveLength(0);
    expect(error?.code).toBe(status.NOT_FOUND);
  });
});
