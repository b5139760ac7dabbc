#!/usr/bin/env node
// `pnpm demo`: scripted agents under Leash in library mode on the embedded SQLite store, an audit, and
// an HTML report. It needs no setup; it leaves the report behind (nothing else); it is not a test.
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { generateKeyPair, type VerifyChainResult, verifyChain } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { createEngine } from "@leash/engine";
import { verifyReceipt } from "@leash/receipts";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";
import Database from "better-sqlite3";
import { countKinds, describeConfig, describeKind, entriesSentence, explainReason } from "./explain.js";
import { type AgentReport, type ReportData, renderReport, type SpendPoint } from "./report.js";
import { type Agent, type Narrator, SCENES, type Step } from "./scenarios.js";
import { table } from "./table.js";

const out = (line = "") => process.stdout.write(`${line}\n`);

const USAGE = `usage: pnpm demo [--report FILE | --no-report]

Plays four scripted agents under Leash (library mode, a temporary SQLite store), audits the chain,
and writes an HTML report that opens offline (default ./leash-demo-report.html).`;

const TRY_NEXT: Array<[string, string]> = [
  ["(cd apps/cli && npm link)", "the `leash` command on your PATH: this clone's CLI (the README's Set up)"],
  [
    "mkdir -p /tmp/leash-try && leash keygen --out /tmp/leash-try/demo.key",
    "a signing key of your own, outside the working tree (the demo's dies with it)",
  ],
  [
    'export LEASH_STORE=sqlite:/tmp/leash-try/try.db LEASH_SIGNING_KEY="$(cat /tmp/leash-try/demo.key)"',
    "the store and the key every command below uses",
  ],
  ["leash session create --agent me --session s1 --budget 1 --max-repeat 3", "a guarded session"],
  [
    'leash evaluate --session s1 --tool search --params \'{"q":"x"}\' --nonce 1 --estimate 0.1',
    "ask Leash about one call; run it again with the same nonce: a replay, refused",
  ],
  ["leash tail --follow", "watch verdicts as they happen (in another terminal, with the same exports)"],
  ["leash sessions list", "every session, its status and its budget left"],
  ["leash verify --pubkey /tmp/leash-try/demo.pub.hex", "check the whole signed chain yourself"],
];

/** Splits text into lines of at most `width` characters, at spaces. */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === "" ? word : `${line} ${word}`;
  }
  if (line !== "") lines.push(line);
  return lines;
}

async function readChain(substrate: Substrate): Promise<ChainEntryRecord[]> {
  return substrate.transaction((tx) => tx.chain.range(0, Number.MAX_SAFE_INTEGER));
}

const dataOf = (e: ChainEntryRecord) => (JSON.parse(e.body) as { data: Record<string, unknown> }).data;

/** Budget used (spent or held) after each of a session's entries, read from the chain itself. */
function spendSeries(entries: readonly ChainEntryRecord[], sessionId: string, budget: number): SpendPoint[] {
  const points: SpendPoint[] = [];
  for (const e of entries) {
    if (e.session_id !== sessionId) continue;
    if (e.kind === "session_registered")
      points.push({ seq: e.seq, used: 0, verdict: null, label: "registered" });
    if (e.kind !== "decision" && e.kind !== "post_exec") continue;
    const data = dataOf(e);
    if (typeof data.budget_after_usd !== "string") continue;
    const used = budget - Number(data.budget_after_usd);
    points.push(
      e.kind === "decision"
        ? { seq: e.seq, used, verdict: String(data.verdict), label: `call ${String(data.call_number)}` }
        : { seq: e.seq, used, verdict: null, label: `call ${String(data.call_number)} settled` },
    );
  }
  return points;
}

/** Bad command-line arguments: one line on stderr, exit 2, nothing run. */
class UsageError extends Error {}

function parseArgs(argv: readonly string[]): { report: string | null } | "help" {
  let report: string | null = "leash-demo-report.html";
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--help" || arg === "-h") return "help";
    if (arg === "--no-report") report = null;
    else if (arg === "--report") {
      const value = argv[++i];
      if (value === undefined || value === "") throw new UsageError("--report needs a file name");
      report = value;
    } else throw new UsageError(`unknown argument ${JSON.stringify(arg)} (see --help)`);
  }
  return { report: report === null ? null : resolve(report) };
}

