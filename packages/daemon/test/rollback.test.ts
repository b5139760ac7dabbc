// A restored older copy of the store is not served: the daemon checkpoints the head it signed in its
// state directory, refuses a store behind or forked from it naming both heads, and starts again once
// recover accepts the restore with a signed entry. Real SQLite files (copied) and PostgreSQL schemas
// (pg_dump, dropped, restored with psql).
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { generateKeyPair, parseEntryBody } from "@leash/chain";
import type { ChainEntryRecord } from "@leash/core";
import { createEngine, type Engine } from "@leash/engine";
import { recover, stateCheckpointStore } from "@leash/recovery";
import { freshLocation, PG_URL, type StoreLocation } from "@leash/test-stores";
import { afterEach, describe, expect, it } from "vitest";
import { type Daemon, parseDaemonConfig, startDaemon } from "../src/index.js";
import { configObject, quietLogger, scratchDir } from "./support.js";

const KEY = generateKeyPair();

let location: StoreLocation<"sqlite" | "postgres"> | undefined;
let daemon: Daemon | undefined;
afterEach(async () => {
  await daemon?.close();
  daemon = undefined;
  await location?.remove();
  location = undefined;
});

/** A copy of the store's data (the SQLite file, or a pg_dump of the schema) that `restore` puts back. */
function backup(loc: StoreLocation<"sqlite" | "postgres">): { restore(): void } {
  if (loc.path !== null) {
    const path = loc.path;
    const copy = `${path}.backup`;
    copyFileSync(path, copy);
    return {
      restore() {
        for (const suffix of ["-wal", "-shm"]) rmSync(`${path}${suffix}`, { force: true });
        copyFileSync(copy, path);
      },
    };
  }
  const schema = loc.schema!;
  const dump = join(loc.dir, "schema.sql");
  execFileSync("pg_dump", ["--dbname", PG_URL, "--schema", schema, "--file", dump]);
  return {
    restore() {
      execFileSync("psql", [
        "--dbname",
        PG_URL,
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-c",
        `DROP SCHEMA "${schema}" CASCADE`,
      ]);
      execFileSync("psql", ["--dbname", PG_URL, "-q", "-v", "ON_ERROR_STOP=1", "--file", dump]);
    },
  };
}

async function chainOf(loc: StoreLocation): Promise<ChainEntryRecord[]> {
  const substrate = await loc.open();
  try {
    return await substrate.transaction((tx) => tx.chain.range(0, 10_000));
  } finally {
    await substrate.close();
  }
}

/** Spends `usd` (a call held and settled) in session `s`. */
async function spend(engine: Engine, nonce: number, usd: string): Promise<string> {
  const r = await engine.evaluate({
    session_id: "s",
    tool_name: "pay",
    params: { nonce },
    nonce,
    estimated_cost_usd: usd,
  });
  if (r.verdict === "ALLOW") {
    await engine.postExec({ session_id: "s", call_number: r.call_number, actual_cost_usd: usd });
  }
  return r.verdict;
}

