import { intOption, parseCommand, pickAction } from "./args.js";
import { gatewayClient, gatewayOptions, gatewayOptionsUsage } from "./gateway-client.js";
import { commandOf, sandboxSettingsBody, sandboxSettingsOptions } from "./sandbox.js";
import { formatTime, pageTable, printResult, shorten } from "./table.js";

// `tributary jobs ...`: the jobs API (docs/platform.md, "Jobs"): a command run to completion in a
// fresh sandbox, durably, with its output kept.

export const jobsUsage = `usage: tributary jobs <action> [options]

  create [--json] [--timeout S] [--max-retries N] [--input-file FILE_ID]... [RESOURCES] [--] COMMAND [ARGS...]
                        queue a job; prints its id. One word is run by /bin/sh -c, more are the argv.
                        RESOURCES as for sandboxes (tributary sandbox --help); --timeout defaults to 600
  list [--status STATUS] [--limit N] [--json]
  logs JOB_ID [--follow] [--stream stdout|stderr]
                        its output so far; --follow: as it comes, until the job ends (then exit 0 when it
                        succeeded, 1 otherwise)
  cancel JOB_ID [--json]

${gatewayOptionsUsage}`;

const ACTIONS = ["create", "list", "logs", "cancel"] as const;

/** A job's argv as a person would type it: a shell string as given, other words quoted where needed. */
function commandText(argv: string[]): string {
  if (argv.length === 3 && argv[0] === "/bin/sh" && argv[1] === "-c") return argv[2]!;
  return argv.map((word) => (/^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`)).join(" ");
}

export async function runJobs(argv: string[]): Promise<number> {
  const [action, rest] = pickAction(argv, { name: "tributary jobs", usage: jobsUsage, actions: ACTIONS });
  const name = `tributary jobs ${action}`;
  switch (action) {
    case "create": {
      const { values, positionals } = parseCommand(rest, {
        name,
        usage: jobsUsage,
        positionals: ["COMMAND..."],
        options: {
          ...gatewayOptions,
          ...sandboxSettingsOptions,
          json: { type: "boolean" },
          timeout: { type: "string" },
          "max-retries": { type: "string" },
          "input-file": { type: "string", multiple: true },
        },
      });
      const body = {
        ...sandboxSettingsBody(name, values),
        command: commandOf(positionals),
        timeout_seconds: intOption(name, "timeout", values.timeout, 1, 86_400),
        max_retries: intOption(name, "max-retries", values["max-retries"], 0, 10),
        input_files: values["input-file"],
      };
      const job = await gatewayClient(values).json("POST", "/v1/jobs", body);
      printResult(!!values.json, job, `${job.id}\n`);
      return 0;
    }
    case "list": {
      const { values } = parseCommand(rest, { name, usage: jobsUsage, options: { ...gatewayOptions, json: { type: "boolean" }, status: { type: "string" }, limit: { type: "string" } } });
      const query = new URLSearchParams({ limit: String(intOption(name, "limit", values.limit, 1, 100) ?? 100) });
      if (values.status !== undefined) query.set("status", values.status);
      const page = await gatewayClient(values).json("GET", `/v1/jobs?${query}`);
      printResult(
        !!values.json,
        page,
        pageTable(page, ["ID", "STATUS", "EXIT", "ATTEMPT", "CREATED", "FINISHED", "COMMAND"], (j) => [
            j.id,
            j.status,
            j.exit_code === null ? "-" : String(j.exit_code),
            String(j.attempt),
            formatTime(j.created_at),
            formatTime(j.finished_at),
            shorten(commandText(j.command), 48),
          ]),
      );
      return 0;
    }
    case "logs": {
      const { values, positionals } = parseCommand(rest, {
        name,
        usage: jobsUsage,
        positionals: ["JOB_ID"],
        options: { ...gatewayOptions, follow: { type: "boolean" }, stream: { type: "string" } },
      });
      const query = new URLSearchParams();
      if (values.stream !== undefined) query.set("stream", values.stream);
      if (values.follow) query.set("follow", "true");
      const client = gatewayClient(values);
      const res = await client.request("GET", `/v1/jobs/${encodeURIComponent(positionals[0]!)}/logs?${query}`);
      if (!values.follow) {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) process.stdout.write(chunk);
        return 0;
      }
      for await (const { event, data } of client.events(res)) {
        const payload = JSON.parse(data) as { data?: string; status?: string; exit_code?: number | null };
        if (event === "stdout") process.stdout.write(payload.data ?? "");
        else if (event === "stderr") process.stderr.write(payload.data ?? "");
        else if (event === "end") {
          if (payload.status === "succeeded") return 0;
          process.stderr.write(`tributary: job ${positionals[0]} ${payload.status}${payload.exit_code !== null && payload.exit_code !== undefined ? ` (exit code ${payload.exit_code})` : ""}\n`);
          return 1;
        }
      }
      return 1;
    }
    case "cancel": {
      const { values, positionals } = parseCommand(rest, { name, usage: jobsUsage, positionals: ["JOB_ID"], options: { ...gatewayOptions, json: { type: "boolean" } } });
      const job = await gatewayClient(values).json("POST", `/v1/jobs/${encodeURIComponent(positionals[0]!)}/cancel`);
      printResult(!!values.json, job, `${job.id} ${job.status}\n`);
      return 0;
    }
  }
}
