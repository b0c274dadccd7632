// The public surface of the responses module: other modules and processes import from here only.
export { BackgroundLifecycle, RunControl, type RunOutcome, type RunRecord } from "./background-lifecycle.js";
export { type BackgroundJob, backgroundJobSchema, BackgroundQueue, ensureBackgroundStream, publishCancel } from "./background-queue.js";
export * as backgroundStates from "./background-states.js";
export { isTerminal } from "./background-states.js";
export { ConversationStore } from "./conversation-store.js";
export { cutText } from "./kv-values.js";
export { PromptStore } from "./prompt-store.js";
export { checkInputs, placeholdersOf, renderBody } from "./prompt-template.js";
export { type NumberedEvent, ResponseEventLog } from "./response-event-log.js";
export { type PreparedResponse, responseErrorOf, ResponseRun, ResponseService, type RunSource, type TokenCharge } from "./response-service.js";
export { type BackgroundCharge, type ResponseOwner, ResponseStore, type StoredResponse, type Versioned } from "./response-store.js";
