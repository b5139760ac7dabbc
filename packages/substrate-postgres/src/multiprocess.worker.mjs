// A child process for postgres.test.ts: opens the built substrate, adds 1 to one account N times and appends N entries.
// Not part of the package (dist holds compiled .ts only); it exists to prove locks hold across processes.
import { openPostgresSubstrate } from "../dist/index.js";

const [url, schema, accountId, count] = process.argv.slice(2);
const substrate = await openPostgresSubstrate({ url, schema, poolSize: 4 });
try {
  const increments = Array.from({ length: Number(count) }, (_, i) =>
    substrate.transaction(async (tx) => {
      const account = await tx.budgets.getAccount(accountId);
      if (account === null) throw new Error(`account ${accountId} is missing`);
      // Yield between read and write so that, without the row lock, other processes would interleave.
      await new Promise((resolve) => setTimeout(resolve, 0));
      await tx.budgets.updateAccount({ ...account, spent_usd: String(BigInt(account.spent_usd) + 1n) });
      // Every process appends to one chain: head() must hold off the others until this commits.
      const head = await tx.chain.head();
      await new Promise((resolve) => setTimeout(resolve, 0));
      const seq = head === null ? 0 : head.seq + 1;
      await tx.chain.append({
        seq,
        entry_id: `${process.pid}-${i}`,
        entry_hash: `${process.pid}-${i}-hash`,
        prev_hash: head?.entry_hash ?? "0".repeat(64),
        body: JSON.stringify({ pid: process.pid, i, seq }),
        signature: "-",
        key_id: "k",
        kind: "decision",
        session_id: null,
        created_ns: 1_796_012_406_975_000_000,
      });
    }),
  );
  await Promise.all(increments);
} finally {
  await substrate.close();
}