/** The narrator that prints each scene, agent and step, and keeps them for the report. */
function consoleNarrator(steps: Step[], agents: Array<Agent & { scene: string }>): Narrator {
  let scene = "";
  let explained = new Set<string>();
  return {
    scene(title, story) {
      scene = title;
      explained = new Set();
      out();
      out(`── ${title} ${"─".repeat(Math.max(0, 66 - title.length))}`);
      for (const line of wrap(story, 96)) out(`  ${line}`);
    },
    introduce(agent) {
      agents.push({ ...agent, scene });
      out();
      out(`  Meet ${agent.agent_id}: ${agent.role}. Its guard config says it`);
      for (const line of describeConfig(agent.config)) out(`    · ${line}`);
      out(`    (${JSON.stringify(agent.config)})`);
      out();
    },
    step(step) {
      steps.push(step);
      const { verdict, reason, budget_remaining_usd } = step.result;
      const left =
        budget_remaining_usd === null ? "" : `  (budget left $${Number(budget_remaining_usd).toFixed(2)})`;
      out(
        `  ${step.label.padEnd(30)} ${verdict.padEnd(5)} ${reason.padEnd(34)}${step.note ? ` ${step.note}` : ""}${left}`,
      );
      // Each reason in plain words the first time it appears in a scene.
      if (!explained.has(reason)) {
        explained.add(reason);
        out(`  ${"".padEnd(30)} ↳ ${explainReason(reason)}`);
      }
    },
    aside(text) {
      out(`  … ${text}`);
    },
  };
}

/** Prints the entry kinds and the decisions by verdict and reason; returns the latter, sorted. */
function printEntries(
  entries: readonly ChainEntryRecord[],
): Array<{ verdict: string; reason: string; count: number }> {
  const kinds = entries.map((e) => e.kind);
  out(`  ${entriesSentence(kinds)}`);
  for (const line of table(
    ["entry kind", "entries", "what one records"],
    countKinds(kinds).map(([kind, n]) => [kind, String(n), describeKind(kind)]),
  ))
    out(`    ${line}`);

  const counts = new Map<string, number>();
  for (const e of entries) {
    if (e.kind !== "decision") continue;
    const { verdict, reason } = dataOf(e) as { verdict: string; reason: string };
    counts.set(`${verdict}\u0000${reason}`, (counts.get(`${verdict}\u0000${reason}`) ?? 0) + 1);
  }
  const verdicts = [...counts].sort().map(([k, count]) => {
    const [verdict, reason] = k.split("\u0000") as [string, string];
    return { verdict, reason, count };
  });
  out();
  for (const line of table(
    ["verdict", "reason", "decisions", "in plain words"],
    verdicts.map((v) => [v.verdict, v.reason, String(v.count), explainReason(v.reason)]),
  ))
    out(`  ${line}`);
  return verdicts;
}

/** Verifies every step's receipt offline, and that an edited one is rejected; prints the count. */
async function checkReceipts(
  steps: readonly Step[],
  publicKeyHex: string,
): Promise<{ checked: Array<Step & { receiptOk: boolean }>; good: number; rejected: boolean }> {
  const checked: Array<Step & { receiptOk: boolean }> = [];
  for (const step of steps) {
    const receiptOk = (await verifyReceipt(step.result.receipt ?? "", publicKeyHex)).ok;
    checked.push({ ...step, receiptOk });
  }
  const good = checked.filter((s) => s.receiptOk).length;
  const forged = (steps[0]!.result.receipt ?? "").replace(
    /\.(.)/,
    (_, c: string) => `.${c === "e" ? "f" : "e"}`,
  );
  const rejected = !(await verifyReceipt(forged, publicKeyHex)).ok;
  out();
  out(
    `  receipts: ${good} of ${steps.length} verified offline with the public key; an edited receipt was ${rejected ? "rejected" : "ACCEPTED (bug)"}`,
  );
  return { checked, good, rejected };
}

/**
 * What an auditor would see if someone edited the log afterwards: a copy of the (closed) store with
 * one DENY rewritten to ALLOW, verified again. Prints the outcome.
 */
