import busboy from "busboy";
import type { Readable } from "node:stream";
import { errors } from "../../modules/errors/mod.js";

// A streaming multipart/form-data reader: form fields are collected (they are small), the one
// file part is handed over as a stream while the body is still arriving, so an upload flows
// from the socket to storage without ever sitting whole in memory.

export interface MultipartHandlers {
  /**
   * Called for the file part named `fileField`; the returned promise settles when it is stored.
   * `form` resolves with every field once the whole form was read (fields may follow the file),
   * or rejects when the form turned out bad.
   */
  onFile(stream: Readable, info: { filename: string; mimeType: string }, form: Promise<Record<string, string>>): Promise<unknown>;
}

export interface MultipartResult<F> {
  fields: Record<string, string>;
  /** What onFile resolved to; undefined when the form had no file part. */
  file: F | undefined;
}

export interface MultipartOptions {
  contentType: string | undefined;
  fileField: string;
  maxFields?: number;
  maxFieldBytes?: number;
  /**
   * Hand over the file part's filename as sent, path and all, for the route to refuse; by
   * default the parser keeps only what follows the last `/` or `\\`.
   */
  preservePath?: boolean;
}

/**
 * Feeds `body` into a multipart parser. Resolves once the whole form was read and the file
 * handler finished; rejects with the first failure (the body's own, a malformed form, or the
 * file handler's), after the file handler has settled (so it could clean up).
 */
export async function readMultipart<F>(body: AsyncIterable<Buffer>, options: MultipartOptions, handlers: MultipartHandlers): Promise<MultipartResult<F>> {
  const type = options.contentType ?? "";
  if (!/^multipart\/form-data\b/i.test(type))
    throw errors.invalidParam("file", `Invalid Content-Type '${type || "(none)"}': uploads are sent as multipart/form-data.`, "invalid_content_type");
  let parser: busboy.Busboy;
  try {
    parser = busboy({
      headers: { "content-type": type },
      preservePath: options.preservePath ?? false,
      limits: { files: 1, fields: options.maxFields ?? 32, fieldSize: options.maxFieldBytes ?? 64 * 1024, parts: (options.maxFields ?? 32) + 4 },
    });
  } catch (err) {
    throw errors.invalidParam("file", `Malformed multipart body: ${(err as Error).message}.`);
  }
  const fields: Record<string, string> = {};
  let settleForm!: { resolve: (f: Record<string, string>) => void; reject: (e: unknown) => void };
  const form = new Promise<Record<string, string>>((resolve, reject) => (settleForm = { resolve, reject }));
  form.catch(() => {});
  let filePromise: Promise<unknown> | undefined;
  let failure: unknown;
  // The feeding loop may be waiting for the parser to drain: a failure (the file handler stopped
  // reading, the form went bad) must wake it, since that drain will never come.
  let wakeFeeder: (() => void) | undefined;
  // ...and so must it end the wait for the parser to close: a file handler that stopped reading
  // after the whole body was fed leaves the parser waiting forever for its file stream to drain.
  let failed!: () => void;
  const failedOnce = new Promise<void>((resolve) => (failed = resolve));
  const fail = (err: unknown) => {
    failure ??= err;
    wakeFeeder?.();
    failed();
  };
  const closed = new Promise<void>((resolve) => {
    parser.on("close", resolve);
    parser.on("error", (err) => {
      fail(errors.invalidParam("file", `Malformed multipart body: ${(err as Error).message}.`));
      resolve();
    });
  });
  parser.on("field", (name, value, info) => {
    if (info.valueTruncated) fail(errors.invalidParam(name, `The form field '${name}' is too long.`));
    fields[name] = value;
  });
  parser.on("file", (name, stream, info) => {
    if (name !== options.fileField || filePromise) {
      stream.resume();
      fail(errors.unknownParam(name));
      return;
    }
    filePromise = handlers.onFile(stream, { filename: info.filename ?? "", mimeType: info.mimeType }, form);
    filePromise.catch(fail);
  });
  parser.on("filesLimit", () => fail(errors.invalidParam(options.fileField, "Only one file may be uploaded per request.")));
  parser.on("fieldsLimit", () => fail(errors.invalidParam("file", "Too many form fields.")));
  parser.on("partsLimit", () => fail(errors.invalidParam("file", "Too many form parts.")));

  const drainOrFailure = () =>
    new Promise<void>((resolve) => {
      if (failure) return resolve();
      const done = () => {
        parser.off("drain", done);
        wakeFeeder = undefined;
        resolve();
      };
      wakeFeeder = done;
      parser.once("drain", done);
    });

  try {
    for await (const chunk of body) {
      if (failure) break;
      if (!parser.write(chunk)) await drainOrFailure();
    }
    if (!failure) parser.end();
  } catch (err) {
    fail(err);
  }
  if (!failure) await Promise.race([closed, failedOnce]);
  if (failure) parser.destroy(failure instanceof Error ? failure : new Error(String(failure)));
  if (failure) settleForm.reject(failure);
  else settleForm.resolve(fields);
  const file = await filePromise?.catch((err: unknown) => {
    fail(err);
    return undefined;
  });
  if (failure) throw failure;
  return { fields, file: file as F | undefined };
}
