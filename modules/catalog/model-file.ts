import { join } from "node:path";

// Where a model's GGUF file is on this machine: the runners download `hf:` sources there, and
// `tributary start` reads its size from there to lay out runners.

/** "hf:<owner>/<repo>/<path/in/repo.gguf>[@revision]", parsed; undefined for anything else. */
export function hfReference(source: string): { repo: string; file: string; revision: string } | undefined {
  const m = /^hf:([^/\s]+\/[^/\s]+)\/([^@\s]+\.gguf)(?:@([^\s]+))?$/.exec(source);
  return m ? { repo: m[1]!, file: m[2]!, revision: m[3] ?? "main" } : undefined;
}

/** The model cache when TRIBUTARY_MODEL_CACHE is unset. */
export function defaultModelCache(home: string): string {
  return join(home, "models");
}

/** The cached file of a Hugging Face reference (present once downloaded). */
export function hfCachePath(ref: { repo: string; file: string; revision: string }, cacheDir: string): string {
  return join(cacheDir, "hf", ref.repo.replace("/", "--"), ref.revision, ref.file.replaceAll("/", "--"));
}

/** A model's local file: the source itself, or where an `hf:` source is (or will be) cached. */
export function localModelPath(source: string, cacheDir: string): string {
  const ref = hfReference(source);
  return ref ? hfCachePath(ref, cacheDir) : source;
}
