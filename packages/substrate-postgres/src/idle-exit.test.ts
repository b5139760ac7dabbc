// An idle pool does not hold the process open: a program that used the store and forgot to close it
// still exits. A real child process on the real PostgreSQL (pg's allowExitOnIdle).
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { DB_URL, pgHarness } from "../test/support.js";

const { freshSchema } = pgHarness("leash_idle_exit");
const ENTRY = fileURLToPath(new URL("../dist/index.js", import.meta.url));

describe("an idle PostgreSQL substrate", () => {
  it("keeps no connection referenced once its work is done, so the process exits without close()", async () => {
    const schema = freshSchema();
    // One real transaction, then nothing: what is still keeping the event loop alive is printed.
    const script = `
      const { openPostgresSubstrate } = await import(${JSON.stringify(ENTRY)});
      const s = await openPostgresSubstrate({ url: process.argv[1], schema: process.argv[2] });
      await s.migrate();
      await s.transaction((tx) => tx.chain.head());
      setImmediate(() => console.log(JSON.stringify(process.getActiveResourcesInfo())));
    `;
    const { code, stdout, stderr } = await new Promise<{
      code: number | null;
      stdout: string;
      stderr: string;
    }>((resolve) => {
      const child = execFile(
        process.execPath,
        ["--input-type=module", "-e", script, DB_URL, schema],
        { timeout: 60_000 },
        (_error, stdout, stderr) => resolve({ code: child.exitCode, stdout, stderr }),
      );
    });
    expect(code, stderr).toBe(0);
    expect(JSON.parse(stdout.trim()) as string[]).not.toContain("TCPSocketWrap");
  }, 90_000);
});
