// The guard config's max_params_bytes: the state machine's (@leash/machine, params-cap.ts).
// Re-exported under its old name for the engine's modules; nothing is defined here.
export * from "@leash/machine";
