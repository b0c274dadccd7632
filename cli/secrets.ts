import { parseCommand, pickAction, UsageError } from "./args.js";
import { ApiError, gatewayClient, gatewayOptions, gatewayOptionsUsage } from "./gateway-client.js";
import { readHidden } from "./hidden-input.js";
import { formatTime, pageTable, printResult } from "./table.js";

// `tributary secrets ...`: the secrets API (docs/platform.md, "Secrets"). A value is typed at a
// prompt that does not show it, or piped on stdin; never an argument (other users see those in
// ps, and shells keep them), and never printed.

export const secretsUsage = `usage: tributary secrets <action> [options]

  set NAME [--json]     create NAME, or give it a new value (version + 1). The value is asked for
                        (not shown as typed) or read from stdin when piped: printf %s "$TOKEN" | tributary secrets set NAME
  list [--json]         names and versions (values are never shown)
  rm NAME [--json]      remove it

${gatewayOptionsUsage}`;

const ACTIONS = ["set", "list", "rm"] as const;

export async function runSecrets(argv: string[]): Promise<number> {
  const [action, rest] = pickAction(argv, { name: "tributary secrets", usage: secretsUsage, actions: ACTIONS });
  const name = `tributary secrets ${action}`;
  switch (action) {
    case "set": {
      const { values, positionals } = parseCommand(rest, { name, usage: secretsUsage, positionals: ["NAME"], options: { ...gatewayOptions, json: { type: "boolean" } } });
      const secretName = positionals[0]!;
      const client = gatewayClient(values);
      const value = await readHidden(`value of ${secretName}: `, { whole: true });
      if (value === "") throw new UsageError(`${name}: the value is empty (type it at the prompt, or pipe it on stdin)`);
      let secret;
      try {
        secret = await client.json("POST", "/v1/secrets", { name: secretName, value });
      } catch (err) {
        // Taken: this is a new value for it.
        if (!(err instanceof ApiError && err.code === "secret_exists")) throw err;
        secret = await client.json("POST", `/v1/secrets/${encodeURIComponent(secretName)}`, { value });
      }
      printResult(!!values.json, secret, `${secret.name} set (version ${secret.version})\n`);
      return 0;
    }
    case "list": {
      const { values } = parseCommand(rest, { name, usage: secretsUsage, options: { ...gatewayOptions, json: { type: "boolean" } } });
      const page = await gatewayClient(values).json("GET", "/v1/secrets");
      printResult(!!values.json, page, pageTable(page, ["NAME", "VERSION", "CREATED", "UPDATED"], (s) => [s.name, String(s.version), formatTime(s.created_at), formatTime(s.updated_at)]));
      return 0;
    }
    case "rm": {
      const { values, positionals } = parseCommand(rest, { name, usage: secretsUsage, positionals: ["NAME"], options: { ...gatewayOptions, json: { type: "boolean" } } });
      const answer = await gatewayClient(values).json("DELETE", `/v1/secrets/${encodeURIComponent(positionals[0]!)}`);
      printResult(!!values.json, answer, `${answer.name} removed\n`);
      return 0;
    }
  }
}
