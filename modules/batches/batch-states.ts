import { notRunLine, succeeded, type ResultLine } from "../openai/mod.js";
import type { BatchError, BatchObject, BatchStatus, BatchUsage, StoredBatch } from "./batch-store.js";
import { ResultTally } from "./result-lines.js";

// The states of a batch and every move between them, as pure functions of the stored record:
// the coordinator (actors/batches) applies each with a compare-and-set on the record, so of two
// moves racing (a user's cancel and the coordinator's next step) exactly one happens.
//
//   validating ──validate──▶ in_progress ──linesDone──▶ finalizing ──finalize──▶ completed
//     │                        │   │                   (its ending)              expired
//     │                        │   └─────expire─────▶ finalizing ──finalize──▶ expired
//     │                        └──endEarly (its input file vanished)──▶ failed
//     └──reject (its input file is not valid)──▶ failed
//
//   validating | in_progress ──cancel──▶ cancelling ──finalize──▶ cancelled
//                                          └──endEarly (no line ran)──▶ cancelled
//
// A final record (failed, completed, expired, cancelled) never moves again. While in_progress,
// `progress` refreshes its counters; `enqueued` notes that every line is on the work stream.

/** How a batch that ran ends: the status `finalize` gives it. */
export type Ending = NonNullable<StoredBatch["ending"]>;

export const isFinal = (status: BatchStatus) => status === "failed" || status === "completed" || status === "expired" || status === "cancelled";

/** Its lines' counters: how many finished well and how many failed (the total is the batch's). */
export interface LineCounts {
  completed: number;
  failed: number;
}

/** A line whose stored result does not decode: it ran, its result is lost; counted as failed. */
export const LOST_RESULT = { code: "server_error", message: "The result of this request was lost. Please run it again." };

/** Why a line that did not run is in the error file. */
export function neverRan(ending: Ending): { code: string; message: string } {
  return ending === "expired"
    ? { code: "batch_expired", message: "This request could not be executed before the completion window expired." }
    : { code: "batch_cancelled", message: "This request was not executed because the batch was cancelled." };
}

/** What the coordinator that owns a batch does next. */
export type Duty =
  | { kind: "validate" }
  /** Publish its lines to the work stream. */
  | { kind: "enqueue" }
  /** Follow its lines' results until all are in or it expires. */
  | { kind: "watch" }
  | { kind: "finalize"; ending: Ending }
  /** It is final: nothing is left but its leftovers. */
  | { kind: "done" };

export function duty(record: StoredBatch): Duty {
  switch (record.batch.status) {
    case "validating":
      return { kind: "validate" };
    case "in_progress":
      return { kind: record.enqueued ? "watch" : "enqueue" };
    case "cancelling":
      return { kind: "finalize", ending: "cancelled" };
    case "finalizing":
      return { kind: "finalize", ending: record.ending ?? "completed" };
    default:
      return { kind: "done" };
  }
}

/**
 * What a batch worker does with a line of a batch in `status` (undefined: the batch is gone):
 * wait while the batch validates, run it while the batch is in progress, else drop it (its
 * coordinator accounts for the lines that did not run).
 */
export function lineFate(status: BatchStatus | undefined): "wait" | "run" | "drop" {
  return status === "validating" ? "wait" : status === "in_progress" ? "run" : "drop";
}

/** Its completion window has passed (`nowMs`: Unix ms). */
export const isOverdue = (batch: BatchObject, nowMs: number) => nowMs >= batch.expires_at * 1000;

/** No line of it ran: it was cancelled while validating (its counters were never set). */
export const nothingRan = (batch: BatchObject) => batch.request_counts.total === 0 || batch.in_progress_at === null;

/** A record with `batch` changed (and the rest of the record as it is, unless `rest` says otherwise). */
function changed(current: StoredBatch, batch: Partial<BatchObject>, rest: Partial<Omit<StoredBatch, "batch">> = {}): StoredBatch {
  return { ...current, ...rest, batch: { ...current.batch, ...batch } };
}

/** Its input file passed: it runs, with `total` lines (the first line's model names it). Only from validating. */
export function validate(current: StoredBatch, input: { total: number; model: string | null }, at: number): StoredBatch | undefined {
  if (current.batch.status !== "validating") return undefined;
  return changed(current, { status: "in_progress", in_progress_at: at, request_counts: { total: input.total, completed: 0, failed: 0 }, model: input.model }, { enqueued: false });
}

/** Its input file did not pass: it fails with the problems found. Only from validating. */
export function reject(current: StoredBatch, problems: BatchError[], at: number): StoredBatch | undefined {
  if (current.batch.status !== "validating") return undefined;
  return changed(current, { status: "failed", failed_at: at, errors: { object: "list", data: problems } });
}

/** Every line is on the work stream (or resolved at once). Undefined for a final record, or one noted already. */
export function enqueued(current: StoredBatch): StoredBatch | undefined {
  if (isFinal(current.batch.status) || current.enqueued) return undefined;
  return { ...current, enqueued: true };
}

/** Its counters as its lines finish. Only while in_progress. */
export function progress(current: StoredBatch, counts: LineCounts, usage: BatchUsage): StoredBatch | undefined {
  if (current.batch.status !== "in_progress") return undefined;
  return changed(current, { request_counts: { total: current.batch.request_counts.total, ...counts }, usage });
}

