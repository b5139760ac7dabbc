// What ties a human's approval to the one call it paused: the state machine's (@leash/machine, hitl-binding.ts).
// Re-exported under its old name for the engine's modules; nothing is defined here.
export * from "@leash/machine";
