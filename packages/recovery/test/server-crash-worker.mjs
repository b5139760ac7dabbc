// Child process for server-crash.test.ts: an engine under load on a PostgreSQL server the test will SIGKILL.
// It checks nothing; it reports what its callers were told, and ends once the server is gone. Imports built dist.
//
// argv: STORE_URL OPTIONS_JSON — OPTIONS_JSON: {"tag", "callers", "sessions", "reservationTtlMs",
// "groupCommit"} (groupCommit as openPostgresSubstrate takes it; absent: the default). It loads its modules,
// then waits for one stdin line {"schema"} (so it can boot while the server restarts; stdin closed without
// one: it exits). Prints {"ready":true} once its sessions exist, then one line "entry_seq entry_hash verdict" per evaluate that resolved, written
// synchronously before the caller goes on (what a client was told). A caller stops at its first failure
// (the server died); once all have, the process prints {"stats"} (the substrate's counters) and exits. The signing key comes from LEASH_SIGNING_KEY.
import { writeSync } from "node:fs";
import { createInterface } from "node:readline";
import { loadSigningKey } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { openPostgresSubstrate } from "@leash/substrate-postgres";

const [url, optionsJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson ?? "{}");

/** fs.writeSync on a pipe can meet EAGAIN when the reader lags; a line must still go out whole. */
function emit(line) {
  const data = Buffer.from(`${line}\n`);
  let offset = 0;
  while (offset < data.length) {
    try {
      offset += writeSync(1, data, offset);
    } catch (error) {
      if (error.code !== "EAGAIN") throw error;
    }
  }
}

let go;
for await (const line of createInterface({ input: process.stdin })) {
  go = JSON.parse(line);
  break;
}
if (go === undefined) process.exit(0);
const { schema } = go;

const substrate = await openPostgresSubstrate({
  url,
  schema,
  poolSize: 4,
  ...(options.groupCommit === undefined ? {} : { groupCommit: options.groupCommit }),
});
const engine = createEngine({
  substrate,
  signer: loadSigningKey(),
  reservationTtlMs: options.reservationTtlMs,
});
const sessions = [];
for (let k = 0; k < (options.sessions ?? 4); k++) {
  const view = await engine.register({
    agent_id: `agent-${options.tag}`,
    session_id: `${options.tag}-s${k}`,
    config: { budget_usd: 1_000_000 },
  });
  sessions.push(view.session_id);
}
emit(JSON.stringify({ ready: true }));

const caller = async (c) => {
  for (let i = 0; ; i++) {
    const session_id = sessions[(c + i) % sessions.length];
    let r;
    try {
      r = await engine.evaluate({
        session_id,
        tool_name: `tool${i % 7}`,
        params: { c, i },
        nonce: `${options.tag}:${c}:${i}`,
        estimated_cost_usd: 0.01,
      });
    } catch {
      return;
    }
    emit(`${r.entry_seq} ${r.entry_hash} ${r.verdict}`);
    // Half the ALLOWs report back; the other half leave their hold for recovery to expire.
    if (r.verdict === "ALLOW" && i % 2 === 0) {
      try {
        await engine.postExec({ session_id, call_number: r.call_number, actual_cost_usd: 0.005 });
      } catch {
        return;
      }
    }
  }
};
await Promise.all(Array.from({ length: options.callers ?? 8 }, (_, c) => caller(c)));
// For the test to tell which commit path ran (earlyLockReleases). The pool's connections are dead with
// the server; nothing is left to close cleanly.
emit(JSON.stringify({ stats: substrate.stats }));
process.exit(0);
