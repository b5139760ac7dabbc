// Budget settings at the edges: the hold TTL's bounds (config file and createEngine) on every store.
import { generateKeyPair } from "@leash/chain";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, LeashError, MAX_RESERVATION_TTL_S, parseConfigObject } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();

function configError(value: unknown): string {
  try {
    parseConfigObject(value, "leash.yaml");
  } catch (error) {
    expect(LeashError.isInstance(error) && error.code).toBe("config_invalid");
    return (error as Error).message;
  }
  return expect.fail(`accepted ${JSON.stringify(value)}`);
}

describe("reservation_ttl_s", () => {
  it("is refused past 365 days with a validation error naming the field", () => {
    for (const ttl of [1e10, 1e308, MAX_RESERVATION_TTL_S + 1]) {
      expect(configError({ reservation_ttl_s: ttl })).toMatch(
        new RegExp(`^leash\\.yaml: /reservation_ttl_s must be <= ${MAX_RESERVATION_TTL_S}$`),
      );
    }
    expect(parseConfigObject({ reservation_ttl_s: MAX_RESERVATION_TTL_S }).reservation_ttl_s).toBe(
      MAX_RESERVATION_TTL_S,
    );
  });

  it("is refused by createEngine too, before any call", () => {
    for (const ms of [1e13, 1e308 * 1000, Number.POSITIVE_INFINITY, Number.NaN, 0, -1]) {
      const error = (() => {
        try {
          createEngine({ substrate: {} as never, signer: KEY.signer, reservationTtlMs: ms });
        } catch (e) {
          return e;
        }
      })();
      expect(LeashError.isInstance(error) && error.code).toBe("invalid_argument");
      expect((error as Error).message).toMatch(/^reservationTtlMs must be a positive number of milliseconds/);
    }
  });
});

describe.each(KINDS)("the longest TTL on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("holds and expires like any other (its expiry fits the stores' columns)", async () => {
    store = await openStore(kind);
    let now = 1_800_000_000_000_000_000;
    const engine = createEngine({
      substrate: store.substrate,
      signer: KEY.signer,
      clock: { nowNs: () => now },
      reservationTtlMs: MAX_RESERVATION_TTL_S * 1000,
    });
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const r = await engine.evaluate({ session_id: s.session_id, tool_name: "t", estimated_cost_usd: 0.5 });
    expect([r.verdict, r.budget_remaining_usd]).toEqual(["ALLOW", "0.5"]);
    now += MAX_RESERVATION_TTL_S * 1e9 - 1e9;
    expect(await engine.expireReservations()).toBe(0);
    now += 2e9;
    expect(await engine.expireReservations()).toBe(1);
    expect((await engine.getSession(s.session_id)).budget_remaining_usd).toBe("0.5");
  });
});
