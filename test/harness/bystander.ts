import { createHash } from "node:crypto";
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { testCatalog } from "./processes.js";

// The bystander: a sim model whose streams outlast a case under test (the tiny llama model
// finishes in well under a second), streamed by another tenant to show the case did not disturb it.

export const BYSTANDER_MODEL = "test/sim-bystander";
export const BYSTANDER_TOKENS_PER_SECOND = 100;

/**
 * The test catalog plus the bystander's sim model (and `extraModels`), written to a file named
 * after its content: the same catalog is the same file, in every process that asks for it.
 */
export function bystanderCatalog(extraModels: Array<Record<string, unknown>> = []): string {
  const catalog = parse(readFileSync(testCatalog, "utf8")) as { models: Array<Record<string, unknown>> };
  catalog.models.push({
    id: BYSTANDER_MODEL,
    engine: "sim",
    context_length: 4096,
    max_output_tokens: 4096,
    slots: 32,
    queue_limit: 64,
    sim: { tokens_per_second: BYSTANDER_TOKENS_PER_SECOND, first_token_latency_ms: 0 },
  }, ...extraModels);
  const text = stringify(catalog);
  const path = join(tmpdir(), `tributary-catalog-${createHash("sha256").update(text).digest("hex").slice(0, 16)}.yaml`);
  if (!existsSync(path)) {
    writeFileSync(`${path}.${process.pid}`, text);
    renameSync(`${path}.${process.pid}`, path);
  }
  return path;
}
