// The public surface of the batches module: other modules and processes import from here only.
export { type BatchError, type BatchJob, batchJobSchema, type BatchObject, type BatchStatus, BatchStore, emptyUsage, openBatchResults, purgeBatchLeftovers, resultsFilter, resultsStream, type StoredBatch, storedBatchSchema } from "./batch-store.js";
export * as batchStates from "./batch-states.js";
export { dispatchBudget } from "./dispatch-budget.js";
export { LINE_EXECUTORS, type LineOutcome, OPENAI_BATCH_ENDPOINTS } from "./line-executors.js";
export { ResultTally, storeResult } from "./result-lines.js";
export { InputValidator, validLines, type WorkLine } from "./validate-input.js";
export { type WorkItem, workItemSchema } from "./work-item.js";
