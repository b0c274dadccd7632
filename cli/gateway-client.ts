import { clientConfig, commonConfig, optionToUndefined, readConfig } from "../lib/config.js";
import { CommandFailed, UsageError } from "./args.js";
import { apiKeyFile, gatewayUrlFile, recordedApiKey, recordedGatewayUrl } from "./local-stack.js";

// How the commands that call a gateway (sandbox, jobs, secrets, apps, deploy) find it and talk to
// it. The address: --url, else TRIBUTARY_URL, else what a running `tributary start` recorded in
// $TRIBUTARY_HOME/gateway-url, else http://127.0.0.1:8080. The key: --api-key, else
// TRIBUTARY_API_KEY, else OPENAI_API_KEY, else the local stack's $TRIBUTARY_HOME/api-key.
// An error the API answers is a CommandFailed with the API's own message.

export const DEFAULT_GATEWAY_URL = "http://127.0.0.1:8080";
const FROM_DEFAULT = "the default address";

/** The options every such command takes (spread into its parseArgs options). */
export const gatewayOptions = {
  url: { type: "string" },
  "api-key": { type: "string" },
} as const;

/** Their lines in a usage text. */
export const gatewayOptionsUsage = `  --url URL       the gateway; default: TRIBUTARY_URL, else the address of the local stack
                  (\`tributary start\` records it in $TRIBUTARY_HOME/gateway-url), else ${DEFAULT_GATEWAY_URL}
  --api-key KEY   default: TRIBUTARY_API_KEY, else OPENAI_API_KEY, else $TRIBUTARY_HOME/api-key
`;

/** The gateway a command calls, its key, and where each came from (for messages). */
export interface GatewayTarget {
  url: string;
  urlFrom: string;
  key: string;
  keyFrom: string;
}

/** Resolves the address and key from the flags, the environment and TRIBUTARY_HOME, in that order. */
export function resolveGateway(flags: { url?: string; "api-key"?: string }, env?: Record<string, string | undefined>): GatewayTarget {
  const home = readConfig(commonConfig, env).home;
  const client = readConfig(clientConfig, env);
  const recordedUrl = recordedGatewayUrl(home);
  const [rawUrl, urlFrom] =
    flags.url !== undefined ? [flags.url, "--url"]
    : optionToUndefined(client.url) ? [optionToUndefined(client.url)!, "TRIBUTARY_URL"]
    : recordedUrl !== undefined ? [recordedUrl, gatewayUrlFile(home)]
    : [DEFAULT_GATEWAY_URL, FROM_DEFAULT];
  const recordedKey = recordedApiKey(home);
  const [key, keyFrom] =
    flags["api-key"] !== undefined ? [flags["api-key"], "--api-key"]
    : optionToUndefined(client.apiKey) ? [optionToUndefined(client.apiKey)!, "TRIBUTARY_API_KEY"]
    : optionToUndefined(client.openaiApiKey) ? [optionToUndefined(client.openaiApiKey)!, "OPENAI_API_KEY"]
    : recordedKey !== undefined ? [recordedKey, apiKeyFile(home)]
    : [undefined, ""];
  if (!key) throw new UsageError(`no API key: pass --api-key or set TRIBUTARY_API_KEY (a local stack keeps its key in ${apiKeyFile(home)}, which is not there)`);
  return { url: gatewayBase(rawUrl, urlFrom), urlFrom, key, keyFrom };
}

