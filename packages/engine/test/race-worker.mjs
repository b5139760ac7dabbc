// Child process for the concurrency test: one engine on a store URL, racing the other workers.
// argv: storeUrl sessionsJson estimate. Prints one JSON line of everything it was told.
import { loadSigningKey } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { openPostgresSubstrate } from "@leash/substrate-postgres";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";

const [url, sessionsJson, estimate] = process.argv.slice(2);
const sessions = JSON.parse(sessionsJson);
let substrate;
if (url.startsWith("sqlite:")) substrate = await openSqliteSubstrate({ path: url.slice("sqlite:".length) });
else {
  const u = new URL(url);
  const schema = u.searchParams.get("schema");
  u.search = "";
  substrate = await openPostgresSubstrate({ url: u.toString(), schema, poolSize: 2 });
}
const engine = createEngine({ substrate, signer: loadSigningKey() });
const results = [];
for (const session_id of sessions) {
  const r = await engine.evaluate({
    session_id,
    tool_name: "pay",
    params: { to: "acct" },
    nonce: "n",
    estimated_cost_usd: Number(estimate),
  });
  if (r.verdict === "ALLOW")
    await engine.postExec({ session_id, call_number: r.call_number, actual_cost_usd: Number(estimate) });
  results.push([session_id, r.verdict, r.reason, r.call_number]);
}
await substrate.close();
process.stdout.write(`${JSON.stringify(results)}\n`);
