import { existsSync, readFileSync, statSync } from "node:fs";
import { availableParallelism, totalmem } from "node:os";
import { join } from "node:path";
import { readGgufFileInfo } from "node-llama-cpp";
import { repoRoot } from "../../lib/paths.js";
import { localModelPath, type ModelSpec } from "../catalog/mod.js";
import type { LlamaLibrary, MachineFacts, ModelFacts } from "./rule.js";

// The facts pickLayout works from, read from this machine: its CPUs and memory (a container's
// limits included), which node-llama-cpp library the runners will load, and each model's size.

/** A cgroup v2 limit file's value ("max" or absent: none). */
function cgroupValue(file: string): string | undefined {
  try {
    const self = /^0::(.*)$/m.exec(readFileSync("/proc/self/cgroup", "utf8"))?.[1] ?? "/";
    for (const dir of [join("/sys/fs/cgroup", self), "/sys/fs/cgroup"]) {
      const path = join(dir, file);
      if (existsSync(path)) return readFileSync(path, "utf8").trim();
    }
  } catch {
    // not Linux, or no cgroup v2
  }
  return undefined;
}

/** CPUs the stack may use: the affinity mask (`allowed`), lowered by a cgroup CPU quota (cpu.max "200000 100000" = 2). */
export function usableCpus(allowed: number = availableParallelism()): number {
  const [quota, period] = (cgroupValue("cpu.max") ?? "max").split(/\s+/);
  if (quota === "max" || !quota || !period) return allowed;
  return Math.max(1, Math.min(allowed, Math.floor(Number(quota) / Number(period))));
}

export function usableMemoryBytes(): number {
  const limit = Number(cgroupValue("memory.max"));
  return Number.isFinite(limit) && limit > 0 ? Math.min(limit, totalmem()) : totalmem();
}

/**
 * "source" when scripts/bootstrap.mjs put a build of node-llama-cpp's bundled llama.cpp into its
 * llama/localBuilds (TRIBUTARY_LLAMA_SOURCE_BUILD=on): the runners load it in preference to the
 * prebuilt binary (getLlama with build "never" looks there first).
 */
export function llamaLibrary(root: string = repoRoot): LlamaLibrary {
  const platform = ({ darwin: "mac", win32: "win" } as Record<string, string>)[process.platform] ?? process.platform;
  const addon = join(root, "node_modules", "node-llama-cpp", "llama", "localBuilds", `${platform}-${process.arch}`, "Release", "llama-addon.node");
  return existsSync(addon) ? "source" : "prebuilt";
}

export function machineFacts(allowedCpuCount: number): MachineFacts {
  return { cpus: usableCpus(allowedCpuCount), memoryBytes: usableMemoryBytes(), library: llamaLibrary() };
}

/**
 * KV cache bytes per token of context (f16 keys and values of every layer), from the GGUF's
 * metadata; undefined when it cannot be read.
 */
async function kvBytesPerToken(path: string): Promise<number | undefined> {
  try {
    const info = await readGgufFileInfo(path, { readTensorInfo: false, logWarnings: false });
    const arch = (info.metadata as unknown as Record<string, Record<string, unknown>>)[String(info.metadata.general.architecture)] ?? {};
    const attention = (arch.attention ?? {}) as Record<string, unknown>;
    const layers = Number(arch.block_count);
    const heads = Number(attention.head_count);
    const kvHeads = Number(attention.head_count_kv ?? heads);
    const headDim = Number(attention.key_length ?? Number(arch.embedding_length) / heads);
    const bytes = 2 * layers * kvHeads * headDim * 2;
    return Number.isFinite(bytes) && bytes > 0 ? bytes : undefined;
  } catch {
    return undefined;
  }
}

/**
 * What pickLayout needs of a catalog model. Its size is known once the file is on disk (an `hf:`
 * source after its first download into `modelCache`).
 */
export async function modelFacts(spec: ModelSpec, modelCache: string): Promise<ModelFacts> {
  const decodesOnCpu = spec.engine === "llama" && spec.gpuLayers === 0;
  const path = spec.source === "" ? "" : localModelPath(spec.source, modelCache);
  const local = decodesOnCpu && path !== "" && existsSync(path);
  const modelBytes = local ? statSync(path).size : undefined;
  const kv = local ? await kvBytesPerToken(path) : undefined;
  return {
    id: spec.id,
    decodesOnCpu,
    modelBytes,
    runnerBytes: modelBytes === undefined ? undefined : modelBytes + (kv ?? 0) * spec.contextLength * spec.slots,
    runners: spec.setInCatalog.replicas ? spec.replicas : undefined,
    threads: spec.setInCatalog.threads ? spec.threads : undefined,
  };
}
