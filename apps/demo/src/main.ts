#!/usr/bin/env node
// `pnpm demo`: a scripted agent under Leash in library mode on the embedded SQLite store, then an audit.
// It needs no setup and leaves nothing behind but a temporary directory; it is not a test.
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair, verifyChain } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { createEngine } from "@leash/engine";
import { verifyReceipt } from "@leash/receipts";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";
import Database from "better-sqlite3";
import { budget, replay, retryLoop, type Step } from "./scenarios.js";
import { table } from "./table.js";

const out = (line = "") => process.stdout.write(`${line}\n`);

async function readChain(substrate: Substrate): Promise<ChainEntryRecord[]> {
  return substrate.transaction((tx) => tx.chain.range(0, Number.MAX_SAFE_INTEGER));
}

async function main(): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "leash-demo-"));
  const path = join(dir, "leash.db");
  try {
    const substrate = await openSqliteSubstrate({ path });
    await substrate.migrate();
    // A demo key lives only in this process; a real deployment loads one (`leash keygen`).
    const key = generateKeyPair();
    const engine = createEngine({ substrate, signer: key.signer });
    out(`Leash demo — library mode, SQLite store ${path}`);
    out(`signing key ${key.signer.keyId} (ephemeral, demo only), public key ${key.signer.publicKeyHex}`);

    const steps: Step[] = [];
    let scenario = "";
    const report = (step: Step) => {
      if (step.scenario !== scenario) {
        scenario = step.scenario;
        out();
        out(`── ${scenario} ${"─".repeat(Math.max(0, 60 - scenario.length))}`);
      }
      steps.push(step);
      const { verdict, reason, budget_remaining_usd } = step.result;
      const left =
        budget_remaining_usd === null ? "" : `  (budget left $${Number(budget_remaining_usd).toFixed(2)})`;
      out(
        `  ${step.label.padEnd(30)} ${verdict.padEnd(5)} ${reason.padEnd(34)}${step.note ? ` ${step.note}` : ""}${left}`,
      );
    };
    await retryLoop(engine, report);
    await budget(engine, report);
    await replay(engine, report);

    out();
    out("── audit ─────────────────────────────────────────────────────────");
    const entries = await readChain(substrate);
    const verified = await verifyChain(entries, { publicKeys: [key.signer.publicKeyHex] });
    if (!verified.ok) {
      out(`  chain FAILED to verify at entry ${verified.failure.index}: ${verified.failure.kind}`);
      return 1;
    }
    out(`  chain verified: ${verified.count} signed entries, head ${verified.head_hash.slice(0, 16)}…`);

    const counts = new Map<string, number>();
    for (const e of entries) {
      if (e.kind !== "decision") continue;
      const { verdict, reason } = JSON.parse(e.body).data as { verdict: string; reason: string };
      counts.set(`${verdict}\u0000${reason}`, (counts.get(`${verdict}\u0000${reason}`) ?? 0) + 1);
    }
    out();
    for (const line of table(
      ["verdict", "reason", "decisions"],
      [...counts].sort().map(([k, n]) => [...k.split("\u0000"), String(n)]),
    ))
      out(`  ${line}`);

    let good = 0;
    for (const step of steps)
      if ((await verifyReceipt(step.result.receipt ?? "", key.signer.publicKeyHex)).ok) good++;
    const forged = (steps[0]!.result.receipt ?? "").replace(
      /\.(.)/,
      (_, c: string) => `.${c === "e" ? "f" : "e"}`,
    );
    const rejected = !(await verifyReceipt(forged, key.signer.publicKeyHex)).ok;
    out();
    out(
      `  receipts: ${good} of ${steps.length} verified offline with the public key; an edited receipt was ${rejected ? "rejected" : "ACCEPTED (bug)"}`,
    );

    // What an auditor would see if someone edited the log afterwards: a copy, one verdict rewritten.
    await substrate.close();
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
      publicKeys: [key.signer.publicKeyHex],
    });
    await tamperedStore.close();
    out(
      tampered.ok
        ? "  a tampered copy VERIFIED (bug)"
        : `  a copy with one DENY rewritten to ALLOW fails verification at seq ${tampered.failure.seq}: ${tampered.failure.kind}`,
    );
    return good === steps.length && rejected && !tampered.ok ? 0 : 1;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`leash demo: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  },
);
