import { isClientError, isDomainError } from "../errors/mod.js";
import type { BatchError } from "./batch-store.js";
import type { LineExecutor } from "./line-executors.js";

// Validation of a batch input file, one line at a time as it streams from the Object Store
// (nothing is buffered beyond one line and the set of custom_ids seen). A line's body is decoded
// with its endpoint's schema here, to validate the file, and again by the batch worker that runs
// it (the work stream is read like any stored value); the enqueue pass, which reads the file
// again once it passed, decodes nothing (validLines).

export interface WorkLine {
  /** 0-based index among the request lines (blank lines do not count). */
  line: number;
  customId: string;
  model: string;
  body: unknown;
}

const MAX_ERRORS = 1000;

const isBlank = (text: string) => text.trim() === "";

/**
 * The request lines of a file that passed InputValidator, in order: its custom_id, model and body
 * as they are (numbered as the validator numbered them: blank lines do not count).
 */
export async function* validLines(texts: AsyncIterable<string>): AsyncGenerator<WorkLine> {
  let line = 0;
  for await (const text of texts) {
    if (isBlank(text)) continue;
    const entry = JSON.parse(text) as { custom_id: string; body: { model: string } };
    yield { line: line++, customId: entry.custom_id, model: entry.body.model, body: entry.body };
  }
}

export class InputValidator {
  readonly errors: BatchError[] = [];
  private readonly seen = new Set<string>();
  private requests = 0;
  private physical = 0;
  private truncated = false;
  firstModel: string | null = null;

  constructor(
    private readonly endpoint: string,
    private readonly executor: LineExecutor,
    private readonly maxRequests: number,
  ) {}

  get total(): number {
    return this.requests;
  }

  /** Checks one physical line; problems go to `errors`. */
  accept(text: string): void {
    const lineNo = ++this.physical;
    if (isBlank(text)) return;
    this.requests++;
    if (this.requests > this.maxRequests) {
      if (this.requests === this.maxRequests + 1)
        this.add({ code: "too_many_tasks", message: `The batch input file has more than the limit of ${this.maxRequests} requests.`, param: null, line: lineNo });
      return;
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      this.add({ code: "invalid_json_line", message: `Line ${lineNo} is not valid JSON: ${(err as Error).message}.`, param: null, line: lineNo });
      return;
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      this.add({ code: "invalid_json_line", message: `Line ${lineNo} must be a JSON object.`, param: null, line: lineNo });
      return;
    }
    const entry = value as Record<string, unknown>;
    for (const key of ["custom_id", "method", "url", "body"] as const)
      if (entry[key] === undefined || entry[key] === null) {
        this.add({ code: "missing_required_parameter", message: `Line ${lineNo} is missing the required parameter '${key}'.`, param: key, line: lineNo });
        return;
      }
    for (const key of Object.keys(entry))
      if (!["custom_id", "method", "url", "body"].includes(key)) {
        this.add({ code: "unknown_parameter", message: `Line ${lineNo} has an unrecognized parameter '${key}'.`, param: key, line: lineNo });
        return;
      }
    const customId = entry.custom_id;
    if (typeof customId !== "string" || customId.length === 0 || customId.length > 512) {
      this.add({ code: "invalid_request", message: `Line ${lineNo}: 'custom_id' must be a non-empty string of at most 512 characters.`, param: "custom_id", line: lineNo });
      return;
    }
    if (this.seen.has(customId)) {
      this.add({ code: "duplicate_custom_id", message: `Line ${lineNo}: the custom_id '${customId}' is used by an earlier line; custom_id values must be unique.`, param: "custom_id", line: lineNo });
      return;
    }
    this.seen.add(customId);
    if (entry.method !== "POST") {
      this.add({ code: "invalid_request", message: `Line ${lineNo}: 'method' must be 'POST', got ${JSON.stringify(entry.method)}.`, param: "method", line: lineNo });
      return;
    }
    if (entry.url !== this.endpoint) {
      this.add({ code: "url_mismatch", message: `Line ${lineNo}: the url ${JSON.stringify(entry.url)} does not match the batch's endpoint '${this.endpoint}'.`, param: "url", line: lineNo });
      return;
    }
    let model: string;
    try {
      model = this.executor.validate(entry.body).model;
    } catch (err) {
      if (!isDomainError(err) || !isClientError(err)) throw err;
      this.add({
        code: err._tag === "InvalidParam" ? err.code : "invalid_request",
        message: `Line ${lineNo}: ${err.message}`,
        param: "param" in err && err.param ? `body.${err.param}` : "body",
        line: lineNo,
      });
      return;
    }
    this.firstModel ??= model;
  }

  /** Problems of the file as a whole, once every line was seen. */
  finish(bytes: number, maxBytes: number): void {
    if (bytes > maxBytes) this.add({ code: "file_too_large", message: `The batch input file is ${bytes} bytes; the limit is ${maxBytes}.`, param: null, line: null });
    if (this.requests === 0) this.add({ code: "empty_file", message: "The batch input file holds no requests.", param: null, line: null });
  }

  private add(error: BatchError): void {
    if (this.errors.length < MAX_ERRORS) this.errors.push(error);
    else this.truncated = true;
  }

  get moreErrors(): boolean {
    return this.truncated;
  }
}
