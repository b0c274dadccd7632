// tier: serial (decode threads tuned against the machine's CPUs)
import t from "tap";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { startStack } from "../../harness/stack.js";
import { TEST_MODEL, testCatalog } from "../../harness/processes.js";
import { freePort } from "../../harness/cluster.js";

// A CPU runner of threads > 1 with TRIBUTARY_DECODE_THREADS_TUNE=on picks each step's decode threads while it serves (ThreadTuner):
// it probes the other count every few steps through the real addon's setThreads, mid-stream.
// Switching must not change what is generated: greedy output on 2 tuned threads equals the same
// model's on 1 thread, token for token.

const TUNED_MODEL = "test/stories-260k-2-threads";
const catalog = parse(readFileSync(testCatalog, "utf8")) as { models: Array<Record<string, unknown>> };
const base = catalog.models.find((m) => m.id === TEST_MODEL)!;
catalog.models.push({ ...base, id: TUNED_MODEL, source: join(testCatalog, "..", "..", String(base.source)), threads: 2, slots: 4 });
const catalogPath = join(mkdtempSync(join(tmpdir(), "tributary-threads-")), "catalog.yaml");
writeFileSync(catalogPath, stringify(catalog));

const healthPort = await freePort();
const stack = await startStack(t, {
  env: { TRIBUTARY_CATALOG: catalogPath },
  // Tuning is off by default (docs/architecture.md, "Threads per step, chosen while serving"): this test turns it on.
  runnerEnv: { TRIBUTARY_RUNNER_HEALTH_PORT: String(healthPort), TRIBUTARY_RUNNER_HEALTH_HOST: "127.0.0.1", TRIBUTARY_DECODE_THREADS_TUNE: "on" },
});

const TOKENS = 300;
const greedy = async (model: string, content: string) => {
  const completion = await stack.client.chat.completions.create({ model, messages: [{ role: "user", content }], max_tokens: TOKENS, temperature: 0 });
  return { text: completion.choices[0]!.message.content, finish: completion.choices[0]!.finish_reason, tokens: completion.usage?.completion_tokens };
};

t.test("generation on tuned threads matches one thread's, token for token, while probes switch threads", async (t) => {
  for (const prompt of ["Once upon a time", "The little dog"]) {
    const tuned = await greedy(TUNED_MODEL, prompt);
    const single = await greedy(TEST_MODEL, prompt);
    t.same(tuned, single, `"${prompt}": the same ${TOKENS} tokens`);
    t.equal(tuned.finish, "length");
    t.equal(tuned.tokens, TOKENS);
  }
  // Concurrent streams: steps of 3 tokens, a width class of its own.
  const streams = await Promise.all(["One day", "A cat", "The sun"].map((p) => greedy(TUNED_MODEL, p)));
  const alone = await Promise.all(["One day", "A cat", "The sun"].map((p) => greedy(TEST_MODEL, p)));
  t.same(streams, alone, "three streams decoding together match one thread's output");

  const metrics = await (await fetch(`http://127.0.0.1:${healthPort}/metrics`)).text();
  const labels = `model="${TUNED_MODEL}",runner="r[A-Za-z0-9]+"`;
  t.match(metrics, new RegExp(`tributary_runner_decode_threads\\{${labels},step_tokens_from="1"\\} [12]\\n`), "one-token steps have a thread count");
  t.match(metrics, new RegExp(`tributary_runner_decode_threads\\{${labels},step_tokens_from="2"\\} [12]\\n`), "steps of 2-3 tokens have their own");
  const probes = Number(new RegExp(`tributary_runner_decode_thread_probes_total\\{${labels}\\} (\\d+)`).exec(metrics)?.[1]);
  t.ok(probes >= 2, `${probes} probes ran on the other thread count`);
  t.notMatch(metrics, new RegExp(`tributary_runner_decode_threads\\{model="${TEST_MODEL}"`), "a one-thread runner has nothing to tune");
});
