// tier: slow (a whole stack through tributary start, its runner loading the model)
import t from "tap";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { loadCatalog } from "../../../modules/catalog/mod.js";
import { runCli, spawnCli } from "../../harness/cli.js";
import { freePort } from "../../harness/cluster.js";
import { testCatalog } from "../../harness/processes.js";

// `tributary start --model FILE --port 0`: one GGUF file served as the only model, on a port the
// gateway picks, with no catalog written by anyone. While it runs, the stack's address is in
// $TRIBUTARY_HOME/gateway-url, where a client command finds it with nothing else set; once it
// stopped, the address is gone.

const modelPath = loadCatalog(testCatalog, {})[0]!.source; // ../shared/models/stories260K.gguf
const home = mkdtempSync(join(tmpdir(), "tributary-start-model-"));
t.teardown(() => rmSync(home, { recursive: true, force: true }));
const urlFile = join(home, "gateway-url");
/** Nothing of the environment may point elsewhere: the flags and TRIBUTARY_HOME say it all. */
const unset = { TRIBUTARY_API_KEY: undefined, TRIBUTARY_URL: undefined, OPENAI_API_KEY: undefined, TRIBUTARY_CATALOG: undefined, NATS_URL: undefined };

const cli = spawnCli(["start", "--model", modelPath, "--port", "0"], {
  env: {
    ...unset,
    TRIBUTARY_HOME: home,
    // The flag wins over the variable it stands for.
    TRIBUTARY_PORT: "8080",
    TRIBUTARY_NATS_PORT: String(await freePort()),
    TRIBUTARY_ADMIN_ADDR: "127.0.0.1:0",
    TRIBUTARY_START_SANDBOX_HOST: "off",
  },
  stdio: ["ignore", "pipe", "pipe"],
});
let output = "";
cli.stdout!.on("data", (d: Buffer) => (output += d.toString()));
cli.stderr!.on("data", (d: Buffer) => (output += d.toString()));
const exited = new Promise<number | null>((resolve) => cli.once("exit", resolve));
let running = true;
void exited.then(() => (running = false));
t.teardown(async () => {
  if (!running) return;
  cli.kill("SIGTERM");
  await exited;
});

/** Waits until `ready` holds, or fails saying why once the stack exited. */
async function until(what: string, ready: () => boolean | Promise<boolean>): Promise<void> {
  for (;;) {
    if (await ready()) return;
    if (!running) throw new Error(`tributary start exited before ${what}:\n${output.slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

t.test("the one model is served at the address recorded in TRIBUTARY_HOME", async (t) => {
  await until("the gateway listened", () => existsSync(urlFile));
  const url = readFileSync(urlFile, "utf8").trim();
  t.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.not(url, "http://127.0.0.1:8080", "--port 0 over TRIBUTARY_PORT=8080");
  t.match(readFileSync(join(home, "model-catalog.yaml"), "utf8"), /id: local\/stories260K/);
  const key = readFileSync(join(home, "api-key"), "utf8").trim();
  await until("it was ready", async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200);

  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
  t.same((await client.models.list()).data.map((m) => m.id), ["local/stories260K"]);
  const completion = await client.chat.completions.create({ model: "local/stories260K", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 8 });
  t.ok(completion.choices[0]!.message.content!.length > 0, "it answers");
  t.equal(completion.usage?.completion_tokens, 8);

  // A client command with nothing but TRIBUTARY_HOME finds the stack and its key.
  const secrets = await runCli(["secrets", "list", "--json"], { env: { ...unset, TRIBUTARY_HOME: home } });
  t.equal(secrets.code, 0, secrets.stderr);
  t.match(JSON.parse(secrets.stdout), { object: "list", data: [] });
});

t.test("once stopped, the recorded address is gone", async (t) => {
  cli.kill("SIGTERM");
  await exited;
  t.notOk(existsSync(urlFile), "a client no longer calls a port nothing listens on");
});
