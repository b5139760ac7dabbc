// Bounds on the engine's numeric settings that the stores' integer columns impose.
// The constant is the state machine's (@leash/machine); named here for the config file's schema.
export { MAX_RESERVATION_TTL_S } from "@leash/machine";
