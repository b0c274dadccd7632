import * as Schema from "effect/Schema";
import { batchStates, emptyUsage, purgeBatchLeftovers, type BatchObject, type BatchStatus, type BatchStore, type StoredBatch, LINE_EXECUTORS, OPENAI_BATCH_ENDPOINTS } from "../../modules/batches/mod.js";
import type { FileStore } from "../../modules/files/mod.js";
import { newSortableId } from "../../lib/ids.js";
import { decodeBody, Metadata, Nullable, ExpiresAfterSchema, expiresAtFrom, listObject, listQuery } from "../../modules/openai/mod.js";
import { errors, shown } from "../../modules/errors/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";

export interface BatchRouteDeps {
  batches: BatchStore;
  files: FileStore;
  maxBodyBytes: number;
}

const CreateBatchSchema = Schema.Struct({
  input_file_id: Schema.String,
  endpoint: Schema.String,
  completion_window: Schema.String,
  metadata: Nullable(Metadata),
  output_expires_after: Nullable(ExpiresAfterSchema),
});

const MAX_WINDOW_S = 24 * 3600;

/**
 * OpenAI accepts only "24h". Tributary also takes shorter windows written the same way
 * ("1h", "30m", "90s"): a batch that must be done sooner, and a way to test expiry.
 */
export function completionWindowSeconds(window: string): number {
  const m = /^(\d{1,6})([hms])$/.exec(window);
  const seconds = m ? Number(m[1]) * { h: 3600, m: 60, s: 1 }[m[2] as "h" | "m" | "s"] : NaN;
  if (!(seconds >= 1 && seconds <= MAX_WINDOW_S))
    throw errors.invalidParam("completion_window", `Invalid value for 'completion_window': expected '24h' (or a shorter window such as '1h' or '90s'), got '${window}'.`);
  return seconds;
}

/**
 * /v1/batches: create (validated synchronously as far as the request itself goes; the input
 * file is validated by the coordinator, status "validating"), list, retrieve, cancel, delete.
 */
export function registerBatchRoutes(router: Router, deps: BatchRouteDeps): void {
  const project = (ex: HttpExchange) => ex.principal!.projectId;
  const notFound = (id: string) => errors.notFound(`No batch found with id '${shown(id)}'.`, "batch_id");

  router.post("/v1/batches", async (ex) => {
    const body = decodeBody(CreateBatchSchema, await ex.readJson(deps.maxBodyBytes));
    if (!LINE_EXECUTORS.has(body.endpoint)) {
      const known = (OPENAI_BATCH_ENDPOINTS as readonly string[]).includes(body.endpoint);
      throw errors.invalidParam(
        "endpoint",
        known
          ? `The endpoint '${body.endpoint}' is not supported in batches by this server. Supported: ${[...LINE_EXECUTORS.keys()].join(", ")}.`
          : `Invalid value for 'endpoint': expected one of ${[...LINE_EXECUTORS.keys()].map((e) => `'${e}'`).join(", ")}, got '${body.endpoint}'.`,
        known ? "unsupported_value" : "invalid_value",
      );
    }
    const windowSeconds = completionWindowSeconds(body.completion_window);
    const outputTtl = body.output_expires_after ? expiresAtFrom(body.output_expires_after, 0, "output_expires_after") : null;
    const file = await deps.files.get(project(ex), body.input_file_id);
    if (!file) throw errors.invalidParam("input_file_id", `No such file: '${body.input_file_id}'.`, "file_not_found");
    if (file.purpose !== "batch")
      throw errors.invalidParam("input_file_id", `The file '${file.id}' has purpose '${file.purpose}': batch input files must be uploaded with purpose 'batch'.`, "invalid_file_purpose");

    const createdAt = Math.floor(Date.now() / 1000);
    const batch: BatchObject = {
      id: newSortableId("batch_"),
      object: "batch",
      endpoint: body.endpoint,
      model: null,
      errors: null,
      input_file_id: file.id,
      completion_window: body.completion_window,
      status: "validating",
      output_file_id: null,
      error_file_id: null,
      created_at: createdAt,
      in_progress_at: null,
      expires_at: createdAt + windowSeconds,
      finalizing_at: null,
      completed_at: null,
      failed_at: null,
      expired_at: null,
      cancelling_at: null,
      cancelled_at: null,
      request_counts: { total: 0, completed: 0, failed: 0 },
      metadata: body.metadata ?? null,
      usage: emptyUsage(),
    };
    const record: StoredBatch = { batch, project: project(ex), organization: ex.principal!.organizationId, keyId: ex.principal!.keyId, outputTtlSeconds: outputTtl, enqueued: false, ending: null };
    await deps.batches.create(record);
    ex.json(200, batch);
  });

  router.get("/v1/batches", async (ex) => {
    const query = listQuery(ex.searchParams(), { defaultLimit: 20, maxLimit: 100, orders: false });
    const page = await deps.batches.list(project(ex), query);
    ex.json(200, listObject(page));
  });

  router.get("/v1/batches/:id", async (ex, { id }) => {
    const record = await deps.batches.get(project(ex), id!);
    if (!record) throw notFound(id!);
    ex.json(200, record.batch);
  });

  router.post("/v1/batches/:id/cancel", async (ex, { id }) => {
    let refused: BatchStatus | undefined;
    const record = await deps.batches.update(project(ex), id!, (r) => {
      const move = batchStates.cancel(r, Math.floor(Date.now() / 1000));
      refused = move.kind === "refused" ? move.status : undefined;
      return move.kind === "cancel" ? move.next : undefined;
    });
    if (!record) throw notFound(id!);
    if (refused)
      throw errors.invalidParam("batch_id", `Cannot cancel a batch with status '${refused}'.`, "batch_not_cancellable");
    ex.json(200, record.batch);
  });

  router.delete("/v1/batches/:id", async (ex, { id }) => {
    const record = await deps.batches.get(project(ex), id!);
    if (!record) throw notFound(id!);
    if (!batchStates.isFinal(record.batch.status))
      throw errors.invalidParam(
        "batch_id",
        `Cannot delete a batch with status '${record.batch.status}': only batches that are completed, failed, expired or cancelled can be deleted (cancel it first).`,
        "batch_not_final",
      );
    await deps.batches.delete(project(ex), id!);
    // Leftovers of a batch finalised by a coordinator that died before its cleanup.
    await purgeBatchLeftovers(deps.batches.handles, id!);
    ex.json(200, { id, object: "batch", deleted: true });
  });
}
