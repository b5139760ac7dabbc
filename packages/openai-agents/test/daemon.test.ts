// Over the daemon (a real daemon in this process, real Unix socket and SQLite file, @leash/client): the
// agent's own state.approve() does not release a paused call — only an operator at the daemon can.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import { type Client, createClient } from "@leash/client";
import { type Daemon, parseDaemonConfig, startDaemon } from "@leash/daemon";
import { Agent, Runner, setTracingDisabled, tool } from "@openai/agents";
import { pino } from "pino";
import { afterEach, beforeAll, beforeEach, expect, it } from "vitest";
import { z } from "zod";
import { leashGuardrails, leashTool } from "../src/index.js";
import { LoopingModel, resultsIn } from "./scripted-model.js";

const HMAC = randomBytes(32);
const KEY = generateKeyPair();
let dir: string;
let daemon: Daemon;
let client: Client;

beforeAll(() => setTracingDisabled(true));
beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), "leash-agents-daemon-"));
  writeFileSync(join(dir, "acme-k1.hmac"), HMAC.toString("hex"), { mode: 0o600 });
  daemon = await startDaemon({
    config: parseDaemonConfig({
      organizations: {
        acme: {
          hmac_keys: { k1: { file: join(dir, "acme-k1.hmac") } },
          agents: { mailer: { guard: { hitl_mode: "always" } } },
        },
      },
    }),
    signer: KEY.signer,
    store: `sqlite:${join(dir, "leash.db")}`,
    socketPath: join(dir, "leash.sock"),
    logger: pino({ level: "silent" }),
  });
  client = createClient({
    socketPath: daemon.address,
    organizationId: "acme",
    agentId: "mailer",
    hmacKey: HMAC,
    keyId: "k1",
    daemonPublicKey: KEY.signer.publicKeyHex,
    // SQLite commits (fsync) on a shared host can take far longer than the 50 ms default.
    timeoutMs: 5000,
    controlTimeoutMs: 5000,
    heartbeatIntervalMs: 0,
  });
});

afterEach(async () => {
  client.close();
  await daemon.close();
  rmSync(dir, { recursive: true, force: true });
});

it("a paused call stays paused after state.approve(): the guardrail rejects it, the tool never runs", async () => {
  const { session_id } = await client.register({ framework: "openai-agents" });
  let sent = 0;
  const guardrails = leashGuardrails(client, { session_id });
  const sendEmail = leashTool(
    tool({
      name: "send_email",
      description: "Send an email",
      parameters: z.object({ to: z.string() }),
      execute: async () => {
        sent += 1;
        return "sent";
      },
    }),
    guardrails,
  );
  const model = new LoopingModel("send_email", { to: "bob@example.com" });
  const agent = new Agent({ name: "mailer", model, tools: [sendEmail] });
  const runner = new Runner({ tracingDisabled: true });
  const first = await runner.run(agent, "mail bob", { maxTurns: 4 });
  expect(first.interruptions).toHaveLength(1);
  const interruption = first.interruptions[0]!;
  // Over the daemon the client cannot name the request; the verdict and its receipt it can.
  expect(guardrails.pendingRequest(interruption)).toMatchObject({
    request_id: null,
    reason: "hitl_all_calls",
    receipt: expect.any(String),
  });

  first.state.approve(interruption);
  const second = await runner.run(agent, first.state, { maxTurns: 4 });
  expect(sent).toBe(0);
  const shown = resultsIn(model.requests.at(-1)!.input);
  expect(shown).toHaveLength(1);
  expect(shown[0]).toMatch(/Leash paused send_email: .*\(hitl_all_calls\); the tool did not run/);
  expect(second.finalOutput).toBe("Stopping: Leash denied the call.");
});
