// What a substrate package hands the contract suite: how to reach a store at a location and how to clean up.
// No test logic lives here; suite.ts and the contract modules consume it.

import type { Substrate } from "@leash/core";

export interface SubstrateContractOptions {
  /** Names the top-level describe block: `substrate contract: <name>`. */
  name: string;
  /**
   * Returns a NEW handle on the data at `location`, not yet migrated: for SQLite a new connection to the
   * same file, for PostgreSQL a new pool on the same schema, for memory a handle on the same shared key.
   * The suite opens two handles on one location to race them, and reopens a location after closing it.
   */
  open: (location: string) => Promise<Substrate>;
  /** A location no other test uses, holding no data yet. Every test asks for its own. */
  freshLocation: () => Promise<string>;
  /** Removes what `freshLocation` created; called once per test, after every handle on it is closed. */
  dispose?: (location: string) => Promise<void>;
}
