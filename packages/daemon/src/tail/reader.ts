// Reading one organization's audit chain entries for TailEntries / tail_entries: where to start (the
// latest N that match), pages forward from a position, and each entry as a TailEvent. No waiting here.
import { create } from "@bufbuild/protobuf";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { type TailEvent, TailEventSchema, Verdict } from "@leash/wire";

/** Entries read per transaction. */
const PAGE = 500;
/** Pages one call of page() reads at most. */
const MAX_PAGES = 20;
/** Sessions whose organization is remembered (sessions never change organization). */
const SESSIONS_REMEMBERED = 100_000;
/**
 * A text field longer than this is cut (with a marker) in the event: one event, however long the tool
 * name an agent sent, must fit a 1 MiB frame. The chain keeps the whole text.
 */
const MAX_FIELD_CHARS = 64 * 1024;

/** What a caller asked for, resolved: the organization is the transport's, never the request's. */
export interface TailFilter {
  readonly organizationId: string;
  /** The agents whose sessions the caller's key may see (a key bound to agents); null: every agent. */
  readonly agents?: ReadonlySet<string> | null;
  readonly sessionId: string | null;
  readonly kinds: ReadonlySet<string> | null;
}

/** Whom a session belongs to, as the store says. */
interface Owner {
  readonly org: string;
  readonly agent: string;
}

/** Up to `maxEvents` events after `afterSeq`; `afterSeq` of the result is the last seq examined. */
export interface TailPage {
  readonly events: TailEvent[];
  readonly afterSeq: number;
  /** Entries past afterSeq were already there when the page stopped (a limit was reached). */
  readonly more: boolean;
}

const VERDICTS: Record<string, Verdict> = { ALLOW: Verdict.ALLOW, DENY: Verdict.DENY, HITL: Verdict.HITL };

function cut(text: string): string {
  return text.length <= MAX_FIELD_CHARS ? text : `${text.slice(0, MAX_FIELD_CHARS)}…[cut]`;
}

/** The entry as a TailEvent: the fields its kind records, the rest absent. */
export function tailEventOf(entry: ChainEntryRecord): TailEvent {
  let data: Record<string, unknown> = {};
  try {
    const body = JSON.parse(entry.body) as { data?: unknown };
    if (typeof body.data === "object" && body.data !== null) data = body.data as Record<string, unknown>;
  } catch {
    // An unreadable body still has its columns (seq, hash, kind, session); `leash verify` says what is wrong.
  }
  const text = (v: unknown) => (typeof v === "string" ? cut(v) : undefined);
  const callNumber = data.call_number;
  return create(TailEventSchema, {
    seq: BigInt(entry.seq),
    entryHash: entry.entry_hash,
    entryId: entry.entry_id,
    timeNs: BigInt(Math.trunc(entry.created_ns)),
    kind: entry.kind,
    sessionId: entry.session_id ?? "",
    agentId: text(data.agent_id),
    callNumber:
      typeof callNumber === "number" && Number.isSafeInteger(callNumber) && callNumber >= 0
        ? BigInt(callNumber)
        : undefined,
    toolName: text(data.tool_name),
    verdict: entry.kind === "decision" ? (VERDICTS[String(data.verdict)] ?? Verdict.VERDICT_UNSPECIFIED) : 0,
    reason: text(data.reason),
    budgetAfterUsdDecimal: text(data.budget_after_usd),
  });
}

/** Reads the chain for one organization's callers; shared by every tail in the daemon (the cache). */
export class TailReader {
  readonly #substrate: Substrate;
  readonly #ownerOf = new Map<string, Owner>();

  constructor(substrate: Substrate) {
    this.#substrate = substrate;
  }

