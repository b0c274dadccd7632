import OpenAI, { toFile } from "openai";
import type { Batch } from "openai/resources/batches";
import { TEST_MODEL } from "./processes.js";

// Helpers for batch tests: build JSONL input, upload it, poll a batch, read its files.

export interface LineSpec {
  custom_id: string;
  method?: string;
  url?: string;
  body?: unknown;
}

export function chatLine(customId: string, body: Record<string, unknown> = {}): LineSpec {
  return {
    custom_id: customId,
    method: "POST",
    url: "/v1/chat/completions",
    body: { model: TEST_MODEL, messages: [{ role: "user", content: `Story ${customId}` }], max_tokens: 8, temperature: 0.8, ...body },
  };
}

export const jsonl = (lines: Array<LineSpec | string>) => lines.map((l) => (typeof l === "string" ? l : JSON.stringify(l))).join("\n") + "\n";

export async function uploadBatchFile(client: OpenAI, content: string | Buffer, name = "input.jsonl") {
  return client.files.create({ file: await toFile(Buffer.from(content), name), purpose: "batch" });
}

export async function createBatch(client: OpenAI, lines: Array<LineSpec | string>, extra: Record<string, unknown> = {}) {
  const file = await uploadBatchFile(client, jsonl(lines));
  return client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", ...extra } as never);
}

const FINAL = new Set(["completed", "failed", "expired", "cancelled"]);

/** Polls until the batch is final (or `until` says stop), within `timeoutMs`. */
export async function waitForBatch(client: OpenAI, id: string, timeoutMs = 120_000, until: (b: Batch) => boolean = (b) => FINAL.has(b.status)): Promise<Batch> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const batch = await client.batches.retrieve(id);
    if (until(batch)) return batch;
    if (Date.now() > deadline) throw new Error(`batch ${id} still ${batch.status} after ${timeoutMs} ms: ${JSON.stringify(batch.request_counts)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

export interface ResultLine {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: any } | null;
  error: { code: string; message: string } | null;
}

export async function readJsonlFile(client: OpenAI, fileId: string | null | undefined): Promise<ResultLine[]> {
  if (!fileId) return [];
  const res = await client.files.content(fileId);
  const text = await res.text();
  return text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l) as ResultLine);
}

/** Output and error lines of a final batch, and a count of how often each custom_id appears. */
export async function batchResults(client: OpenAI, batch: Batch) {
  const output = await readJsonlFile(client, batch.output_file_id);
  const errors = await readJsonlFile(client, batch.error_file_id);
  const seen = new Map<string, number>();
  for (const l of [...output, ...errors]) seen.set(l.custom_id, (seen.get(l.custom_id) ?? 0) + 1);
  return { output, errors, seen };
}
