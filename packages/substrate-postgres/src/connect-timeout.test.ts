// `connect_timeout=S` in a store URL bounds how long opening a connection may take: pg's JavaScript
// client ignores the parameter itself. A real TCP server that accepts and never answers stands for a cut network.
import { createServer, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openPostgresSubstrate } from "./substrate.js";

describe("connect_timeout in a PostgreSQL store URL", () => {
  const held: Socket[] = [];
  const silent = createServer((socket) => {
    held.push(socket); // accepted, never answered: the startup message waits forever
  });
  let port = 0;
  beforeAll(async () => {
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", () => resolve()));
    port = (silent.address() as { port: number }).port;
  });
  afterAll(async () => {
    for (const s of held) s.destroy();
    await new Promise((resolve) => silent.close(resolve));
  });

  it("fails the open within the timeout when the server never answers", async () => {
    const t0 = Date.now();
    const opening = openPostgresSubstrate({
      url: `postgres://postgres@127.0.0.1:${port}/test?connect_timeout=1`,
    });
    await expect(opening).rejects.toMatchObject({ name: "SubstrateError", code: "io" });
    const ms = Date.now() - t0;
    expect(ms).toBeGreaterThanOrEqual(900);
    expect(ms).toBeLessThan(5_000);
  }, 15_000);

  it("without it, the open is still waiting after longer than that", async () => {
    const opening = openPostgresSubstrate({ url: `postgres://postgres@127.0.0.1:${port}/test` });
    const outcome = await Promise.race([
      opening.then(
        () => "opened",
        () => "failed",
      ),
      new Promise((resolve) => setTimeout(() => resolve("waiting"), 2_500)),
    ]);
    expect(outcome).toBe("waiting");
    for (const s of held) s.destroy(); // ends the wait: the open fails, and nothing is left running
    await opening.then(
      (s) => s.close(),
      () => undefined,
    );
  }, 15_000);
});
