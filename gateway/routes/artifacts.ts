import type { Readable } from "node:stream";
import {
  type Artifact,
  type ArtifactRequestLimits,
  type ArtifactStatus,
  type ArtifactStore,
  checkFilename,
  checkManifest,
  createBodyLimit,
  finishBodyLimit,
  parseFinish,
  parsePartNumber,
  parseUploadCreate,
} from "../../modules/artifacts/mod.js";
import { listObject, listQuery } from "../../modules/openai/mod.js";
import { errors } from "../../modules/errors/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import { readMultipart } from "../http/multipart.js";
import type { Router } from "../http/router.js";
import { streamBody } from "../http/stream-body.js";

export interface ArtifactRouteDeps {
  store: ArtifactStore;
  limits: ArtifactRequestLimits;
}

/** Room for the form's boundaries and part headers around the file and manifest parts. */
const FORM_OVERHEAD_BYTES = 64 * 1024;
// The form's manifest field is read a little past its limit (the parser truncates there), so
// that checkManifest refuses one just past the limit with the limit named.

/**
 * /v1/artifacts (single-shot uploads, get, list, content, delete) and /v1/multipart (uploads in
 * numbered parts, then finish). Bytes stream from the socket into the Object Store as they
 * arrive; every size, count and name is bounded by `limits` before it touches NATS.
 */
export function registerArtifactRoutes(router: Router, deps: ArtifactRouteDeps): void {
  const { store, limits } = deps;
  const project = (ex: HttpExchange) => ex.principal!.projectId;
  const notFound = (id: string) => errors.notFound(`No such artifact: ${id.slice(0, 128)}`, "id");

  router.post("/v1/artifacts", async (ex) => ex.json(200, await uploadSingle(ex, deps, project(ex))));

  router.get("/v1/artifacts", async (ex) => {
    const params = ex.searchParams();
    const query = listQuery(params, { defaultLimit: 100, maxLimit: 1000, orders: true });
    const status = params.get("status") ?? "ready";
    if (status !== "ready" && status !== "uploading")
      throw errors.invalidParam("status", `Invalid value for 'status': expected 'ready' or 'uploading', got '${status.slice(0, 32)}'.`);
    const page = await store.list(project(ex), { ...query, status: status as ArtifactStatus });
    ex.json(200, listObject(page));
  });

  router.get("/v1/artifacts/:id", async (ex, { id }) => {
    const artifact = await store.get(project(ex), id!);
    if (!artifact) throw notFound(id!);
    ex.json(200, artifact);
  });

  router.get("/v1/artifacts/:id/content", async (ex, { id }) => {
    const artifact = await store.get(project(ex), id!);
    if (!artifact || artifact.status !== "ready") throw notFound(id!);
    ex.responseHeaders["content-disposition"] = `attachment; filename="${artifact.filename.replace(/["\\\r\n]/g, "_")}"`;
    ex.responseHeaders["x-artifact-sha256"] = artifact.sha256 ?? "";
    await streamBody(ex, "application/octet-stream", store.content(project(ex), artifact.id));
  });

  router.delete("/v1/artifacts/:id", async (ex, { id }) => {
    if (!(await store.delete(project(ex), id!))) throw notFound(id!);
    ex.json(200, { id, object: "artifact", deleted: true });
  });

  router.post("/v1/multipart", async (ex) => {
    const upload = parseUploadCreate(await ex.readJson(createBodyLimit(limits)), limits);
    ex.json(200, await store.createUpload(project(ex), upload, limits));
  });

  router.get("/v1/multipart/:id/parts", async (ex, { id }) => {
    const data = await store.listParts(project(ex), id!);
    ex.json(200, { object: "list", data, has_more: false });
  });

  // A refused part may still be arriving: the exchange drains a small rest and holds a larger one unread.
  router.post("/v1/multipart/:id/part", async (ex, { id }) => {
    const partNumber = parsePartNumber(ex.searchParams().get("part_number"), limits);
    ex.json(200, await store.putPart(project(ex), id!, partNumber, ex.bodyChunks(limits.maxPartBytes), limits));
  });

  router.post("/v1/multipart/:id/finish", async (ex, { id }) => {
    const body = await ex.readBody(finishBodyLimit(limits));
    let json: unknown = {};
    if (body.length > 0) {
      try {
        json = JSON.parse(body.toString("utf8"));
      } catch (err) {
        throw errors.invalidJson((err as Error).message);
      }
    }
    ex.json(200, await store.finish(project(ex), id!, parseFinish(json, limits), limits));
  });
}

async function uploadSingle(ex: HttpExchange, deps: ArtifactRouteDeps, project: string): Promise<Artifact> {
  const { limits } = deps;
  const body = ex.bodyChunks(limits.maxSingleUploadBytes + limits.maxManifestBytes + FORM_OVERHEAD_BYTES);
  const tooLarge = () =>
    errors.invalidParam("file", `Artifact is too large: a single-shot upload is at most ${limits.maxSingleUploadBytes} bytes; send larger ones in parts (POST /v1/multipart).`, "file_too_large");
  const result = await readMultipart<Artifact>(
    body,
    // A filename with a path in it is refused (checkFilename), not silently cut to its last part.
    { contentType: ex.headers["content-type"], fileField: "file", maxFields: 4, maxFieldBytes: limits.maxManifestBytes + 1024, preservePath: true },
    {
      onFile: (stream: Readable, info, form) =>
        deps.store.upload(
          {
            project,
            maxBytes: limits.maxSingleUploadBytes,
            tooLarge,
            describe: async () => {
              const fields = checkFields(await form);
              const filename = checkFilename(info.filename, "file", limits);
              return { filename, manifest: fields.manifest === undefined ? null : checkManifest(fields.manifest, limits) };
            },
          },
          stream,
        ),
    },
  );
  if (!result.file) {
    checkFields(result.fields);
    throw errors.missingParam("file");
  }
  return result.file;
}

function checkFields(fields: Record<string, string>): { manifest?: string } {
  for (const name of Object.keys(fields)) if (name !== "manifest") throw errors.unknownParam(name);
  return fields;
}
