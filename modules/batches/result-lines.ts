import type { KV } from "@nats-io/kv";
import { createRecord } from "../../lib/nats/kv-records.js";
import { succeeded, tokenUsage, type ResultLine } from "../openai/mod.js";
import type { BatchUsage } from "./batch-store.js";

// The lines of output and error files, and their storage while a batch runs: one KV entry per
// finished input line, written create-only, so a line that ran twice (a redelivery after a
// crash) still appears once.

export const resultKey = (batchId: string, line: number) => `${batchId}.${line}`;

/** Stores a line's result unless one is there already. True when this call wrote it. */
export async function storeResult(results: KV, batchId: string, line: number, result: ResultLine): Promise<boolean> {
  return (await createRecord(results, resultKey(batchId, line), result)) !== undefined;
}

type LineUsage = Record<string, number | undefined> & {
  completion_tokens_details?: { reasoning_tokens?: number };
  output_tokens_details?: { reasoning_tokens?: number };
};

/** Token usage of a successful line's response body (chat completions and responses shapes). */
export function usageOf(line: ResultLine): { input: number; output: number; reasoning: number } {
  const usage = (line.response?.body as { usage?: LineUsage } | undefined)?.usage;
  if (!usage) return { input: 0, output: 0, reasoning: 0 };
  const reasoning = usage.completion_tokens_details?.reasoning_tokens ?? usage.output_tokens_details?.reasoning_tokens ?? 0;
  return { input: usage.prompt_tokens ?? usage.input_tokens ?? 0, output: usage.completion_tokens ?? usage.output_tokens ?? 0, reasoning: typeof reasoning === "number" ? reasoning : 0 };
}

/** Counts finished lines (each once) and their usage. */
export class ResultTally {
  private readonly seen: Uint8Array;
  completed = 0;
  failed = 0;
  input = 0;
  output = 0;
  reasoning = 0;

  constructor(readonly total: number) {
    this.seen = new Uint8Array(Math.max(1, total));
  }

  get finished(): number {
    return this.completed + this.failed;
  }

  /** Counts line `line` once; an undefined result (one that was stored but does not decode) counts as failed. */
  add(line: number, result: ResultLine | undefined): void {
    if (line < 0 || line >= this.total || this.seen[line]) return;
    this.seen[line] = 1;
    if (result && succeeded(result)) {
      this.completed++;
      const u = usageOf(result);
      this.input += u.input;
      this.output += u.output;
      this.reasoning += u.reasoning;
    } else this.failed++;
  }

  /** The counters of a batch object (its total aside). */
  counts(): { completed: number; failed: number } {
    return { completed: this.completed, failed: this.failed };
  }

  usage(): BatchUsage {
    return tokenUsage(this.input, this.output, 0, this.reasoning);
  }
}
