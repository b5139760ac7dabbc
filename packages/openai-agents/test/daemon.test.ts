// The Agents SDK's real Runner over a real `leash serve` process (Unix socket, SQLite file, HITL console)
// through @leash/client: the daemon's repeat guard stops a looping model; a paused call's interruption names
// the daemon's request, and only an operator's answer at the daemon (`leash hitl approve --console`) releases it.
import { type Client, createClient } from "@leash/client";
import { type ServeFixture, type ServeFixtureOptions, startServeFixture } from "@leash/test-stores";
import { Agent, Runner, setTracingDisabled, tool } from "@openai/agents";
import { afterEach, beforeAll, expect, it } from "vitest";
import { z } from "zod";
import { leashGuardrails, leashTool } from "../src/index.js";
import { LoopingModel, resultsIn } from "./scripted-model.js";

let daemon: ServeFixture | undefined;
let client: Client | undefined;

beforeAll(() => setTracingDisabled(true));
afterEach(async () => {
  client?.close();
  client = undefined;
  await daemon?.remove();
  daemon = undefined;
});

/** A daemon with `agents`, and a client of its agent `agentId` registered with it. */
async function connect(agentId: string, options: ServeFixtureOptions) {
  daemon = await startServeFixture(options);
  client = createClient({
    socketPath: daemon.socketPath,
    organizationId: daemon.organizationId,
    agentId,
    hmacKey: daemon.hmacKey,
    keyId: daemon.keyId,
    daemonPublicKey: daemon.publicKeyHex,
    // SQLite commits (fsync) on a shared host can take far longer than the 50 ms default.
    timeoutMs: 5000,
    controlTimeoutMs: 5000,
    heartbeatIntervalMs: 0,
  });
  const { session_id } = await client.register({ framework: "openai-agents" });
  return { daemon, client, session_id };
}

/** send_email wrapped by Leash; `sent` lists every address it really mailed. */
function mailer(guardrails: ReturnType<typeof leashGuardrails>) {
  const sent: string[] = [];
  const sendEmail = leashTool(
    tool({
      name: "send_email",
      description: "Send an email",
      parameters: z.object({ to: z.string() }),
      execute: async ({ to }) => {
        sent.push(to);
        return "sent";
      },
    }),
    guardrails,
  );
  const model = new LoopingModel("send_email", { to: "bob@example.com" });
  return { sent, model, agent: new Agent({ name: "mailer", model, tools: [sendEmail] }) };
}

it("the tool runs until the daemon denies the repeat; the rejection reaches the model; the chain verifies", async () => {
  const { daemon, client, session_id } = await connect("agents-bot", {
    agents: { "agents-bot": { guard: { budget_usd: 1, max_repeat_calls: 3 } } },
  });
  const ran: string[] = [];
  const guardrails = leashGuardrails(client, { session_id, estimate: "0.1", cost: () => "0.03" });
  const search = leashTool(
    tool({
      name: "search",
      description: "Search the web",
      parameters: z.object({ q: z.string() }),
      execute: async ({ q }) => {
        ran.push(q);
        return "no results";
      },
    }),
    guardrails,
  );
  const model = new LoopingModel("search", { q: "pricing" });
  const agent = new Agent({ name: "researcher", model, tools: [search] });
  const result = await new Runner({ tracingDisabled: true }).run(agent, "find the pricing", { maxTurns: 8 });

  expect(ran).toEqual(["pricing", "pricing", "pricing"]);
  expect(result.finalOutput).toBe("Stopping: Leash denied the call.");
  const shown = resultsIn(model.requests[4]!.input);
  expect(shown).toHaveLength(4);
  expect(shown[3]).toContain("Leash denied search");
  expect(shown[3]).toContain("(max_repeat_exceeded)");
  const rejected = result.state._toolInputGuardrailResults.filter(
    (g) => g.output.behavior.type === "rejectContent",
  );
  expect(rejected.map((g) => g.output.outputInfo)).toMatchObject([
    { leash: { verdict: "DENY", reason: "max_repeat_exceeded", receipt: expect.any(String) } },
  ]);

  client.close();
  await daemon.stop();
  const verified = await daemon.verify();
  expect(verified.stdout).toMatch(/^OK: \d+ entries verified/);
  expect(verified.code).toBe(0);
  const entries = await daemon.entries();
  expect(entries.filter((e) => e.kind === "decision").map((e) => e.data.reason)).toEqual([
    "within_thresholds",
    "within_thresholds",
    "within_thresholds",
    "max_repeat_exceeded",
  ]);
  // The output guardrail settled each allowed call at the tool's actual cost.
  expect(entries.filter((e) => e.kind === "post_exec").map((e) => e.data.actual_usd)).toEqual([
    "0.03",
    "0.03",
    "0.03",
  ]);
}, 60_000);

