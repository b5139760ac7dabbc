// A fresh replay token per tool dispatch: a random uint64 ≥ 1 as decimal text (engine and daemon take it).
// Never derived from the call's content or its call id (SP/1.0 §3.2 rule 3): ids repeat, dispatches do not.
import { randomBytes } from "node:crypto";

export const randomNonce = (): string => ((randomBytes(8).readBigUInt64BE() >> 1n) + 1n).toString();
