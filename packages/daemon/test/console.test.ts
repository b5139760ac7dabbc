// The console's control channel without a browser: a real daemon (memory, SQLite, PostgreSQL), a real
// WebSocket client (`ws`), JSON-encoded ConsoleRequest/ConsoleEvent. Authentication, origin, read-only
// tokens, the operator identity, bad frames, and the tokens file.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, fromJsonString, toJsonString } from "@bufbuild/protobuf";
import type { StoreKind } from "@leash/test-stores";
import {
  type ConsoleEvent,
  ConsoleEventSchema,
  ConsoleRequestSchema,
  HitlDecisionKind,
  HitlStatus,
} from "@leash/wire";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import {
  addConsoleToken,
  ConsoleConfigError,
  loadConsoleTokens,
  operatorOf,
  parseConsoleTokens,
  tokenHash,
} from "../src/index.js";
import { type Running, runDaemon } from "./support.js";

const OPERATOR_TOKEN = "lct_operator-token-for-tests-0123456789";
const READONLY_TOKEN = "lct_readonly-token-for-tests-0123456789";
const GLOBEX_TOKEN = "lct_globex-operator-token-for-tests-0123";

/** A WebSocket that collects every event; `next(pred)` resolves with the first matching one. */
function connectConsole(url: string, headers: Record<string, string>) {
  const ws = new WebSocket(url.replace(/^http/, "ws") + "v1/control", { headers });
  const events: ConsoleEvent[] = [];
  const waiters: Array<{ pred: (e: ConsoleEvent) => boolean; resolve: (e: ConsoleEvent) => void }> = [];
  ws.on("message", (data) => {
    const event = fromJsonString(ConsoleEventSchema, data.toString());
    events.push(event);
    for (const w of [...waiters]) {
      if (w.pred(event)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(event);
      }
    }
  });
  const opened = new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("unexpected-response", (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    ws.once("error", reject);
  });
  return {
    ws,
    events,
    opened,
    next(pred: (e: ConsoleEvent) => boolean): Promise<ConsoleEvent> {
      const found = events.find(pred);
      if (found) return Promise.resolve(found);
      return new Promise((resolve) => waiters.push({ pred, resolve }));
    },
    send(json: unknown) {
      ws.send(typeof json === "string" ? json : JSON.stringify(json));
    },
  };
}

