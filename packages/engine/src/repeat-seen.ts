// The repeat count a call was judged with: the state machine's (@leash/machine, repeat-seen.ts).
// Re-exported under its old name for the engine's modules; nothing is defined here.
export * from "@leash/machine";