describe.each(["sqlite", "postgres"] as const)("a restored older %s store", (kind) => {
  const stateDir = scratchDir();
  const start = () =>
    startDaemon({
      config: parseDaemonConfig(configObject(stateDir)),
      signer: KEY.signer,
      store: location!.url!,
      socketPath: join(scratchDir(), "leash.sock"),
      logger: quietLogger(),
      stateDir,
    });

  it("is refused naming both heads; recover --accept-rollback records it in a signed entry, then it serves", async () => {
    location = freshLocation(kind, { label: "daemon" });
    daemon = await start();
    await daemon.engine.register({ agent_id: "bot", session_id: "s", config: { budget_usd: 1 } });
    expect(await spend(daemon.engine, 1, "0.6")).toBe("ALLOW");
    await daemon.close();
    const copy = backup(location);
    const backedUp = await chainOf(location);

    daemon = await start();
    expect(await spend(daemon.engine, 2, "0.4")).toBe("ALLOW");
    // The budget is exhausted now.
    expect(await spend(daemon.engine, 3, "0.1")).toBe("DENY");
    await daemon.close();
    daemon = undefined;
    const signed = await chainOf(location);
    const last = signed[signed.length - 1]!;

    copy.restore();
    const restoredHead = backedUp[backedUp.length - 1]!;
    const refusal = start();
    await expect(refusal).rejects.toThrow(
      `the store's chain is behind the last head checkpointed outside it: the store has no entry ${last.seq} (its head is entry ${restoredHead.seq} (${restoredHead.entry_hash})), the checkpoint's head`,
    );
    await expect(refusal).rejects.toThrow(`is entry ${last.seq} (${last.entry_hash})`);

    // Without the acceptance, recovery refuses it too.
    const checkpointStore = stateCheckpointStore(stateDir, location.url!)!;
    const substrate = await location.open();
    try {
      const refused = await recover(substrate, { publicKeys: [KEY.publicKeyHex], checkpointStore });
      expect(refused.ok).toBe(false);
      expect(refused.problems.map((p) => p.code)).toEqual(["chain_rolled_back"]);
      const accepted = await recover(substrate, {
        publicKeys: [KEY.publicKeyHex],
        signer: KEY.signer,
        checkpointStore,
        acceptRollback: { operatorId: "ops@example" },
      });
      expect(accepted.ok).toBe(true);
      expect(accepted.chain.rollback).toMatchObject({ kind: "behind", accepted_seq: restoredHead.seq + 1 });
    } finally {
      await substrate.close();
    }
    const after = await chainOf(location);
    const entry = after[restoredHead.seq + 1]!;
    const body = parseEntryBody(entry.body);
    expect(typeof body === "string" ? body : body.data).toEqual({
      operator_id: "ops@example",
      rollback: "behind",
      checkpoint_count: last.seq + 1,
      checkpoint_head_hash: last.entry_hash,
      store_count: restoredHead.seq + 1,
      store_head_hash: restoredHead.entry_hash,
    });
    expect(JSON.parse(readFileSync(checkpointStore.location, "utf8"))).toEqual({
      count: entry.seq + 1,
      head_hash: entry.entry_hash,
    });

    // Served again, from the restored state (the operator chose it): the acceptance is in the chain.
    daemon = await start();
    expect(await spend(daemon.engine, 4, "0.1")).toBe("ALLOW");
  }, 60_000);

  it("a chain forked from the checkpoint (the backup extended elsewhere) is refused", async () => {
    location = freshLocation(kind, { label: "daemon" });
    daemon = await start();
    await daemon.engine.register({ agent_id: "bot", session_id: "s", config: { budget_usd: 1 } });
    await daemon.close();
    const copy = backup(location);
    daemon = await start();
    expect(await spend(daemon.engine, 1, "0.5")).toBe("ALLOW");
    await daemon.close();
    daemon = undefined;
    const signed = await chainOf(location);

    // The backup, extended by a library-mode engine that keeps no checkpoint: as long, other entries.
    copy.restore();
    const substrate = await location.open();
    try {
      const other = createEngine({ substrate, signer: KEY.signer });
      expect(await spend(other, 7, "0.5")).toBe("ALLOW");
    } finally {
      await substrate.close();
    }
    const forked = await chainOf(location);
    expect(forked.length).toBe(signed.length);
    const at = signed.length - 1;
    await expect(start()).rejects.toThrow(
      `the store's chain forks from the last head checkpointed outside it: entry ${at} is ${forked[at]!.entry_hash} in the store`,
    );
  }, 60_000);

  it("the checkpoint follows the chain while the daemon runs, not only at shutdown", async () => {
    location = freshLocation(kind, { label: "daemon" });
    daemon = await start();
    await daemon.engine.register({ agent_id: "bot", session_id: "s", config: { budget_usd: 1 } });
    expect(await spend(daemon.engine, 1, "0.2")).toBe("ALLOW");
    const head = (await chainOf(location)).at(-1)!;
    const file = stateCheckpointStore(stateDir, location.url!)!.location;
    await expect
      .poll(() => (existsSync(file) ? JSON.parse(readFileSync(file, "utf8")) : null), { timeout: 10_000 })
      .toEqual({ count: head.seq + 1, head_hash: head.entry_hash });
  }, 60_000);
});
