import { ErrorCode, type Error as ProtoError } from "../../proto/gen/tributary/v1/inference.js";
import { ApiError, errors } from "../openai/mod.js";

/** Maps a runner's error to the HTTP error the client gets. */
export function apiErrorFromRunner(error: ProtoError, requestId: string): ApiError {
  switch (error.code) {
    case ErrorCode.ERROR_CODE_INVALID_REQUEST:
      return errors.invalidParam(error.param || "", error.message);
    case ErrorCode.ERROR_CODE_CONTEXT_LENGTH_EXCEEDED:
      return errors.contextLength(error.message, error.param || "messages");
    case ErrorCode.ERROR_CODE_QUEUE_FULL:
    case ErrorCode.ERROR_CODE_DRAINING:
      return errors.overloaded(`The model is overloaded: ${error.message}. Please retry after a short wait.`);
    case ErrorCode.ERROR_CODE_MODEL_LOADING:
    case ErrorCode.ERROR_CODE_MODEL_NOT_SERVED:
      return errors.unavailable(error.message, 5);
    case ErrorCode.ERROR_CODE_DEADLINE_EXCEEDED:
      return errors.timeout(`The request timed out: ${error.message}.`);
    case ErrorCode.ERROR_CODE_CANCELLED:
      return new ApiError(499, "The request was cancelled.", "invalid_request_error", "cancelled");
    default:
      return errors.internal(requestId);
  }
}
