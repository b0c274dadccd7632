import * as Schema from "effect/Schema";
import { errors } from "../errors/mod.js";
import { decodeBody } from "../openai/mod.js";
import type { ArtifactLimits, NewUpload } from "./artifact-store.js";

// Request bodies and parameters of the artifact and multipart routes, each bounded before
// anything reaches NATS or KV: sizes against the configured limits, part numbers and counts,
// filename and manifest lengths, checksum syntax.

/** The bounds a request is checked against (lib/config.ts artifactsConfig). */
export interface ArtifactRequestLimits extends ArtifactLimits {
  maxFilenameBytes: number;
  maxManifestBytes: number;
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

/** Room for one `{"part_number": N, "sha256": "<64 hex>"}` entry, spaces included. */
const PART_ENTRY_BYTES = 160;

/** The largest finish body the limits allow. */
export function finishBodyLimit(limits: Pick<ArtifactLimits, "maxParts">): number {
  return 1024 + limits.maxParts * PART_ENTRY_BYTES;
}

/** The largest create body the limits allow (a manifest may be all escapes). */
export function createBodyLimit(limits: Pick<ArtifactRequestLimits, "maxManifestBytes" | "maxFilenameBytes">): number {
  return 1024 + 6 * (limits.maxManifestBytes + limits.maxFilenameBytes);
}

/** POST /v1/multipart: `{filename, bytes, sha256?, manifest?}`. */
export function parseUploadCreate(json: unknown, limits: ArtifactRequestLimits): NewUpload {
  const body = decodeBody(
    Schema.Struct({
      filename: Schema.String,
      bytes: Schema.Number,
      sha256: Schema.optional(Schema.String),
      manifest: Schema.optional(Schema.String),
    }),
    json,
  );
  const filename = checkFilename(body.filename, "filename", limits);
  if (!Number.isInteger(body.bytes) || body.bytes < 1 || body.bytes > limits.maxBytes)
    throw errors.invalidParam("bytes", `Invalid value for 'bytes': expected an integer from 1 to ${limits.maxBytes}, got ${body.bytes}.`);
  if (body.bytes > limits.maxParts * limits.maxPartBytes)
    throw errors.invalidParam("bytes", `Invalid value for 'bytes': at most ${limits.maxParts} parts of ${limits.maxPartBytes} bytes hold ${limits.maxParts * limits.maxPartBytes} bytes.`);
  if (body.sha256 !== undefined && !SHA256_HEX.test(body.sha256))
    throw errors.invalidParam("sha256", "Invalid value for 'sha256': expected 64 lowercase hex digits.");
  const manifest = body.manifest === undefined ? undefined : checkManifest(body.manifest, limits);
  return { filename, bytes: body.bytes, ...(body.sha256 !== undefined ? { sha256: body.sha256 } : {}), ...(manifest !== undefined ? { manifest } : {}) };
}

/** POST /v1/multipart/{id}/finish: `{parts?: [{part_number, sha256?}]}` (an empty body sends no list). */
export function parseFinish(json: unknown, limits: ArtifactLimits): Array<{ part_number: number; sha256?: string }> | undefined {
  const body = decodeBody(
    Schema.Struct({
      parts: Schema.optional(Schema.Array(Schema.Struct({ part_number: Schema.Number, sha256: Schema.optional(Schema.String) }))),
    }),
    json,
  );
  if (body.parts === undefined) return undefined;
  if (body.parts.length > limits.maxParts) throw errors.invalidParam("parts", `Invalid value for 'parts': at most ${limits.maxParts} parts.`);
  return body.parts.map((p, i) => {
    checkPartNumber(p.part_number, `parts[${i}].part_number`, limits);
    if (p.sha256 !== undefined && !SHA256_HEX.test(p.sha256))
      throw errors.invalidParam(`parts[${i}].sha256`, `Invalid value for 'parts[${i}].sha256': expected 64 lowercase hex digits.`);
    return { part_number: p.part_number, ...(p.sha256 !== undefined ? { sha256: p.sha256 } : {}) };
  });
}

/** The `part_number` query parameter: an integer from 1 to the most parts. */
export function parsePartNumber(raw: string | null, limits: Pick<ArtifactLimits, "maxParts">): number {
  if (raw === null) throw errors.missingParam("part_number");
  const n = /^\d{1,10}$/.test(raw) ? Number(raw) : NaN;
  checkPartNumber(n, "part_number", limits, raw);
  return n;
}

function checkPartNumber(n: number, param: string, limits: Pick<ArtifactLimits, "maxParts">, shown: string = String(n)): void {
  if (!Number.isInteger(n) || n < 1 || n > limits.maxParts)
    throw errors.invalidParam(param, `Invalid value for '${param}': expected an integer from 1 to ${limits.maxParts}, got '${shown.slice(0, 32)}'.`);
}

export function checkFilename(filename: string, param: string, limits: Pick<ArtifactRequestLimits, "maxFilenameBytes">): string {
  if (filename.length === 0) throw errors.invalidParam(param, `Invalid value for '${param}': the filename is empty.`);
  if (Buffer.byteLength(filename) > limits.maxFilenameBytes)
    throw errors.invalidParam(param, `Invalid value for '${param}': a filename is at most ${limits.maxFilenameBytes} bytes.`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f/\\]/.test(filename))
    throw errors.invalidParam(param, `Invalid value for '${param}': a filename has no control characters and no path separators.`);
  if (filename === "." || filename === "..") throw errors.invalidParam(param, `Invalid value for '${param}': '${filename}' names a directory, not a file.`);
  return filename;
}

export function checkManifest(manifest: string, limits: Pick<ArtifactRequestLimits, "maxManifestBytes">): string {
  if (Buffer.byteLength(manifest) > limits.maxManifestBytes)
    throw errors.invalidParam("manifest", `Invalid value for 'manifest': a manifest is at most ${limits.maxManifestBytes} bytes.`);
  if (manifest.includes("\u0000")) throw errors.invalidParam("manifest", "Invalid value for 'manifest': NUL characters are not allowed.");
  return manifest;
}
