// The public surface of the openai module: other modules and processes import from here only.
export { failureLine, notRunLine, type ResultLine, succeeded, successLine } from "./batch-lines.js";
export { openAIError, type OpenAIError, type OpenAIErrorBody } from "./error-body.js";
export { type ChatCompletionRequest, parseChatCompletionRequest } from "./schemas/chat-completions.js";
export { decodeBody, Metadata, Nullable } from "./schemas/common.js";
export { parseConversationCreate, parseConversationItems, parseConversationUpdate } from "./schemas/conversations.js";
export { ExpiresAfterSchema, expiresAtFrom, parseFileUpdate } from "./schemas/files.js";
export { parseRedeemInvitation } from "./schemas/invitations.js";
export { listQuery } from "./schemas/lists.js";
export { parsePromptCreateRequest, parsePromptRunRequest, TEMPLATE_NAME } from "./schemas/prompts.js";
export { parseResponseCreateRequest, type ResponseCreateRequest } from "./schemas/responses.js";
export { tokenUsage, type TokenUsage } from "./token-usage.js";
export { chatToGenerateRequest } from "./translate/chat-request.js";
export { applyToolCallDelta, ChatCompletionAccumulator, usageObject } from "./translate/chat-response.js";
export { finishReasonName, type OpenAIFinishReason } from "./translate/finish-reason.js";
export { normalizeInputItems, toChatMessages } from "./translate/responses-items.js";
export { type Item, newResponseObject, type ResponseError, type ResponseObject, responseUsage } from "./translate/responses-object.js";
export { type ResponseEvent, type ResponseEventSink, ResponseOutputBuilder, snapshot } from "./translate/responses-output.js";
export { checkResponseRequest, type GenerationOptions, responseToGenerateRequest } from "./translate/responses-request.js";
