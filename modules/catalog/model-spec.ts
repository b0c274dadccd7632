/** A catalog model with every default applied: what gateways and runners work from. */
export interface ModelSpec {
  id: string;
  ownedBy: string;
  engine: "llama" | "sim";
  /** Absolute local path, or an "hf:" reference. Empty for the sim engine. */
  source: string;
  sha256: string | undefined;
  contextLength: number;
  maxOutputTokens: number;
  slots: number;
  queueLimit: number;
  /** Runner processes `tributary start` launches (the layout rule's choice unless `setInCatalog.replicas`). */
  replicas: number;
  /** Decode threads per runner (the layout rule's choice unless `setInCatalog.threads`). */
  threads: number;
  /** Which of replicas/threads the catalog or an override set: those win over modules/runner-layout's rule. */
  setInCatalog: { replicas: boolean; threads: boolean };
  gpuLayers: number | "auto" | "max";
  batchSize: number | undefined;
  /** "auto" (the GGUF's own template, else the fallback), "fallback", or a node-llama-cpp wrapper name. */
  chatTemplate: string;
  rateLimits: { requestsPerMinute: number; tokensPerMinute: number };
  sim: { tokensPerSecond: number; firstTokenLatencyMs: number };
  /** Unix seconds, for the OpenAI model object: when the catalog was loaded. */
  created: number;
}

export const MODEL_DEFAULTS = {
  ownedBy: "tributary",
  slots: 4,
  queueLimit: 256,
  replicas: 1,
  threads: 1,
  gpuLayers: 0,
  chatTemplate: "auto",
  requestsPerMinute: 250,
  tokensPerMinute: 100_000,
  simTokensPerSecond: 20,
  simFirstTokenLatencyMs: 50,
} as const;
