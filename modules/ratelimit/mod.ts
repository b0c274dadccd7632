// The public surface of the ratelimit module: other modules and processes import from here only.
export { BudgetClient } from "./budget-client.js";
export { budgetStateKey, type BudgetUse, BudgetReader } from "./budget-reader.js";
export { applyReturn, type BudgetRecord, budgetRecordSchema, decideChunk, freshRecord, remaining, rollWindow, windowEndsInMs } from "./budget-policy.js";
export { ClusterRateLimiter } from "./cluster-rate-limiter.js";
export { estimatePromptTokens, estimateRequestTokens } from "./estimate.js";
export { type HeldCharge, HeldChargeSchema, settleHeldCharge } from "./held-charge.js";
export { goDuration, parseGoDuration, rateLimitHeaders, retryAfterHeaders } from "./headers.js";
export { BudgetDenied, type Grant, type LeaseAsk, LocalBudget } from "./local-budget.js";
export { type Admission, type RateLimiter, type RateLimitScope, UnlimitedRateLimiter } from "./rate-limiter.js";
export { UsageMeter } from "./usage-meter.js";
