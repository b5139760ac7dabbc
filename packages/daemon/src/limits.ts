// What one socket peer or one organization may hold in the daemon: connections, timeouts, buffers, quotas.
// The numbers and their parsing from the config's `limits:` block only; the transport enforces them.

/** Limits of the Unix-socket transport; each bounds what a peer can make the daemon hold. */
export interface SocketLimits {
  /** Open connections at once; at the cap a new one evicts the oldest never authenticated, else is refused. */
  readonly maxConnections: number;
  /** A connection that has sent no authenticated frame this long after connecting is closed. */
  readonly authTimeoutMs: number;
  /** A connection with nothing in flight, no long poll and no byte received this long is closed. */
  readonly idleTimeoutMs: number;
  /** A frame must arrive whole this long after its first byte, else the connection is closed (slowloris). */
  readonly frameTimeoutMs: number;
  /** Bytes of partial frames held across all connections; a connection that would pass it is paused. */
  readonly maxBufferedBytes: number;
  /** Answers queued unread on one connection past which the daemon stops reading from it. */
  readonly writePauseBytes: number;
  /** Answers queued unread on one connection past which the daemon closes it. */
  readonly writeCloseBytes: number;
  /** Answers queued unread across the paused connections; past it the one with the most is closed. */
  readonly maxQueuedBytes: number;
  /** Requests one connection may have in flight; beyond it each is answered RATE_LIMITED. */
  readonly maxInFlight: number;
  /** Long polls (wait_hitl, tail_entries) one connection may hold open; a newer one supersedes the oldest. */
  readonly maxLongPolls: number;
}

/** Quotas of one organization across every connection, so one cannot starve another. */
export interface OrganizationQuotas {
  /** Requests in flight (long polls apart). */
  readonly inFlight: number;
  /** Tails (socket polls and gRPC streams) open at once. */
  readonly tails: number;
  /** Message ids in the organization's own replay window (about 100 bytes each). */
  readonly replayIds: number;
  /** Sustained requests per second (a token bucket); 0 means no rate limit. */
  readonly ratePerS: number;
  /** Requests the bucket lets through at once. */
  readonly burst: number;
}

export interface DaemonLimits {
  readonly socket: SocketLimits;
  readonly perOrganization: OrganizationQuotas;
}

const MIB = 1024 * 1024;

export const DEFAULT_SOCKET_LIMITS: SocketLimits = {
  maxConnections: 1024,
  authTimeoutMs: 10_000,
  idleTimeoutMs: 300_000,
  frameTimeoutMs: 10_000,
  maxBufferedBytes: 8 * MIB,
  writePauseBytes: 64 * 1024,
  writeCloseBytes: 4 * MIB,
  maxQueuedBytes: 16 * MIB,
  maxInFlight: 256,
  maxLongPolls: 32,
};

export const DEFAULT_ORGANIZATION_QUOTAS: OrganizationQuotas = {
  inFlight: 1024,
  tails: 32,
  replayIds: 1_000_000,
  ratePerS: 5_000,
  burst: 10_000,
};

export const DEFAULT_LIMITS: DaemonLimits = {
  socket: DEFAULT_SOCKET_LIMITS,
  perOrganization: DEFAULT_ORGANIZATION_QUOTAS,
};

/** Config name → [field, unit multiplier to the internal unit, minimum]. */
const SOCKET_FIELDS: Record<string, [keyof SocketLimits, number, number]> = {
  max_connections: ["maxConnections", 1, 1],
  auth_timeout_s: ["authTimeoutMs", 1000, 0.001],
  idle_timeout_s: ["idleTimeoutMs", 1000, 0.001],
  frame_timeout_s: ["frameTimeoutMs", 1000, 0.001],
  max_buffered_bytes: ["maxBufferedBytes", 1, 1024 * 1024],
  write_pause_bytes: ["writePauseBytes", 1, 1],
  write_close_bytes: ["writeCloseBytes", 1, 1024 * 1024],
  max_queued_bytes: ["maxQueuedBytes", 1, 1024 * 1024],
  max_in_flight: ["maxInFlight", 1, 1],
  max_long_polls: ["maxLongPolls", 1, 1],
};
const QUOTA_FIELDS: Record<string, [keyof OrganizationQuotas, number, number]> = {
  in_flight: ["inFlight", 1, 1],
  tails: ["tails", 1, 1],
  replay_ids: ["replayIds", 1, 1],
  rate_per_s: ["ratePerS", 1, 0],
  burst: ["burst", 1, 1],
};

type Fail = (problem: string) => never;

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

function fieldsOf<T extends object>(
  value: unknown,
  fields: Record<string, [keyof T, number, number]>,
  defaults: T,
  where: string,
  fail: Fail,
): T {
  if (value === undefined) return defaults;
  if (!isObject(value)) fail(`${where} must be an object`);
  const out: Record<string, number> = { ...(defaults as Record<string, number>) };
  for (const [name, raw] of Object.entries(value)) {
    const field = fields[name];
    if (field === undefined) fail(`${where} has unknown field "${name}"`);
    const [key, unit, min] = field;
    if (typeof raw !== "number" || !Number.isFinite(raw) || raw < min) {
      fail(`${where}/${name} must be a number ≥ ${min}`);
    }
    const internal = Math.round(raw * unit);
    if (!Number.isSafeInteger(internal)) fail(`${where}/${name} is too large`);
    out[key as string] = internal;
  }
  return out as T;
}

/**
 * The `limits:` block of the daemon config (`per_organization:` nested in it), defaults filled in.
 * @throws through `fail` naming the first bad field.
 */
export function parseLimits(value: unknown, fail: Fail): DaemonLimits {
  if (value === undefined) return DEFAULT_LIMITS;
  if (!isObject(value)) fail("/limits must be an object");
  const { per_organization: quotas, ...socket } = value;
  const limits: DaemonLimits = {
    socket: fieldsOf(socket, SOCKET_FIELDS, DEFAULT_SOCKET_LIMITS, "/limits", fail),
    perOrganization: fieldsOf(
      quotas,
      QUOTA_FIELDS,
      DEFAULT_ORGANIZATION_QUOTAS,
      "/limits/per_organization",
      fail,
    ),
  };
  if (limits.socket.writeCloseBytes <= limits.socket.writePauseBytes) {
    fail("/limits/write_close_bytes must be larger than write_pause_bytes");
  }
  return limits;
}
