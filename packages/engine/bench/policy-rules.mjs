// The policies the policy benches run (not a test): five rules every bench call meets, and none.
// policy.mjs times them against no policy; instructions.mjs counts them (POLICY=five or empty).

// Every call of the benches is ALLOW with a budget hold; these rules all run on it and decide nothing
// else: a deny and a CEL condition that never match, a rate limit, a USD budget per day and a max_repeat,
// so every decision evaluates a condition and updates counters.
export const FIVE_RULES = {
  version: 1,
  name: "bench-five",
  rules: [
    { name: "no-destructive", match: { tool: ["db.drop", "shell.*"] }, action: "deny", message: "no" },
    {
      name: "deep-pages",
      match: { tool: "*" },
      when: "has(args.page) && args.page > 100",
      action: "hitl",
    },
    {
      name: "search-rate",
      match: { tool: ["tool0", "tool1", "tool2"] },
      action: { rate: { limit: 1_000_000, window_s: 60, per: "agent" } },
    },
    {
      name: "daily-spend",
      match: { tool: "*" },
      action: { budget_usd: { limit: 1_000_000, period: "day" } },
    },
    { name: "no-loops", match: { tool: "*" }, action: { max_repeat: 3 } },
  ],
};

export const EMPTY_RULES = { version: 1, name: "bench-empty", rules: [] };
