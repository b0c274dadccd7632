import { closeSync, openSync, readSync, statSync } from "node:fs";
import { basename, resolve } from "node:path";
import { stringify } from "yaml";
import { CatalogError } from "./load.js";
import type { ModelEntry } from "./schema.js";

// `tributary start --model X`: a catalog of one model made from a GGUF file alone, a local path
// or a Hugging Face file address. Its id is the file's name under a provider (ids are
// provider/name): `local/stories260K` for stories260K.gguf, `Qwen/Qwen3-0.6B-Q8_0` for that file
// of Qwen's repository. Everything else is the catalog's defaults, and a context no longer than
// the model was trained for.

/** The context a model made from a file alone gets, unless it was trained for less. */
export const SINGLE_MODEL_CONTEXT_LENGTH = 4096;

export interface SingleModel {
  id: string;
  /** An absolute path, or an `hf:` reference (catalog form). */
  source: string;
  /** The local file (undefined for a Hugging Face file, not downloaded yet). */
  path: string | undefined;
}

const HF_FILE_URL = "https://huggingface.co/OWNER/REPO/resolve/main/FILE.gguf";

/**
 * The model `arg` names: a path to a readable GGUF file, an https://huggingface.co/ address of
 * one .gguf file (resolve/ or blob/), or an `hf:OWNER/REPO/FILE.gguf[@REVISION]` reference.
 * Anything else is a CatalogError saying what is wrong.
 */
export function singleModelOf(arg: string, cwd: string = process.cwd()): SingleModel {
  if (/^https?:\/\//i.test(arg)) return huggingFaceModel(arg);
  if (arg.startsWith("hf:")) {
    const m = /^hf:([^/\s]+)\/([^/\s]+)\/([^@\s]+\.gguf)(?:@(\S+))?$/.exec(arg);
    if (!m) throw new CatalogError(`'${arg}' is not a Hugging Face reference: expected hf:OWNER/REPO/FILE.gguf[@REVISION]`);
    return { id: idOf(m[1]!, m[3]!), source: arg, path: undefined };
  }
  const path = resolve(cwd, arg);
  let size: number;
  try {
    const stat = statSync(path);
    if (!stat.isFile()) throw new CatalogError(`${path} is not a file`);
    size = stat.size;
  } catch (err) {
    if (err instanceof CatalogError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    throw new CatalogError(code === "ENOENT" ? `no such file: ${path}` : `cannot read ${path}: ${(err as Error).message}`);
  }
  // The header: "GGUF", then the format's version (1 to 3 so far).
  const header = Buffer.alloc(8);
  try {
    const fd = openSync(path, "r");
    try {
      readSync(fd, header, 0, 8, 0);
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    throw new CatalogError(`cannot read ${path}: ${(err as NodeJS.ErrnoException).code === "EACCES" ? "permission denied" : (err as Error).message}`);
  }
  if (size < 8 || header.toString("latin1", 0, 4) !== "GGUF") throw new CatalogError(`${path} is not a GGUF model file (it does not start with "GGUF")`);
  const version = header.readUInt32LE(4);
  if (version < 1 || version > 3) throw new CatalogError(`${path} is not a GGUF model file this version reads (GGUF version ${version})`);
  return { id: idOf("local", path), source: path, path };
}

/** https://huggingface.co/OWNER/REPO/(resolve|blob)/REVISION/PATH.gguf as an `hf:` reference. */
function huggingFaceModel(arg: string): SingleModel {
  let url: URL;
  try {
    url = new URL(arg);
  } catch {
    throw new CatalogError(`'${arg}' is not a valid address`);
  }
  if (url.protocol !== "https:" || url.hostname !== "huggingface.co")
    throw new CatalogError(`'${arg}': only Hugging Face addresses (${HF_FILE_URL}) and local files can be served`);
  const parts = url.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  const [owner, repo, kind, revision, ...file] = parts;
  if (!owner || !repo || (kind !== "resolve" && kind !== "blob") || !revision || file.length === 0 || !file.at(-1)!.endsWith(".gguf"))
    throw new CatalogError(`'${arg}' names no .gguf file: give the address of one, as ${HF_FILE_URL}`);
  const path = file.join("/");
  return { id: idOf(owner, path), source: `hf:${owner}/${repo}/${path}${revision === "main" ? "" : `@${revision}`}`, path: undefined };
}

/** provider/name, each made of the characters a catalog id allows. */
function idOf(provider: string, file: string): string {
  const clean = (text: string) => text.replace(/[^A-Za-z0-9._:-]+/g, "-").replace(/^[^A-Za-z0-9]+/, "") || "model";
  return `${clean(provider).replace(/:/g, "-")}/${clean(basename(file).replace(/\.gguf$/i, ""))}`;
}

/**
 * The catalog text serving `model` alone. For a local file, the context is the file's trained
 * context when that is shorter than SINGLE_MODEL_CONTEXT_LENGTH (read from its metadata).
 */
export async function singleModelCatalog(model: SingleModel): Promise<string> {
  const trained = model.path ? await trainedContextLength(model.path) : undefined;
  const entry: ModelEntry = {
    id: model.id,
    source: model.source,
    context_length: Math.min(SINGLE_MODEL_CONTEXT_LENGTH, trained ?? SINGLE_MODEL_CONTEXT_LENGTH),
  };
  return `# Made by \`tributary start --model\`; rewritten at each start.\n${stringify({ models: [entry] })}`;
}

/** How long reading a file's metadata may take: a damaged file must not hold up the start (its runner then says what is wrong). */
const METADATA_READ_TIMEOUT_MS = 10_000;

async function trainedContextLength(path: string): Promise<number | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), METADATA_READ_TIMEOUT_MS).unref()));
  try {
    return await Promise.race([readTrainedContextLength(path), gaveUp]);
  } finally {
    clearTimeout(timer);
  }
}

async function readTrainedContextLength(path: string): Promise<number | undefined> {
  try {
    // Loaded here: the other users of the catalog (the gateway) do without node-llama-cpp.
    const { readGgufFileInfo } = await import("node-llama-cpp");
    const info = await readGgufFileInfo(path, { readTensorInfo: false, logWarnings: false });
    const metadata = info.metadata as unknown as Record<string, Record<string, unknown>>;
    const length = Number(metadata[String(info.metadata.general.architecture)]?.context_length);
    return Number.isInteger(length) && length > 0 ? length : undefined;
  } catch {
    return undefined;
  }
}
