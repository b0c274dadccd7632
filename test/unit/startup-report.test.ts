import t from "tap";
import { parseLogRecord, type LogRecord } from "../../lib/log.js";
import { StartupReport, type StartupReportOptions } from "../../cli/startup-report.js";
import { TerminalOutput } from "../../cli/terminal.js";

// What `tributary start` prints while the stack comes up (cli/startup-report.ts), fed the log
// lines its processes write, and how a terminal shows the progress bars (cli/terminal.ts).

const QWEN = "qwen/qwen3-0.6b";
const LLAMA = "meta/llama-3.2-3b-instruct";

/** A report of `models` whose printed text and status lines are kept. */
function report(models: string[], terminal: boolean, options: Partial<StartupReportOptions> = {}) {
  const printed: string[] = [];
  const statuses: string[][] = [];
  const r = new StartupReport({
    models,
    url: (port) => `http://127.0.0.1:${port}/v1`,
    apiKey: "sk-local-abc",
    footer: (port) => [`Dashboard: http://127.0.0.1:${port}/dashboard`, "Models: all."],
    catalogPath: "catalog/default.yaml",
    print: (text) => printed.push(text),
    status: terminal ? (lines) => statuses.push(lines) : undefined,
    ...options,
  });
  return { r, printed, statuses, text: () => printed.join("") };
}

/** A runner's or gateway's log line as it writes it, parsed as the supervisor parses it. */
const line = (msg: string, fields: Record<string, unknown> = {}): LogRecord => parseLogRecord(JSON.stringify({ t: new Date().toISOString(), level: "info", msg, ...fields }))!;
const listening = (port: number) => line("gateway listening", { port });
const failed = (err: string, cause: string, retryInMs: number) => line("model load failed; retrying", { level: "error", err, cause, retryInMs });

t.test("up once the gateway listens and every model has a runner: the URL, the key, then the footer's lines", async (t) => {
  const { r, text } = report([QWEN], false);
  r.fromRunner(QWEN, line("runner ready"));
  t.equal(text(), "", "nothing before the gateway listens");
  r.fromGateway(listening(8080));
  t.equal(text(), "\nTributary is up: http://127.0.0.1:8080/v1  (API key: sk-local-abc)\nDashboard: http://127.0.0.1:8080/dashboard\nModels: all.\n\n");
});

t.test("until then, what each model waits for, printed when it changes", async (t) => {
  const { r, printed } = report([QWEN, LLAMA], false);
  r.fromGateway(listening(8080));
  r.fromRunner(LLAMA, line("runner ready"));
  r.fromRunner(LLAMA, line("runner ready"));
  t.same(printed, [
    `Tributary is starting at http://127.0.0.1:8080/v1: waiting for ${QWEN} (loading), ${LLAMA} (loading)\n`,
    `Tributary is starting at http://127.0.0.1:8080/v1: waiting for ${QWEN} (loading)\n`,
  ]);
  r.fromRunner(QWEN, line("runner ready"));
  t.match(printed.at(-1), /^\nTributary is up: /);
  t.equal(printed.length, 3);
});

t.test("no network: the cause and the retry on every failure; the way out once", async (t) => {
  const { r, text } = report([QWEN, LLAMA], false);
  r.fromRunner(QWEN, failed("no network: getaddrinfo ENOTFOUND huggingface.co", "NoNetwork", 2_000));
  r.fromRunner(LLAMA, failed("no network: getaddrinfo ENOTFOUND huggingface.co", "NoNetwork", 2_000));
  r.fromRunner(QWEN, failed("no network: getaddrinfo ENOTFOUND huggingface.co", "NoNetwork", 30_000));
  r.fromGateway(listening(8080));
  t.equal(
    text(),
    `${QWEN}: cannot download (no network: getaddrinfo ENOTFOUND huggingface.co); retrying in 2 s\n` +
      "To serve now without a network: TRIBUTARY_CATALOG=catalog/test.yaml npm start (the tiny test model),\n" +
      "or tributary start --model /path/to/model.gguf, or edit the catalog file catalog/default.yaml\n" +
      `${LLAMA}: cannot download (no network: getaddrinfo ENOTFOUND huggingface.co); retrying in 2 s\n` +
      `${QWEN}: cannot download (no network: getaddrinfo ENOTFOUND huggingface.co); retrying in 30 s\n` +
      `Tributary is starting at http://127.0.0.1:8080/v1: waiting for ${QWEN} (cannot download), ${LLAMA} (cannot download)\n`,
  );
  t.notMatch(text(), /\[object Object\]/);
});

