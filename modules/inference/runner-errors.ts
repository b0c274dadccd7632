import { ErrorCode, type Error as ProtoError } from "../../proto/gen/tributary/v1/inference.js";
import { Cancelled, errors, type DomainError, NoRunner, QueueFull } from "../errors/mod.js";

/** A runner's refusal or failure (protobuf `Error`) as the domain error it stands for. */
export function domainErrorFromRunner(error: ProtoError, model: string): DomainError {
  switch (error.code) {
    case ErrorCode.ERROR_CODE_INVALID_REQUEST:
      return errors.invalidParam(error.param || null, error.message);
    case ErrorCode.ERROR_CODE_CONTEXT_LENGTH_EXCEEDED:
      return errors.contextLength(error.message, error.param || "messages");
    case ErrorCode.ERROR_CODE_QUEUE_FULL:
    case ErrorCode.ERROR_CODE_DRAINING:
      return new QueueFull({ model, detail: error.message });
    case ErrorCode.ERROR_CODE_MODEL_LOADING:
      return new NoRunner({ model, state: "loading", retryAfterSeconds: 5 });
    case ErrorCode.ERROR_CODE_MODEL_NOT_SERVED:
      return new NoRunner({ model, state: "none", retryAfterSeconds: 5 });
    case ErrorCode.ERROR_CODE_DEADLINE_EXCEEDED:
      return errors.deadline(`The request timed out: ${error.message}.`);
    case ErrorCode.ERROR_CODE_CANCELLED:
      return new Cancelled({ reason: "cancelled" });
    default:
      return errors.internal(new Error(`runner error ${error.code}: ${error.message}`));
  }
}

/** Refusals after which another runner of the model may still take the request. */
export const retryElsewhere = (error: ProtoError): boolean =>
  error.code === ErrorCode.ERROR_CODE_QUEUE_FULL ||
  error.code === ErrorCode.ERROR_CODE_DRAINING ||
  error.code === ErrorCode.ERROR_CODE_MODEL_NOT_SERVED ||
  error.code === ErrorCode.ERROR_CODE_MODEL_LOADING;
