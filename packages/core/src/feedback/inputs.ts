// What the runtime passes to feedback: the daemon's time and the call's argument digest.
// Feedback never computes time itself; it may compute the digest when none is given.

export interface FeedbackInputs {
  /** Daemon time in nanoseconds (the runtime is the only clock). */
  nowNs: number;
  /** `canonicalHash(call.params)` when the runtime already has it; null when not canonicalizable. */
  paramsHash?: string | null;
}