t.test("other causes: a download refused, a file that does not load; no network way out for them", async (t) => {
  const { r, text } = report([QWEN], false);
  r.fromRunner(QWEN, failed("https://huggingface.co/x needs a token: set HF_TOKEN (HTTP 401: a gated or private model)", "HttpStatus", 4_000));
  r.fromRunner(QWEN, failed("not a valid GGUF model: /m.gguf (Invalid GGUF magic)", "InvalidGguf", 1_500));
  t.equal(
    text(),
    `${QWEN}: cannot download (https://huggingface.co/x needs a token: set HF_TOKEN (HTTP 401: a gated or private model)); retrying in 4 s\n` +
      `${QWEN}: cannot load (not a valid GGUF model: /m.gguf (Invalid GGUF magic)); retrying in 1.5 s\n`,
  );
});

t.test("a runner's failure of an older kind (an error object) says to see the log, never [object Object]", async (t) => {
  const { r, text } = report([QWEN], false);
  r.fromRunner(QWEN, line("model load failed; retrying", { err: { name: "Error", message: "x" }, retryInMs: 2_000 }));
  t.equal(text(), `${QWEN}: cannot load (see the log); retrying in 2 s\n`);
});

t.test("no terminal: a download's progress is a line at each tenth at most", async (t) => {
  const { r, printed, statuses } = report([QWEN], false);
  for (const percent of [0, 3, 9, 10, 14, 35, 36, 99, 100]) r.fromRunner(QWEN, line("model download progress", { mb: percent * 6, totalMb: 639, percent }));
  r.fromRunner(QWEN, line("model downloaded"));
  t.same(printed, [
    `${QWEN}: downloading 0% of 639 MB\n`,
    `${QWEN}: downloading 10% of 639 MB\n`,
    `${QWEN}: downloading 35% of 639 MB\n`,
    `${QWEN}: downloading 99% of 639 MB\n`,
    `${QWEN}: downloading 100% of 639 MB\n`,
    `${QWEN}: downloaded; loading\n`,
  ]);
  t.same(statuses, [], "no status lines");
});

t.test("a terminal: a progress bar per model downloading, redrawn in place, gone once downloaded", async (t) => {
  const { r, printed, statuses } = report([QWEN, LLAMA], true);
  r.fromRunner(QWEN, line("model download progress", { mb: 0, totalMb: 639, percent: 0 }));
  r.fromRunner(LLAMA, line("model download progress", { mb: 1010, totalMb: 2019, percent: 50 }));
  r.fromRunner(QWEN, line("model download progress", { mb: 320, totalMb: 639, percent: 50 }));
  r.fromRunner(QWEN, line("model downloaded"));
  t.same(statuses.at(-2), [
    `${QWEN}             [############------------] downloading 50% of 639 MB`,
    `${LLAMA}  [############------------] downloading 50% of 2019 MB`,
  ]);
  t.same(statuses.at(-1), [`${LLAMA}  [############------------] downloading 50% of 2019 MB`]);
  t.same(printed, [`${QWEN}: downloaded; loading\n`], "progress is not printed as lines");
});

t.test("which runner records the report shows itself (a terminal leaves their log lines out)", async (t) => {
  t.ok(StartupReport.shows(line("model download progress", { percent: 1 })));
  t.ok(StartupReport.shows(failed("no network: x", "NoNetwork", 1)));
  t.notOk(StartupReport.shows(line("runner ready")));
  t.notOk(StartupReport.shows(line("model downloaded")));
});

/** A stream that keeps what is written to it. */
function stream(isTTY: boolean) {
  const writes: string[] = [];
  return { writes, isTTY, columns: 40, write: (text: string) => writes.push(text) };
}

t.test("the terminal: messages and log lines go above the status lines, which are erased and drawn again", async (t) => {
  const out = stream(true);
  const err = stream(true);
  const terminal = new TerminalOutput(out, err);
  terminal.status(["a  [##--] 50%", "b  [----] 0%"]);
  terminal.log("a log line\n");
  terminal.print("a message\n");
  terminal.status(["b  [##--] 50%"]);
  const erase2 = "\r\x1b[2K\x1b[1A\r\x1b[2K";
  t.same(out.writes, [
    "a  [##--] 50%\nb  [----] 0%",
    erase2, "a  [##--] 50%\nb  [----] 0%",
    erase2, "a message\n", "a  [##--] 50%\nb  [----] 0%",
    erase2, "b  [##--] 50%",
  ]);
  t.same(err.writes, ["a log line\n"]);
  terminal.status(["x".repeat(100)]);
  t.equal(out.writes.at(-1), "x".repeat(38) + "…", "a line is cut to the terminal's width");
  terminal.close();
  terminal.status(["again"]);
  t.equal(out.writes.at(-1), "\r\x1b[2K", "closed: erased, and nothing drawn again");
});

t.test("the terminal: stdout not a terminal draws no status lines", async (t) => {
  const out = stream(false);
  const terminal = new TerminalOutput(out, stream(false));
  t.notOk(terminal.drawsInPlace);
  terminal.status(["a"]);
  terminal.print("m\n");
  t.same(out.writes, ["m\n"]);
});
