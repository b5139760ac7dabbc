// A child process for postgres.test.ts: opens the built substrate and adds 1 to one account N times.
// Not part of the package (dist holds compiled .ts only); it exists to prove locks hold across processes.
import { openPostgresSubstrate } from "../dist/index.js";

const [url, schema, accountId, count] = process.argv.slice(2);
const substrate = await openPostgresSubstrate({ url, schema, poolSize: 4 });
try {
  const increments = Array.from({ length: Number(count) }, () =>
    substrate.transaction(async (tx) => {
      const account = await tx.budgets.getAccount(accountId);
      if (account === null) throw new Error(`account ${accountId} is missing`);
      // Yield between read and write so that, without the row lock, other processes would interleave.
      await new Promise((resolve) => setTimeout(resolve, 0));
      await tx.budgets.updateAccount({ ...account, spent_usd: String(BigInt(account.spent_usd) + 1n) });
    }),
  );
  await Promise.all(increments);
} finally {
  await substrate.close();
}
