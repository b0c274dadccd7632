import { newId } from "../../lib/ids.js";
import type { DomainError } from "../errors/mod.js";
import { openAIError } from "./error-body.js";

// Lines of a batch's output and error files, as OpenAI writes them: each carries the HTTP
// response the request would have got (`status_code`, `request_id`, `body`), or an `error` for a
// line that never ran.

export interface ResultLine {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: unknown } | null;
  error: { code: string; message: string } | null;
}

const OK = 200;

/** A line that ran: its response body. */
export function successLine(customId: string, requestId: string, body: unknown): ResultLine {
  return { id: newId("batch_req_"), custom_id: customId, response: { status_code: OK, request_id: requestId, body }, error: null };
}

/** A line that ran and failed: the status and error body the request would have got. */
export function failureLine(customId: string, requestId: string, error: DomainError): ResultLine {
  const { status, body } = openAIError(error, requestId);
  return { id: newId("batch_req_"), custom_id: customId, response: { status_code: status, request_id: requestId, body }, error: null };
}

/** A line that never ran (batch expired or cancelled, unknown model). */
export function notRunLine(customId: string, code: string, message: string): ResultLine {
  return { id: newId("batch_req_"), custom_id: customId, response: null, error: { code, message } };
}

/** Succeeded lines go to the output file; everything else to the error file. */
export function succeeded(line: ResultLine): boolean {
  return line.error === null && line.response !== null && line.response.status_code === OK;
}
