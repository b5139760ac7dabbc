// Child process for the crash tests, killed with SIGKILL at a random moment: an engine under load, or a relay.
// It checks nothing; the test judges what the store and the files hold after the kill. Imports built dist.
//
// argv: engine STORE_URL OPTIONS_JSON — 8 concurrent callers evaluate in a loop; after each evaluate
//         resolves, one line {"seq","hash","verdict"} goes to stdout synchronously (what a client got).
//       relay STORE_URL OPTIONS_JSON — a relay into an NDJSON file sink; with {"drain":true} it exits
//         once the outbox has nothing PENDING, otherwise it runs its loop until killed. After each batch
//         the sink has written (fsynced, not yet acknowledged), one line {"batch":n} goes to stdout.
// The signing key comes from LEASH_SIGNING_KEY.
import { writeSync } from "node:fs";
import { loadSigningKey } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { createRelay, openFileSink } from "@leash/relay";
import { openPostgresSubstrate } from "@leash/substrate-postgres";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";

const [mode, url, optionsJson] = process.argv.slice(2);
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

async function openStore(storeUrl) {
  if (storeUrl.startsWith("sqlite:")) return openSqliteSubstrate({ path: storeUrl.slice("sqlite:".length) });
  const u = new URL(storeUrl);
  const schema = u.searchParams.get("schema");
  u.search = "";
  return openPostgresSubstrate({ url: u.toString(), schema, poolSize: 4 });
}

const substrate = await openStore(url);

if (mode === "engine") {
  const engine = createEngine({
    substrate,
    signer: loadSigningKey(),
    reservationTtlMs: options.reservationTtlMs,
  });
  const sessions = [];
  for (let k = 0; k < options.sessions; k++) {
    // Registering an existing id resumes it: every restart works on the same sessions.
    const view = await engine.register({
      agent_id: "crash-agent",
      session_id: `crash-s${k}`,
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
          nonce: `${process.pid}:${c}:${i}`,
          estimated_cost_usd: 0.01,
        });
      } catch (error) {
        process.stderr.write(`evaluate failed: ${error?.stack ?? error}\n`);
        continue;
      }
      emit(JSON.stringify({ seq: r.entry_seq, hash: r.entry_hash, verdict: r.verdict }));
      // Half the ALLOWs report back; the other half leave their hold to expire (a crashed agent).
      try {
        if (r.verdict === "ALLOW" && i % 2 === 0) {
          await engine.postExec({ session_id, call_number: r.call_number, actual_cost_usd: 0.005 });
        }
        if (i % 50 === 0) await engine.heartbeat(session_id);
      } catch (error) {
        process.stderr.write(`postExec/heartbeat failed: ${error?.stack ?? error}\n`);
      }
    }
  };
  await Promise.all(Array.from({ length: options.callers ?? 8 }, (_, c) => caller(c)));
} else if (mode === "relay") {
  const file = await openFileSink({ path: options.file });
  let batches = 0;
  // The file sink itself, plus a progress line the test times its kill by.
  const sink = {
    specificationVersion: file.specificationVersion,
    name: file.name,
    deliver: async (batch) => {
      const result = await file.deliver(batch);
      emit(JSON.stringify({ batch: ++batches }));
      return result;
    },
  };
  const relay = createRelay({
    substrate,
    sink,
    relayId: options.relayId,
    batchSize: options.batchSize,
    leaseMs: options.leaseMs,
    pollMs: 10,
    backoff: { baseMs: 10, maxMs: 100 },
    onError: (error) => process.stderr.write(`relay: ${error?.stack ?? error}\n`),
  });
  emit(JSON.stringify({ ready: true }));
  if (options.drain) {
    for (;;) {
      const round = await relay.runOnce();
      if (round.claimed > 0) continue;
      const counts = await substrate.transaction((tx) => tx.outbox.counts());
      if (counts.PENDING === 0) break;
      // Items still leased by a killed relay: wait for their leases to run out.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await file.close();
    await substrate.close();
    emit(JSON.stringify({ drained: true }));
  } else {
    relay.start();
  }
} else {
  throw new Error(`unknown mode ${mode}`);
}
