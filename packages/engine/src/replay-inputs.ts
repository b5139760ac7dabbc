// The inputs a decision entry carries for replay: the state machine's (@leash/machine, replay-inputs.ts).
// Re-exported under its old name for the engine's modules; nothing is defined here.
export * from "@leash/machine";