describe.each(["memory", "sqlite", "postgres"] as StoreKind[])(
  "the console's control channel on %s",
  (kind) => {
    let running: Running;
    let url: string;

    beforeAll(async () => {
      running = await runDaemon(kind, {
        extra: {},
        console: {
          listen: "127.0.0.1:0",
          tokens: [
            {
              sha256: tokenHash(OPERATOR_TOKEN),
              operator: "alice",
              readonly: false,
              organizations: ["acme"],
            },
            {
              sha256: tokenHash(READONLY_TOKEN),
              operator: "auditor",
              readonly: true,
              organizations: ["acme"],
            },
            { sha256: tokenHash(GLOBEX_TOKEN), operator: "gina", readonly: false, organizations: ["globex"] },
          ],
        },
      });
      url = running.daemon.consoleUrl!;
    });
    afterAll(() => running.stop());

    /** A paused call (the engine in the daemon's process: its policy asks a human for every call). */
    async function pausedRequest(organization = "acme"): Promise<string> {
      const engine = running.daemon.engine;
      const session = await engine.register({
        agent_id: "hitl-bot",
        organization_id: organization,
        config: { hitl_mode: "always" },
      });
      const result = await engine.evaluate({
        session_id: session.session_id,
        tool_name: "deploy",
        params: { env: "prod" },
        nonce: "42",
      });
      expect(result.verdict).toBe("HITL");
      return result.hitl_request_id!;
    }

    it("refuses an upgrade without a token, with a wrong one, and from another origin", async () => {
      await expect(connectConsole(url, {}).opened).rejects.toThrow("HTTP 401");
      await expect(connectConsole(url, { Authorization: "Bearer lct_wrong" }).opened).rejects.toThrow(
        "HTTP 401",
      );
      await expect(
        connectConsole(url, { Authorization: `Bearer ${OPERATOR_TOKEN}`, Origin: "http://evil.example" })
          .opened,
      ).rejects.toThrow("HTTP 403");
      const page = await fetch(url);
      expect(page.status).toBe(401);
      expect(await page.text()).not.toContain("deploy");
    });

    it("an operator's answer is recorded under the token's identity; the second operator sees it live", async () => {
      const requestId = await pausedRequest();
      const alice = connectConsole(url, { Authorization: `Bearer ${OPERATOR_TOKEN}` });
      const auditor = connectConsole(url, { Authorization: `Bearer ${READONLY_TOKEN}` });
      await Promise.all([alice.opened, auditor.opened]);
      const hello = await alice.next((e) => e.event.case === "hello");
      expect(hello.event.value).toMatchObject({ operatorId: "alice", readonly: false });
      const list = await alice.next((e) => e.event.case === "list");
      expect(
        list.event.case === "list" && list.event.value.requests.some((r) => r.requestId === requestId),
      ).toBe(true);
      // The read-only token sees the queue but its answer is refused, and nothing changes.
      auditor.send(
        toJsonString(
          ConsoleRequestSchema,
          create(ConsoleRequestSchema, {
            correlationId: "ro-1",
            request: {
              case: "answer",
              value: { requestId, decision: { kind: HitlDecisionKind.HITL_DECISION_APPROVE } },
            },
          }),
        ),
      );
      const refused = await auditor.next((e) => e.correlationId === "ro-1");
      expect(refused.event.case).toBe("error");
      expect(refused.event.case === "error" && refused.event.value.detail).toBe("hitl_read_only");
      expect((await running.daemon.engine.getHitl(requestId)).status).toBe("pending");
      // Whatever name a page might send, the recorded operator is the token's.
      alice.send({
        correlationId: "a-1",
        answer: { requestId, decision: { kind: "HITL_DECISION_REJECT", comment: "not today" } },
      });
      const answered = await alice.next((e) => e.correlationId === "a-1");
      expect(answered.event.case).toBe("request");
      const live = await auditor.next(
        (e) =>
          e.event.case === "update" && e.event.value.final && e.event.value.request?.requestId === requestId,
      );
      expect(live.event.case === "update" && live.event.value.request).toMatchObject({
        status: HitlStatus.HITL_DECIDED,
        operatorId: "alice",
        comment: "not today",
      });
      expect((await running.daemon.engine.getHitl(requestId)).operator_id).toBe("alice");
      // A second answer is refused and says so.
      alice.send({
        correlationId: "a-2",
        answer: { requestId, decision: { kind: "HITL_DECISION_APPROVE" } },
      });
      const again = await alice.next((e) => e.correlationId === "a-2");
      expect(again.event.case === "error" && again.event.value.detail).toBe("hitl_already_decided");
      alice.ws.close();
      auditor.ws.close();
    });

    it("a token lists, shows and answers only its organizations' requests, and is sent only their updates", async () => {
      const acmeRequest = await pausedRequest("acme");
      const globexRequest = await pausedRequest("globex");
      const gina = connectConsole(url, { Authorization: `Bearer ${GLOBEX_TOKEN}` });
      const alice = connectConsole(url, { Authorization: `Bearer ${OPERATOR_TOKEN}` });
      await Promise.all([gina.opened, alice.opened]);
      const first = await gina.next((e) => e.event.case === "list");
      const ids = first.event.case === "list" ? first.event.value.requests.map((r) => r.requestId) : [];
      expect(ids).toContain(globexRequest);
      expect(ids).not.toContain(acmeRequest);
      expect(
        first.event.case === "list" && first.event.value.requests.every((r) => r.organizationId === "globex"),
      ).toBe(true);
      gina.send({ correlationId: "l-1", list: {} });
      const listed = await gina.next((e) => e.correlationId === "l-1");
      expect(
        listed.event.case === "list" && listed.event.value.requests.map((r) => r.requestId),
      ).not.toContain(acmeRequest);
      // Another organization's request, its params included, is as if it did not exist.
      gina.send({ correlationId: "g-1", get: { requestId: acmeRequest } });
      const hidden = await gina.next((e) => e.correlationId === "g-1");
      expect(hidden.event.case === "error" && hidden.event.value.detail).toBe("hitl_request_not_found");
      gina.send({
        correlationId: "a-1",
        answer: { requestId: acmeRequest, decision: { kind: "HITL_DECISION_APPROVE" } },
      });
      const refused = await gina.next((e) => e.correlationId === "a-1");
      expect(refused.event.case === "error" && refused.event.value.detail).toBe("hitl_request_not_found");
      expect((await running.daemon.engine.getHitl(acmeRequest)).status).toBe("pending");
      // acme's answer reaches acme's consoles, not globex's; globex's own answer reaches gina.
      alice.send({
        correlationId: "a-2",
        answer: { requestId: acmeRequest, decision: { kind: "HITL_DECISION_REJECT" } },
      });
      await alice.next((e) => e.correlationId === "a-2" && e.event.case === "request");
      gina.send({
        correlationId: "a-3",
        answer: { requestId: globexRequest, decision: { kind: "HITL_DECISION_REJECT" } },
      });
      await gina.next((e) => e.correlationId === "a-3" && e.event.case === "request");
      await gina.next((e) => e.event.case === "update" && e.event.value.request?.requestId === globexRequest);
      const leaked = gina.events.filter(
        (e) => e.event.case === "update" && e.event.value.request?.requestId === acmeRequest,
      );
      expect(leaked).toEqual([]);
      gina.ws.close();
      alice.ws.close();
    });

    it("answers a malformed frame with an error and keeps the connection", async () => {
      const alice = connectConsole(url, { Authorization: `Bearer ${OPERATOR_TOKEN}` });
      await alice.opened;
      alice.send("{not json");
      const bad = await alice.next((e) => e.event.case === "error");
      expect(bad.event.case === "error" && bad.event.value.detail).toBe("invalid_json");
      alice.send({ correlationId: "g-1", get: { requestId: "nope" } });
      const missing = await alice.next((e) => e.correlationId === "g-1");
      expect(missing.event.case === "error" && missing.event.value.detail).toBe("hitl_request_not_found");
      alice.ws.close();
    });
  },
);

