import { FinishReason } from "../../../proto/gen/tributary/v1/inference.js";

export type OpenAIFinishReason = "stop" | "length" | "tool_calls" | "content_filter";

export function finishReasonName(reason: FinishReason): OpenAIFinishReason {
  switch (reason) {
    case FinishReason.FINISH_REASON_LENGTH:
      return "length";
    case FinishReason.FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "stop";
  }
}
