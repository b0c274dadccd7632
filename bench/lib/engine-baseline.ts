import { GenerateRequest, Priority } from "../../proto/gen/tributary/v1/inference.js";
import type { ModelSpec } from "../../modules/catalog/mod.js";
import { createLogger } from "../../lib/log.js";
import { LlamaEngine } from "../../runners/engines/llama/llama-engine.js";
import { libuvPoolThreads } from "../../runners/engines/create-engine.js";
import { Scheduler } from "../../runners/scheduler/scheduler.js";

// The engine called in-process, with the runner's own scheduler: the baseline the full stack
// (HTTP, NATS, protobuf, SSE) is measured against.

export interface InProcessResult {
  ttftMs: number;
  completionTokens: number;
  gapsMs: number[];
}

export class InProcessEngine {
  private readonly engine: LlamaEngine;
  private scheduler!: Scheduler;
  private nextId = 0;

  constructor(private readonly spec: ModelSpec) {
    // As a runner would with this process's libuv pool (UV_THREADPOOL_SIZE=1: samples follow the decode).
    const samplesFollowDecode = libuvPoolThreads(process.env.UV_THREADPOOL_SIZE) === 1;
    this.engine = new LlamaEngine(spec, { modelPath: async () => spec.source, log: createLogger("bench"), samplesFollowDecode });
  }

  async load(): Promise<void> {
    await this.engine.load();
    this.scheduler = new Scheduler(this.engine, this.spec.queueLimit, createLogger("bench"));
  }

  async dispose(): Promise<void> {
    await this.engine.dispose();
  }

  /** One chat request; `seed` undefined samples like unseeded traffic (and may reuse the prompt cache). */
  async chat(content: string, maxTokens: number, seed?: number): Promise<InProcessResult> {
    const started = performance.now();
    const request = GenerateRequest.fromPartial({
      requestId: `bench-${this.nextId++}`,
      model: this.spec.id,
      messages: [{ role: "user", content }],
      sampling: { temperature: 0.8, seed, maxTokens, n: 1 },
      parallelToolCalls: true,
      priority: Priority.PRIORITY_INTERACTIVE,
    });
    const prepared = await this.engine.prepare(request);
    return new Promise((resolve, reject) => {
      const result: InProcessResult = { ttftMs: NaN, completionTokens: 0, gapsMs: [] };
      let last = 0;
      this.scheduler.submit(prepared, {
        delta: (_c, text) => {
          if (!text) return;
          const now = performance.now();
          if (Number.isNaN(result.ttftMs)) result.ttftMs = now - started;
          else result.gapsMs.push(now - last);
          last = now;
        },
        toolCall: () => {},
        choiceReset: () => {},
        choiceEnd: () => {},
        final: (_p, completion, error) => {
          if (error) reject(new Error(error.message));
          result.completionTokens = completion;
          resolve(result);
        },
      });
    });
  }
}
