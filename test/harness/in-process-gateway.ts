import type { Test } from "tap";
import type { NatsConnection } from "@nats-io/transport-node";
import { startGatewayServer } from "../../gateway/gateway.js";
import type { Logger } from "../../lib/log.js";
import { GenerationStream, type GenerationSource, type StreamOwner } from "../../modules/inference/mod.js";
import { FinishReason, type GenerateRequest, type RunnerEvent } from "../../proto/gen/tributary/v1/inference.js";
import { startNats, TEST_KEY, testCatalog } from "./processes.js";
import { tenantOf, type Tenant } from "./stack.js";

// The gateway in the test's own process: the real server, router, routes, authentication and
// stores (on a real nats-server), with its generations scripted instead of sent to runners. For
// the tests that send an endpoint every bad parameter (validation runs before any generation);
// each endpoint keeps a test against real processes too.

/**
 * Answers every generation with words, as a runner would: for each choice (`n`), `max_tokens`
 * words ("w1 w2 ..."), each a delta of one token, then the choice's end ("length") and the usage.
 */
export class ScriptedGeneration implements GenerationSource {
  /** Every request handed to it, in order. */
  readonly requests: GenerateRequest[] = [];
  /** Requests the gateway cancelled (the client left). */
  readonly cancelled: string[] = [];
  private readonly owner: StreamOwner = {
    release: () => {},
    cancel: (requestId) => void this.cancelled.push(requestId),
  };

  async generate(request: GenerateRequest): Promise<GenerationStream> {
    this.requests.push(request);
    const stream = new GenerationStream(request.requestId, request.model, this.owner);
    const tokens = request.sampling?.maxTokens || 16;
    const choices = request.sampling?.n || 1;
    const promptTokens = request.prompt.length + request.messages.reduce((sum, m) => sum + JSON.stringify(m).length, 0);
    stream.admitted = { runnerId: "scripted", promptTokens, maxTokens: tokens, queuePosition: 0 };
    // After the admission, as a runner's events arrive after its reply.
    setImmediate(() => {
      let seq = 0;
      const send = (event: RunnerEvent["event"]) => stream.receive({ requestId: request.requestId, seq: ++seq, runnerId: "scripted", event }, () => {});
      for (let c = 0; c < choices; c++) {
        for (let i = 1; i <= tokens; i++) send({ $case: "delta", value: { choiceIndex: c, text: i === 1 ? `w${i}` : ` w${i}`, toolCalls: [], tokens: 1 } });
        send({ $case: "choiceEnd", value: { choiceIndex: c, finishReason: FinishReason.FINISH_REASON_LENGTH, completionTokens: tokens } });
      }
      send({ $case: "final", value: { usage: { promptTokens, completionTokens: tokens * choices, cachedPromptTokens: 0 }, error: undefined } });
    });
    return stream;
  }
}

/** A logger that keeps its records (warnings and errors) for the test to read, and prints nothing. */
export function recordingLogger(records: Array<Record<string, unknown>> = []): Logger & { records: Array<Record<string, unknown>> } {
  const keep = (level: string) => (msg: string, fields?: Record<string, unknown>) => void records.push({ level, msg, ...fields });
  const logger = {
    records,
    debug: () => {},
    info: () => {},
    warn: keep("warn"),
    error: keep("error"),
    child: () => logger,
    enabled: (level: string) => level === "warn" || level === "error",
  };
  return logger;
}

export interface InProcessGateway extends Tenant {
  url: string;
  port: number;
  generation: ScriptedGeneration;
  /** What the gateway logged at warn and error. */
  logs: Array<Record<string, unknown>>;
}

/**
 * Starts the gateway in this process on a nats-server of its own, with the test catalog, the
 * configured key TEST_KEY (its tenant), no rate limits (budgets live on actor hosts, and none
 * runs here) and `env` over those; stopped at the end of the test.
 */
export async function inProcessGateway(t: Test, env: Record<string, string> = {}): Promise<InProcessGateway> {
  const nats = await startNats();
  t.teardown(() => nats.stop());
  const nc: NatsConnection = await nats.connect("gateway");
  t.teardown(() => nc.close());
  const generation = new ScriptedGeneration();
  const log = recordingLogger();
  const gateway = await startGatewayServer(nc, {
    gatewayId: "ginprocess",
    log,
    env: { ...process.env, TRIBUTARY_CATALOG: testCatalog, TRIBUTARY_PORT: "0", TRIBUTARY_API_KEY: TEST_KEY, TRIBUTARY_API_KEYS: "", TRIBUTARY_RATE_LIMITS: "off", ...env },
    generation,
  });
  t.teardown(() => gateway.drain());
  const url = `http://127.0.0.1:${gateway.port}`;
  return { ...tenantOf(url, { organizationId: "org-local", projectId: "proj-local", key: TEST_KEY }), url, port: gateway.port, generation, logs: log.records };
}
