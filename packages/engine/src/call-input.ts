// The engine's checks of a library evaluate request beyond decide(): the state machine's (@leash/machine, call-input.ts).
// Re-exported under its old name for the engine's modules; nothing is defined here.
export * from "@leash/machine";
