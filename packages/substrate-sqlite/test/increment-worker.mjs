// Child process for multiprocess.test.ts: migrates, then increments one shared account, and appends to the
// shared chain entries that spend shared nonces. It asserts nothing; it prints what it saw as JSON and the parent checks the totals. Runs the built dist.
import { createHash } from "node:crypto";
import { openSqliteSubstrate } from "../dist/index.js";

const [path, transactionsArg, callersArg, startAtArg] = process.argv.slice(2);
const transactions = Number(transactionsArg);
const callers = Number(callersArg);
const NS = 1_000_000_000_000_000;

const substrate = await openSqliteSubstrate({ path });
await substrate.migrate();

// Every worker tries to create the account; exactly one insert wins, the others get "conflict".
let created = false;
try {
  await substrate.transaction((tx) =>
    tx.budgets.insertAccount({
      account_id: "shared",
      scope: "organization",
      parent_id: null,
      limit_usd: "1000",
      spent_usd: "0",
      reserved_usd: "0",
      created_ns: NS,
      updated_ns: NS,
    }),
  );
  created = true;
} catch (error) {
  if (error?.code !== "conflict") throw error;
}

// Start the race together (wall clock agreed with the parent), or one process could finish before the next boots.
await new Promise((resolve) => setTimeout(resolve, Math.max(0, Number(startAtArg ?? 0) - Date.now())));

let next = 0;
let nonceWins = 0;
async function caller() {
  while (next < transactions) {
    const i = next++;
    const won = await substrate.transaction(async (tx) => {
      const account = await tx.budgets.getAccount("shared");
      // Give the other processes every chance to interleave between the read and the write.
      await new Promise((resolve) => setImmediate(resolve));
      account.spent_usd = String(BigInt(account.spent_usd) + 1n);
      account.updated_ns = NS + i;
      await tx.budgets.updateAccount(account);
      // All workers claim the same nonces 0..n-1 (an entry spends one when it was unseen): across
      // processes each must be spent exactly once.
      const won = !(await tx.nonces.has("shared-session", i));
      // And all append to one chain: head() must hold off every other process until this commits.
      const head = await tx.chain.head();
      await new Promise((resolve) => setImmediate(resolve));
      const seq = head === null ? 0 : head.seq + 1;
      const body = JSON.stringify({ pid: process.pid, i, seq });
      await tx.chain.append({
        seq,
        entry_id: `${process.pid}-${i}`,
        entry_hash: createHash("sha256").update(body).digest("hex"),
        prev_hash: head?.entry_hash ?? "0".repeat(64),
        body,
        signature: "-",
        key_id: "k",
        kind: "decision",
        session_id: "shared-session",
        created_ns: NS + i,
        ...(won ? { nonce: i } : {}),
      });
      return won;
    });
    if (won) nonceWins++;
  }
}
await Promise.all(Array.from({ length: callers }, caller));
const { stats } = substrate;
await substrate.close();
process.stdout.write(`${JSON.stringify({ created, nonceWins, stats })}\n`);
