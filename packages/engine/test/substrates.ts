// Test helper: opens each real substrate the engine must work on (memory, SQLite file, PostgreSQL schema).
// Every opened store gets a fresh location and is removed by close() (see @leash/test-stores); nothing is mocked.
import { openStore as openTestStore, type StoreKind, type TestStore } from "@leash/test-stores";

export { STORE_KINDS as KINDS } from "@leash/test-stores";

/** `url` is what another process opens; `another()` opens a second handle on the same data. */
export type OpenedStore = TestStore;

export const openStore = (kind: StoreKind): Promise<OpenedStore> => openTestStore(kind, { label: "engine" });