/** `http://host:port`, from what a person may paste: no scheme is http://; a trailing slash or `/v1` is dropped. */
export function gatewayBase(raw: string, from: string): string {
  const text = raw.trim();
  let url: URL;
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `http://${text}`);
  } catch {
    throw new UsageError(`${from}: expected an address like ${DEFAULT_GATEWAY_URL}, got '${raw}'`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new UsageError(`${from}: expected an http:// or https:// address, got '${raw}'`);
  if (url.search || url.hash || url.username) throw new UsageError(`${from}: expected an address like ${DEFAULT_GATEWAY_URL}, got '${raw}'`);
  return `${url.origin}${url.pathname.replace(/\/+$/, "").replace(/\/v1$/, "")}`;
}

/** An error the API answered: its message, and its status and code for a caller that handles one. */
export class ApiError extends CommandFailed {
  override name = "ApiError";
  constructor(message: string, readonly status: number, readonly code: string | undefined) {
    super(message);
  }
}

/** One server-sent event. */
export interface SseEvent {
  event: string;
  data: string;
}

export class GatewayClient {
  constructor(readonly target: GatewayTarget) {}

  /** A JSON request; the parsed answer. */
  async json<T = any>(method: string, path: string, body?: unknown): Promise<T> { // eslint-disable-line @typescript-eslint/no-explicit-any
    const res = await this.request(method, path, body === undefined ? undefined : { body: JSON.stringify(body), contentType: "application/json" });
    return (await res.json()) as T;
  }

  /** Raw bytes up (an upload's part); the parsed JSON answer. */
  async upload<T = any>(path: string, bytes: Uint8Array): Promise<T> { // eslint-disable-line @typescript-eslint/no-explicit-any
    return (await (await this.request("POST", path, { body: bytes, contentType: "application/octet-stream" })).json()) as T;
  }

  /** A request whose answer is read as it comes (text, SSE): the response, once its status is a success. */
  async request(method: string, path: string, init?: { body: string | Uint8Array; contentType: string }): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(this.target.url + path, {
        method,
        body: init?.body,
        headers: { authorization: `Bearer ${this.target.key}`, ...(init ? { "content-type": init.contentType } : {}) },
      });
    } catch (err) {
      throw new CommandFailed(this.unreachable(err));
    }
    if (res.ok) return res;
    const text = await res.text().catch(() => "");
    let message = text.trim().slice(0, 300) || res.statusText;
    let code: string | undefined;
    try {
      const error = (JSON.parse(text) as { error: { message?: string; code?: string } }).error;
      message = error.message ?? message;
      code = error.code ?? undefined;
    } catch {
      // not an API error body: a proxy's page, say
    }
    // A rejected key says which key it was: OPENAI_API_KEY set for OpenAI is a likely one.
    if (code === "invalid_api_key") message += ` (the key from ${this.target.keyFrom})`;
    throw new ApiError(message, res.status, code);
  }

  /** The events of an SSE response, as they arrive. */
  async *events(res: Response): AsyncGenerator<SseEvent> {
    const decoder = new TextDecoder();
    let buffered = "";
    let event = "message";
    let data: string[] = [];
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffered += decoder.decode(chunk, { stream: true });
      let end: number;
      while ((end = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, end).replace(/\r$/, "");
        buffered = buffered.slice(end + 1);
        if (line === "") {
          if (data.length > 0) yield { event, data: data.join("\n") };
          event = "message";
          data = [];
        } else if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }

  /** The WebSocket address of a route. */
  websocketUrl(path: string): string {
    return this.target.url.replace(/^http/, "ws") + path;
  }

  private unreachable(err: unknown): string {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    const why = cause?.code === "ECONNREFUSED" ? "connection refused" : (cause?.code ?? cause?.message ?? (err as Error).message);
    const from = this.target.urlFrom;
    const hint =
      from === FROM_DEFAULT ? "the default address: is `tributary start` running? Or pass --url"
      : from.endsWith("gateway-url") ? `recorded in ${from} by a \`tributary start\` that may have stopped`
      : `from ${from}`;
    return `cannot reach the gateway at ${this.target.url} (${why}; ${hint})`;
  }
}

/** The client of the gateway that `flags` and the environment name. */
export function gatewayClient(flags: { url?: string; "api-key"?: string }): GatewayClient {
  return new GatewayClient(resolveGateway(flags));
}
