// Runs the shared substrate contract suite against SQLite, on real files in fresh temp directories.
// Never `:memory:`: the suite reopens locations and races two handles on one file, as processes would.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { defineSubstrateContract } from "@leash/substrate-contract";
import { openSqliteSubstrate } from "./substrate.js";

defineSubstrateContract({
  name: "sqlite",
  open: (location) => openSqliteSubstrate({ path: location }),
  freshLocation: async () => join(await mkdtemp(join(tmpdir(), "leash-sqlite-contract-")), "leash.db"),
  dispose: (location) => rm(dirname(location), { recursive: true, force: true }),
});