  /** Which of `entries` the filter lets through: the caller's organization's (and agents') sessions only. */
  async #select(entries: readonly ChainEntryRecord[], filter: TailFilter): Promise<ChainEntryRecord[]> {
    const candidates = entries.filter(
      (e) =>
        e.session_id !== null &&
        (filter.sessionId === null || e.session_id === filter.sessionId) &&
        (filter.kinds === null || filter.kinds.has(e.kind)),
    );
    const owners = new Map<string, Owner | null>();
    const unknown: string[] = [];
    for (const entry of candidates) {
      const id = entry.session_id as string;
      if (owners.has(id)) continue;
      const cached = this.#ownerOf.get(id);
      owners.set(id, cached ?? null);
      if (cached === undefined) unknown.push(id);
    }
    if (unknown.length > 0) {
      // One order for every reader: a store that locks the rows it reads (PostgreSQL) then never
      // has two tails wait on each other.
      unknown.sort();
      const rows = await this.#substrate.transaction((tx) =>
        Promise.all(unknown.map((id) => tx.sessions.get(id))),
      );
      if (this.#ownerOf.size + unknown.length > SESSIONS_REMEMBERED) this.#ownerOf.clear();
      rows.forEach((row, i) => {
        // A session the store does not know is nobody's: skipped, and asked about again next time.
        if (row === null) return;
        const owner = { org: row.organization_id, agent: row.agent_id };
        owners.set(unknown[i]!, owner);
        this.#ownerOf.set(unknown[i]!, owner);
      });
    }
    const agents = filter.agents ?? null;
    return candidates.filter((e) => {
      const owner = owners.get(e.session_id as string);
      return (
        owner !== undefined &&
        owner !== null &&
        owner.org === filter.organizationId &&
        (agents === null || agents.has(owner.agent))
      );
    });
  }

  /**
   * The position to read from so that the latest `last` matching entries come first: the seq before
   * the oldest of them, -1 when fewer exist, the head's seq when `last` is 0 (-1 on an empty chain).
   */
  async startBefore(last: number, filter: TailFilter, signal?: AbortSignal): Promise<number> {
    const head = await this.#substrate.transaction((tx) => tx.chain.head());
    if (head === null) return -1;
    if (last <= 0) return head.seq;
    let found = 0;
    let end = head.seq + 1;
    while (end > 0) {
      if (signal?.aborted) return head.seq;
      const from = Math.max(0, end - PAGE);
      const page = await this.#substrate.transaction((tx) => tx.chain.range(from, end - from));
      const picked = await this.#select(page, filter);
      if (found + picked.length >= last) return picked[picked.length - (last - found)]!.seq - 1;
      found += picked.length;
      end = from;
    }
    return -1;
  }

  /** The matching entries after `afterSeq`, at most `maxEvents` and about `maxBytes` of text. */
  async page(
    afterSeq: number,
    filter: TailFilter,
    limits: { maxEvents: number; maxBytes: number },
  ): Promise<TailPage> {
    const events: TailEvent[] = [];
    let bytes = 0;
    let position = afterSeq;
    for (let pages = 0; ; pages++) {
      // Bounded work per answer: a long stretch of other organizations' entries ends this page early.
      if (pages === MAX_PAGES) return { events, afterSeq: position, more: true };
      const from = position + 1;
      const entries = await this.#substrate.transaction((tx) => tx.chain.range(from, PAGE));
      const picked = new Set(await this.#select(entries, filter));
      for (const entry of entries) {
        if (picked.has(entry)) {
          const event = tailEventOf(entry);
          const size = sizeOf(event);
          if (events.length >= limits.maxEvents || (events.length > 0 && bytes + size > limits.maxBytes)) {
            return { events, afterSeq: position, more: true };
          }
          events.push(event);
          bytes += size;
        }
        position = entry.seq;
      }
      if (entries.length < PAGE) return { events, afterSeq: position, more: false };
    }
  }
}

/** About the event's encoded size: its text in UTF-8 plus the fixed fields. */
function sizeOf(event: TailEvent): number {
  let n = 96;
  for (const text of [
    event.entryHash,
    event.entryId,
    event.kind,
    event.sessionId,
    event.agentId,
    event.toolName,
    event.reason,
    event.budgetAfterUsdDecimal,
  ]) {
    if (text !== undefined) n += Buffer.byteLength(text) + 4;
  }
  return n;
}
