import { intOption, parseCommand, pickAction } from "./args.js";
import { gatewayClient, gatewayOptions, gatewayOptionsUsage } from "./gateway-client.js";
import { formatTime, pageTable, printResult } from "./table.js";

// `tributary apps ...`: the deployments of hosted apps (docs/platform.md, "Hosted apps");
// `tributary deploy` makes them.

export const appsUsage = `usage: tributary apps <action> [options]

  list [--limit N] [--json]                 the project's deployments, newest first
  logs DEPLOYMENT_ID [--follow] [--json]    its last 200 log lines; --follow: then each new one until it ends
  stop DEPLOYMENT_ID [--json]               stop it (answered once its instance ended); its address then answers 404

${gatewayOptionsUsage}`;

const ACTIONS = ["list", "logs", "stop"] as const;

interface LogLine {
  /** Unix milliseconds. */
  at: number;
  stream: "stdout" | "stderr";
  line: string;
}

/** A log line for people: its time, then the line (stderr lines go to stderr). */
function writeLogLine(l: LogLine): void {
  (l.stream === "stderr" ? process.stderr : process.stdout).write(`${new Date(l.at).toISOString()}  ${l.line}\n`);
}

export async function runApps(argv: string[]): Promise<number> {
  const [action, rest] = pickAction(argv, { name: "tributary apps", usage: appsUsage, actions: ACTIONS });
  const name = `tributary apps ${action}`;
  switch (action) {
    case "list": {
      const { values } = parseCommand(rest, { name, usage: appsUsage, options: { ...gatewayOptions, json: { type: "boolean" }, limit: { type: "string" } } });
      const limit = intOption(name, "limit", values.limit, 1, 100) ?? 100;
      const page = await gatewayClient(values).json("GET", `/v1/apps/deployments?limit=${limit}`);
      printResult(
        !!values.json,
        page,
        pageTable(page, ["ID", "STATUS", "ADDRESS", "CREATED", "RESTARTS"], (d) => [d.id, d.reason ? `${d.status} (${d.reason})` : d.status, d.hosted_url, formatTime(d.created_at), String(d.restarts)]),
      );
      return 0;
    }
    case "logs": {
      const { values, positionals } = parseCommand(rest, {
        name,
        usage: appsUsage,
        positionals: ["DEPLOYMENT_ID"],
        options: { ...gatewayOptions, json: { type: "boolean" }, follow: { type: "boolean" } },
      });
      const client = gatewayClient(values);
      const path = `/v1/apps/deployments/${encodeURIComponent(positionals[0]!)}/logs`;
      if (!values.follow) {
        const page = await client.json("GET", path);
        if (values.json) printResult(true, page, "");
        else for (const line of page.data as LogLine[]) writeLogLine(line);
        return 0;
      }
      // Followed: one JSON object per line with --json (each as the API sends it), then the end.
      for await (const { event, data } of client.events(await client.request("GET", `${path}?follow=true`))) {
        if (values.json) process.stdout.write(`${JSON.stringify({ event, ...JSON.parse(data) })}\n`);
        else if (event === "log") writeLogLine(JSON.parse(data) as LogLine);
        else if (event === "end") process.stderr.write(`tributary: deployment ${positionals[0]} ${(JSON.parse(data) as { status: string }).status}\n`);
      }
      return 0;
    }
    case "stop": {
      const { values, positionals } = parseCommand(rest, { name, usage: appsUsage, positionals: ["DEPLOYMENT_ID"], options: { ...gatewayOptions, json: { type: "boolean" } } });
      const deployment = await gatewayClient(values).json("POST", `/v1/apps/deployments/${encodeURIComponent(positionals[0]!)}/stop`);
      printResult(!!values.json, deployment, `${deployment.id} ${deployment.status}\n`);
      return 0;
    }
  }
}