it("a paused call stays paused after state.approve() alone: the guardrail rejects it, the tool never runs", async () => {
  const { daemon, client, session_id } = await connect("mailer", {
    agents: { mailer: { guard: { hitl_mode: "always" } } },
    console: true,
  });
  const guardrails = leashGuardrails(client, { session_id });
  const { sent, model, agent } = mailer(guardrails);
  const runner = new Runner({ tracingDisabled: true });
  const first = await runner.run(agent, "mail bob", { maxTurns: 4 });
  expect(first.interruptions).toHaveLength(1);
  const interruption = first.interruptions[0]!;
  const request = guardrails.pendingRequest(interruption);
  expect(request).toMatchObject({ reason: "hitl_all_calls", receipt: expect.any(String) });
  expect(request?.request_id).toMatch(/\S/);

  // The agent's own approval is no operator's: the daemon pauses the call again, and the guardrail
  // rejects it naming the request that now waits (the re-dispatch superseded the first one).
  first.state.approve(interruption);
  const second = await runner.run(agent, first.state, { maxTurns: 4 });
  expect(sent).toEqual([]);
  expect(second.finalOutput).toBe("Stopping: Leash denied the call.");
  const rejected = second.state._toolInputGuardrailResults.filter(
    (g) => g.output.behavior.type === "rejectContent",
  );
  expect(rejected).toHaveLength(1);
  const info = rejected[0]!.output.outputInfo as { leash: { reason: string; request_id: string } };
  expect(info.leash.reason).toBe("hitl_all_calls");
  const shown = resultsIn(model.requests.at(-1)!.input);
  expect(shown).toHaveLength(1);
  expect(shown[0]).toContain(
    `Leash paused send_email: every call in this session needs a human's approval (hitl_all_calls); ` +
      `the tool did not run. Request ${info.leash.request_id} waits for a human's decision.`,
  );
  const pending = await daemon.cli([
    ...["hitl", "list", "--status", "pending"],
    ...["--console", daemon.consoleUrl!, "--token-file", daemon.operatorTokenFile!],
  ]);
  expect(pending.stdout).toMatch(
    new RegExp(`^${info.leash.request_id}  pending   send_email  session ${session_id} call 2 `, "m"),
  );
}, 60_000);

it("HITL: the interruption carries the daemon's request; an operator approves it at the daemon; the call runs once", async () => {
  const { daemon, client, session_id } = await connect("mailer", {
    agents: { mailer: { guard: { hitl_mode: "always" } } },
    console: true,
  });
  const guardrails = leashGuardrails(client, { session_id });
  const { sent, agent } = mailer(guardrails);
  const runner = new Runner({ tracingDisabled: true });
  const first = await runner.run(agent, "mail bob", { maxTurns: 4 });
  expect(sent).toEqual([]);
  expect(first.interruptions).toHaveLength(1);
  const interruption = first.interruptions[0]!;
  const requestId = guardrails.pendingRequest(interruption)?.request_id;

  // The operator sees that very request in the daemon's queue and approves it there.
  const console = ["--console", daemon.consoleUrl!, "--token-file", daemon.operatorTokenFile!];
  const listed = await daemon.cli(["hitl", "list", "--status", "pending", ...console]);
  expect([listed.code, listed.stderr]).toEqual([0, ""]);
  expect(listed.stdout.trim().split("\n")).toHaveLength(1);
  expect(listed.stdout).toMatch(
    new RegExp(`^${requestId}  pending   send_email  session ${session_id} call 1 `),
  );
  const approved = await daemon.cli(["hitl", "approve", requestId!, ...console, "--comment", "bob is known"]);
  expect([approved.code, approved.stderr]).toEqual([0, ""]);
  expect(JSON.parse(approved.stdout)).toMatchObject({
    request_id: requestId,
    decision: "approve",
    operator_id: "alice",
  });

  // The agent resumes its run: the approved call runs exactly once; the looping model's next call pauses again.
  first.state.approve(interruption);
  const second = await runner.run(agent, first.state, { maxTurns: 4 });
  expect(sent).toEqual(["bob@example.com"]);
  expect(second.interruptions).toHaveLength(1);
  const next = guardrails.pendingRequest(second.interruptions[0]!)?.request_id;
  expect(next).toMatch(/\S/);
  expect(next).not.toBe(requestId);

  client.close();
  await daemon.stop();
  const verified = await daemon.verify();
  expect(verified.code).toBe(0);
  const trail = (await daemon.entries())
    .filter((e) => e.kind === "decision" || e.kind === "hitl_decision")
    .map((e) => [e.kind, e.data.reason ?? e.data.decision, e.data.operator_id ?? null]);
  expect(trail).toEqual([
    ["decision", "hitl_all_calls", null],
    ["hitl_decision", "approve", "alice"],
    ["decision", "hitl_transition:approve", null],
    ["decision", "hitl_all_calls", null],
  ]);
}, 60_000);