/** Every line has a result: it finalizes towards completed, with its counters. Only from in_progress. */
export function linesDone(current: StoredBatch, counts: LineCounts, usage: BatchUsage, at: number): StoredBatch | undefined {
  if (current.batch.status !== "in_progress") return undefined;
  return changed(current, { status: "finalizing", finalizing_at: at, request_counts: { total: current.batch.request_counts.total, ...counts }, usage }, { ending: "completed" });
}

/** Its completion window passed with lines left: it finalizes towards expired. Only from in_progress. */
export function expire(current: StoredBatch, at: number): StoredBatch | undefined {
  if (current.batch.status !== "in_progress") return undefined;
  return changed(current, { status: "finalizing", finalizing_at: at }, { ending: "expired" });
}

export type Cancel =
  /** Store it: the batch is cancelling (its coordinator finalizes it). */
  | { kind: "cancel"; next: StoredBatch }
  /** It is cancelling already: nothing changes. */
  | { kind: "cancelling" }
  /** It is finalizing or final: it cannot be cancelled. */
  | { kind: "refused"; status: BatchStatus };

/** The user cancels: a validating or running batch goes cancelling. */
export function cancel(current: StoredBatch, at: number): Cancel {
  const { status } = current.batch;
  if (status === "cancelling") return { kind: "cancelling" };
  if (status !== "validating" && status !== "in_progress") return { kind: "refused", status };
  return { kind: "cancel", next: changed(current, { status: "cancelling", cancelling_at: at }) };
}

/**
 * The batch ends without files: a cancelling one is cancelled, any other live one fails for
 * `reason` (its input file vanished while it started). Undefined for a final record.
 */
export function endEarly(current: StoredBatch, reason: string, at: number): StoredBatch | undefined {
  const { status } = current.batch;
  if (isFinal(status)) return undefined;
  if (status === "cancelling") return changed(current, { status: "cancelled", cancelled_at: at });
  return changed(current, { status: "failed", failed_at: at, errors: { object: "list", data: [{ code: "batch_failed", message: reason, param: null, line: null }] } });
}

/** The files of a finalized batch (null: the file would be empty, so there is none). */
export interface BatchFiles {
  outputFileId: string | null;
  errorFileId: string | null;
}

/**
 * The batch's files are written: it ends as `ending`, with them, and with the counters and
 * usage read from its stored results. From finalizing, cancelling or in_progress; undefined
 * otherwise (another coordinator ended it meanwhile).
 */
export function finalize(current: StoredBatch, ending: Ending, files: BatchFiles, counts: LineCounts, usage: BatchUsage, at: number): StoredBatch | undefined {
  const { status } = current.batch;
  if (status !== "finalizing" && status !== "cancelling" && status !== "in_progress") return undefined;
  const batch: Partial<BatchObject> = {
    status: ending,
    finalizing_at: current.batch.finalizing_at ?? at,
    output_file_id: files.outputFileId,
    error_file_id: files.errorFileId,
    request_counts: { total: current.batch.request_counts.total, ...counts },
    usage,
  };
  if (ending === "completed") batch.completed_at = at;
  if (ending === "expired") batch.expired_at = at;
  if (ending === "cancelled") batch.cancelled_at = at;
  return changed(current, batch, { ending: null });
}

/**
 * What a finalizing batch's files hold, decided from its stored results (each line's first
 * result counts; a redelivered line ran twice) and its input: succeeded lines go to the output
 * file; failed lines to the error file as stored, then the lines without a result (lost, or
 * never run: batch_expired / batch_cancelled). The coordinator reads the results and writes the
 * files; this says where each line goes and counts them.
 */
export class FinalLines {
  private readonly tally: ResultTally;
  private readonly ok = new Set<number>();
  private readonly failed = new Set<number>();
  private readonly lost = new Set<number>();
  private readonly inErrorFile = new Set<number>();

  constructor(private readonly total: number, private readonly ending: Ending) {
    this.tally = new ResultTally(total);
  }

  /** `line` has had its result sorted already (a later result of it is left out). */
  has(line: number): boolean {
    return this.ok.has(line) || this.failed.has(line) || this.lost.has(line);
  }

  /**
   * Sorts the first result of `line` (undefined: stored, but it does not decode) and counts it:
   * "output" (it goes to the output file), "failed" (to the error file), "lost" (to the error
   * file as lost), or undefined for a line sorted already.
   */
  sort(line: number, result: ResultLine | undefined): "output" | "failed" | "lost" | undefined {
    if (this.has(line)) return undefined;
    this.tally.add(line, result);
    if (result === undefined) {
      this.lost.add(line);
      return "lost";
    }
    if (!succeeded(result)) {
      this.failed.add(line);
      return "failed";
    }
    this.ok.add(line);
    return "output";
  }

  /** Whether a stored result of `line` is the one written to the error file (its failed result, once). */
  toErrorFile(line: number): boolean {
    if (!this.failed.has(line) || this.inErrorFile.has(line)) return false;
    this.inErrorFile.add(line);
    return true;
  }

  /** Some input lines have neither output nor a failed result: the input is read for them. */
  get missing(): boolean {
    return this.ok.size + this.failed.size < this.total;
  }

  /** The error line of an input line without a result (lost, or never run), or undefined when it has one. */
  notRun(line: number, customId: string): ResultLine | undefined {
    if (this.ok.has(line) || this.failed.has(line)) return undefined;
    const why = this.lost.has(line) ? LOST_RESULT : neverRan(this.ending);
    return notRunLine(customId, why.code, why.message);
  }

  counts(): LineCounts {
    return this.tally.counts();
  }

  usage(): BatchUsage {
    return this.tally.usage();
  }
}
