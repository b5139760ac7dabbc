// The guard config's denied_tools: the state machine's (@leash/machine, tool-policy.ts).
// Re-exported under its old name for the engine's modules; nothing is defined here.
export * from "@leash/machine";
