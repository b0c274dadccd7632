import type { Readable } from "node:stream";
import { FILE_PURPOSES, FileTooLargeError, type FileDescription, type FileObject, type FilePurpose, type FileStore } from "../../modules/files/mod.js";
import { listObject, listQuery, expiresAtFrom, parseFileUpdate } from "../../modules/openai/mod.js";
import { errors, shown, type DomainError } from "../../modules/errors/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import { readMultipart } from "../http/multipart.js";
import type { Router } from "../http/router.js";
import { streamBody } from "../http/stream-body.js";

export interface FileRouteDeps {
  store: FileStore;
  /** Largest file of any purpose. */
  maxFileBytes: number;
  /** Largest batch input file. */
  maxBatchFileBytes: number;
  maxBodyBytes: number;
}

/** Room for the form's boundaries and fields around the file part. */
const FORM_OVERHEAD_BYTES = 1024 * 1024;
/** OpenAI: batch input files expire after 30 days unless the upload says otherwise. */
const BATCH_DEFAULT_TTL_S = 30 * 24 * 3600;

/**
 * /v1/files: multipart uploads streamed into the Object Store, listing, retrieval, contents
 * (streamed with backpressure), deletion, and POST /v1/files/{id} to change a file's expiry.
 */
export function registerFileRoutes(router: Router, deps: FileRouteDeps): void {
  const project = (ex: HttpExchange) => ex.principal!.projectId;
  const notFound = (id: string) => errors.notFound(`No such File object: ${shown(id)}`, "id");

  // A refused upload may still be arriving: the exchange drains a small rest and holds a larger one unread.
  router.post("/v1/files", async (ex) => ex.json(200, await upload(ex, deps, project(ex))));

  router.get("/v1/files", async (ex) => {
    const params = ex.searchParams();
    const query = listQuery(params, { defaultLimit: 10_000, maxLimit: 10_000, orders: true });
    const purpose = params.get("purpose") ?? undefined;
    const page = await deps.store.list(project(ex), { ...query, purpose });
    ex.json(200, listObject(page));
  });

  router.get("/v1/files/:id", async (ex, { id }) => {
    const file = await deps.store.get(project(ex), id!);
    if (!file) throw notFound(id!);
    ex.json(200, file);
  });

  router.post("/v1/files/:id", async (ex, { id }) => {
    const update = parseFileUpdate(await ex.readJson(deps.maxBodyBytes));
    const current = await deps.store.get(project(ex), id!);
    if (!current) throw notFound(id!);
    const expiresAt = update.expires_after === null ? null : expiresAtFrom(update.expires_after, current.created_at);
    if (expiresAt !== null && expiresAt * 1000 <= Date.now())
      throw errors.invalidParam("expires_after.seconds", "Invalid value for 'expires_after.seconds': the file would already have expired.");
    const file = await deps.store.setExpiry(project(ex), id!, expiresAt);
    if (!file) throw notFound(id!);
    ex.json(200, file);
  });

  router.delete("/v1/files/:id", async (ex, { id }) => {
    if (!(await deps.store.delete(project(ex), id!))) throw notFound(id!);
    ex.json(200, { id, object: "file", deleted: true });
  });

  router.get("/v1/files/:id/content", async (ex, { id }) => {
    const file = await deps.store.get(project(ex), id!);
    if (!file) throw notFound(id!);
    ex.responseHeaders["content-disposition"] = `attachment; filename="${file.filename.replace(/["\\\r\n]/g, "_")}"`;
    await streamBody(ex, "application/octet-stream", deps.store.content(file.id));
  });
}

async function upload(ex: HttpExchange, deps: FileRouteDeps, project: string): Promise<FileObject> {
  const body = ex.bodyChunks(deps.maxFileBytes + FORM_OVERHEAD_BYTES);
  const result = await readMultipart<FileObject>(body, { contentType: ex.headers["content-type"], fileField: "file" }, {
    onFile: (stream: Readable, info, form) =>
      deps.store.upload(
        {
          project,
          maxBytes: deps.maxFileBytes,
          describe: async (bytes) => describeUpload(await form, info.filename, bytes, deps),
        },
        stream,
      ).catch((err: unknown) => {
        if (err instanceof FileTooLargeError) throw tooLarge(deps.maxFileBytes, "any purpose");
        throw err;
      }),
  });
  if (!result.file) {
    // Report the form's own problems (purpose) before the missing file.
    describeFields(result.fields);
    throw errors.missingParam("file");
  }
  return result.file;
}

function describeFields(fields: Record<string, string>): { purpose: FilePurpose; expiresAfterSeconds: number | undefined } {
  for (const name of Object.keys(fields))
    if (name !== "purpose" && name !== "expires_after[anchor]" && name !== "expires_after[seconds]") throw errors.unknownParam(name);
  const purpose = fields.purpose;
  if (purpose === undefined) throw errors.missingParam("purpose");
  if (!(FILE_PURPOSES as readonly string[]).includes(purpose))
    throw errors.invalidParam("purpose", `Invalid value for 'purpose': expected one of ${FILE_PURPOSES.map((p) => `'${p}'`).join(", ")}, got '${purpose}'.`);
  const anchor = fields["expires_after[anchor]"];
  const seconds = fields["expires_after[seconds]"];
  if (anchor === undefined && seconds === undefined) return { purpose: purpose as FilePurpose, expiresAfterSeconds: undefined };
  if (anchor === undefined) throw errors.missingParam("expires_after.anchor");
  if (seconds === undefined) throw errors.missingParam("expires_after.seconds");
  const expiresAt = expiresAtFrom({ anchor, seconds: /^\d+$/.test(seconds) ? Number(seconds) : NaN }, 0);
  return { purpose: purpose as FilePurpose, expiresAfterSeconds: expiresAt ?? undefined };
}

function describeUpload(fields: Record<string, string>, filename: string, bytes: number, deps: FileRouteDeps): FileDescription {
  const { purpose, expiresAfterSeconds } = describeFields(fields);
  if (!filename) throw errors.invalidParam("file", "The file part has no filename.");
  if (purpose === "batch") {
    if (bytes > deps.maxBatchFileBytes) throw tooLarge(deps.maxBatchFileBytes, "batch");
    if (!filename.toLowerCase().endsWith(".jsonl"))
      throw errors.invalidParam("file", `Invalid file format for Batch API: '${filename}'. Batch input files must be .jsonl files.`, "invalid_file_format");
  }
  const createdAt = Math.floor(Date.now() / 1000);
  const ttl = expiresAfterSeconds ?? (purpose === "batch" ? BATCH_DEFAULT_TTL_S : undefined);
  return { filename, purpose, createdAt, expiresAt: ttl === undefined ? null : createdAt + ttl };
}

function tooLarge(limit: number, purpose: string): DomainError {
  return errors.invalidParam("file", `File is too large: files for ${purpose} may be at most ${limit} bytes.`, "file_too_large");
}