async function tamperedCopy(
  dir: string,
  path: string,
  publicKeyHex: string,
): Promise<{ victim: { seq: number }; tampered: VerifyChainResult }> {
  const copy = join(dir, "tampered.db");
  copyFileSync(path, copy);
  const db = new Database(copy);
  const victim = db
    .prepare(
      "SELECT seq FROM leash_chain WHERE kind = 'decision' AND body LIKE '%\"DENY\"%' ORDER BY seq LIMIT 1",
    )
    .get() as { seq: number };
  db.prepare("UPDATE leash_chain SET body = replace(body, '\"DENY\"', '\"ALLOW\"') WHERE seq = ?").run(
    victim.seq,
  );
  db.close();
  const tamperedStore = await openSqliteSubstrate({ path: copy });
  const tampered = await verifyChain(await readChain(tamperedStore), {
    publicKeys: [publicKeyHex],
  });
  await tamperedStore.close();
  out(
    tampered.ok
      ? "  a tampered copy VERIFIED (bug)"
      : `  a copy with one DENY rewritten to ALLOW fails verification at seq ${tampered.failure.seq}: ${tampered.failure.kind}`,
  );
  return { victim, tampered };
}

function printTryNext(): void {
  out();
  out("── What to try next ────────────────────────────────────────────────");
  for (const [command, why] of TRY_NEXT) out(`  ${command}\n      ${why}`);
  out("  README.md: the CLI, library mode, the daemon and its clients; docs/architecture.md: how it works.");
}

/** Each agent of the report: its scene, config in plain words, budget, and spend over the chain. */
function agentReports(
  agents: ReadonlyArray<Agent & { scene: string }>,
  steps: readonly Step[],
  entries: readonly ChainEntryRecord[],
): AgentReport[] {
  return agents.map((agent): AgentReport => {
    const sessionId = steps.find((s) => s.agent_id === agent.agent_id)?.session_id ?? "";
    const budget = typeof agent.config.budget_usd === "number" ? agent.config.budget_usd : null;
    return {
      scene: agent.scene,
      agent,
      plainConfig: describeConfig(agent.config),
      budget,
      series: spendSeries(entries, sessionId, budget ?? 0),
    };
  });
}

async function main(argv: readonly string[]): Promise<number> {
  const args = parseArgs(argv);
  if (args === "help") {
    out(USAGE);
    return 0;
  }
  const dir = mkdtempSync(join(tmpdir(), "leash-demo-"));
  const path = join(dir, "leash.db");
  try {
    const substrate = await openSqliteSubstrate({ path });
    await substrate.migrate();
    // A demo key lives only in this process; a real deployment loads one (`leash keygen`).
    const key = generateKeyPair();
    const engine = createEngine({ substrate, signer: key.signer });
    out("Leash demo — four scripted agents call tools; before every call Leash answers ALLOW, DENY or HITL");
    out("(ask a human), and signs each answer into a hash-chained audit log. Library mode, SQLite store:");
    out(`  ${path}`);
    out(`signing key ${key.signer.keyId} (ephemeral, demo only)`);

    const steps: Step[] = [];
    const agents: Array<Agent & { scene: string }> = [];
    const narrator = consoleNarrator(steps, agents);
    for (const play of SCENES) await play(engine, narrator);

    out();
    out("── The audit ───────────────────────────────────────────────────────");
    const entries = await readChain(substrate);
    const verified = await verifyChain(entries, { publicKeys: [key.signer.publicKeyHex] });
    if (!verified.ok) {
      out(`  chain FAILED to verify at entry ${verified.failure.index}: ${verified.failure.kind}`);
      return 1;
    }
    out(`  chain verified: ${verified.count} signed entries, head ${verified.head_hash.slice(0, 16)}…`);
    const verdicts = printEntries(entries);
    const { checked, good, rejected } = await checkReceipts(steps, key.signer.publicKeyHex);
    await substrate.close();
    const { victim, tampered } = await tamperedCopy(dir, path, key.signer.publicKeyHex);
    printTryNext();

    if (args.report !== null) {
      const kinds = entries.map((e) => e.kind);
      const data: ReportData = {
        generatedAt: new Date().toISOString(),
        keyId: key.signer.keyId,
        publicKeyHex: key.signer.publicKeyHex,
        agents: agentReports(agents, steps, entries),
        steps: checked,
        verdicts,
        entryKinds: countKinds(kinds),
        entriesSentence: entriesSentence(kinds),
        chain: { ok: true, count: verified.count, headHash: verified.head_hash },
        tampered: {
          seq: victim.seq,
          failsAt: tampered.ok ? null : tampered.failure.seq,
          kind: tampered.ok ? null : tampered.failure.kind,
        },
        forgedRejected: rejected,
        tryNext: TRY_NEXT,
      };
      writeFileSync(args.report, renderReport(data));
      out();
      out(`Report (one HTML file, works offline): ${args.report}`);
    }
    return good === steps.length && rejected && !tampered.ok ? 0 : 1;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`leash demo: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = error instanceof UsageError ? 2 : 1;
  },
);