describe("console sign-ins over HTTP", () => {
  let running: Running;
  let url: string;
  beforeAll(async () => {
    running = await runDaemon("memory", {
      console: {
        listen: "127.0.0.1:0",
        tokens: [
          { sha256: tokenHash(OPERATOR_TOKEN), operator: "alice", readonly: false, organizations: ["acme"] },
          { sha256: tokenHash(READONLY_TOKEN), operator: "auditor", readonly: true, organizations: ["acme"] },
        ],
      },
    });
    url = running.daemon.consoleUrl!;
  });
  afterAll(() => running.stop());

  /** POST /login as the sign-in form does; the session cookie it sets. */
  async function signIn(token: string): Promise<string> {
    const r = await fetch(`${url}login`, {
      method: "POST",
      body: new URLSearchParams({ token }),
      redirect: "manual",
    });
    expect(r.status).toBe(303);
    return r.headers.get("set-cookie")!.split(";")[0]!;
  }
  const pageStatus = async (cookie: string) => (await fetch(url, { headers: { cookie } })).status;

  it("10,001 sign-ins with a read-only token sign no one else out; that token keeps only its newest sessions", async () => {
    const alice = await signIn(OPERATOR_TOKEN);
    const firstAuditor = await signIn(READONLY_TOKEN);
    let last = "";
    for (let i = 0; i < 10_001; i++) last = await signIn(READONLY_TOKEN);
    expect(await pageStatus(alice)).toBe(200);
    expect(await pageStatus(last)).toBe(200);
    // Its own oldest session made room (LOGINS_PER_TOKEN per token).
    expect(await pageStatus(firstAuditor)).toBe(401);
  }, 120_000);
});

describe("the console on a non-loopback address", () => {
  it("is refused without insecure: it speaks plain HTTP", async () => {
    await expect(
      runDaemon("memory", {
        console: {
          listen: "0.0.0.0:0",
          tokens: [
            { sha256: tokenHash(OPERATOR_TOKEN), operator: "alice", readonly: false, organizations: ["*"] },
          ],
        },
      }),
    ).rejects.toMatchObject({ code: "console_insecure" });
  });
});

describe("the tokens file", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "leash-console-tokens-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("stores only hashes; a minted token authenticates as its operator, read-only kept", () => {
    const file = join(dir, "tokens.json");
    const alice = addConsoleToken(file, "alice", false, ["acme"]);
    const bob = addConsoleToken(file, "bob", true, ["acme", "globex"]);
    const text = readFileSync(file, "utf8");
    expect(text).not.toContain(alice);
    expect(text).not.toContain(bob);
    const tokens = loadConsoleTokens(file);
    expect(operatorOf(tokens, alice)).toEqual({
      id: "alice",
      readonly: false,
      organizations: ["acme"],
      token: tokenHash(alice),
    });
    expect(operatorOf(tokens, bob)).toMatchObject({
      id: "bob",
      readonly: true,
      organizations: ["acme", "globex"],
    });
    expect(operatorOf(tokens, `${alice}x`)).toBeNull();
    expect(operatorOf(tokens, "")).toBeNull();
  });

  it("refuses a malformed file with one line naming the problem", () => {
    const bad = (value: unknown) => () => parseConsoleTokens(JSON.stringify(value), "t.json");
    expect(bad({})).toThrow(/t.json needs a "tokens" array/);
    expect(bad({ tokens: [{ sha256: "abc", operator: "a" }] })).toThrow(/tokens\[0\]\.sha256/);
    expect(
      bad({ tokens: [{ sha256: "a".repeat(64), operator: "has space", organizations: ["acme"] }] }),
    ).toThrow(/operator/);
    // A token that names no organization is refused, never read as "every organization".
    for (const organizations of [undefined, [], [""], "acme"]) {
      expect(bad({ tokens: [{ sha256: "a".repeat(64), operator: "alice", organizations }] })).toThrow(
        'tokens[0].organizations must list the organizations the token may see and answer (e.g. ["acme"], or ["*"] for every one)',
      );
    }
    expect(() => parseConsoleTokens("{", "t.json")).toThrow(ConsoleConfigError);
    expect(() => loadConsoleTokens(join(dir, "absent.json"))).toThrow(/ENOENT/);
  });
});
