import { appRequestHeaders, deploymentStates, pathAddressOf, responseHeadsUnder, type AppBalancer, type AppService, type ResponseSink } from "../../modules/apps/mod.js";
import { errors } from "../../modules/errors/mod.js";
import { listObject, listQuery } from "../../modules/openai/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Params, Router } from "../http/router.js";
import type { PendingBudget } from "../sse/pending-budget.js";
import { sseEvent, SseWriter } from "../sse/sse-writer.js";

// Hosted apps: the deployments API (our definition, docs/platform.md "Hosted apps") and the hosted
// addresses themselves (host names and path addresses), relayed to an app instance over NATS.

export interface AppRouteDeps {
  apps: AppService;
  balancer: AppBalancer;
  maxBodyBytes: number;
  maxAppBodyBytes: number;
  streamBudget: PendingBudget;
  /** The scheme clients reach hosted addresses with: the app's X-Forwarded-Proto. */
  publicScheme: string;
}

const principal = (ex: HttpExchange) => ex.principal!;

export function registerAppRoutes(router: Router, deps: AppRouteDeps): void {
  router.post("/v1/apps/deployments", async (ex) => {
    const { deployment, unchanged } = await deps.apps.create(principal(ex), await ex.readJson(deps.maxBodyBytes));
    ex.json(unchanged ? 200 : 201, { ...deployment, unchanged });
  });

  router.get("/v1/apps/deployments", async (ex) => {
    const params = ex.searchParams();
    for (const name of params.keys()) if (name !== "limit" && name !== "after") throw errors.unknownParam(name);
    const query = listQuery(params, { defaultLimit: 20, maxLimit: 100, orders: false });
    const page = await deps.apps.list(principal(ex), { limit: query.limit, after: query.after });
    ex.json(200, listObject(page));
  });

  router.get("/v1/apps/deployments/:id", async (ex, { id }) => {
    ex.json(200, deps.apps.present(await deps.apps.get(principal(ex), id!)));
  });

  router.post("/v1/apps/deployments/:id/stop", async (ex, { id }) => {
    ex.json(200, await deps.apps.stopDeployment(principal(ex), id!));
  });

  router.get("/v1/apps/deployments/:id/logs", async (ex, { id }) => {
    const follow = ex.searchParams().get("follow");
    if (follow !== null && follow !== "true" && follow !== "false") throw errors.invalidParam("follow", "Invalid value for 'follow': expected true or false.");
    const recent = await deps.apps.logs(principal(ex), id!);
    if (follow !== "true") return ex.json(200, { object: "list", data: recent });
    // Followed: the recent lines, then each new one, until the deployment ends (event `end`).
    const writer = new SseWriter(ex, deps.streamBudget);
    writer.open();
    let held = "";
    writer.onDrain(() => {
      if (held && writer.write(held)) held = "";
    });
    const send = (frame: string) => {
      if (held || !writer.writable) {
        held += frame;
        writer.hold(held.length);
        if (writer.overLimit) writer.drop();
      } else writer.write(frame);
    };
    for (const line of recent) send(sseEvent("log", JSON.stringify(line)));
    const status = (await deps.apps.get(principal(ex), id!)).deployment.status;
    if (deploymentStates.isFinal(status)) return writer.end(held + sseEvent("end", JSON.stringify({ status })));
    await new Promise<void>((resolve) => {
      const sub = deps.apps.followLogs(id!, (event) => {
        if (event.end) {
          sub.unsubscribe();
          return resolve();
        }
        send(sseEvent("log", JSON.stringify({ at: event.at, stream: event.stream, line: event.line })));
      });
      ex.onAbort(() => {
        sub.unsubscribe();
        resolve();
      });
    });
    const final = (await deps.apps.get(principal(ex), id!)).deployment.status;
    writer.end(held + sseEvent("end", JSON.stringify({ status: final })));
  });
}

/**
 * The hosted addresses: `<project slug>.<organization slug>.<apps domain>` (any path), and
 * `/apps/<organization slug>/<project slug>/...` on any other host, relayed to the project's app.
 * Both are authenticated, resolved and refused alike; under a path address the app is asked for
 * what follows the prefix, told the prefix (PREFIX_HEADER: its root_path), and its redirects and
 * cookie paths are put under the prefix.
 */
export function hostedAppsHandler(deps: AppRouteDeps): {
  match(host: string | undefined, rawPath: string): { pattern: string; params: Params } | undefined;
  handler: (ex: HttpExchange, params: Params) => Promise<void>;
} {
  // Host header -> hosted address, parsed once per name: bounded, since the names come from clients.
  const addresses = new Map<string, string | undefined>();
  const addressOf = (host: string | undefined) => {
    if (host === undefined) return undefined;
    if (addresses.has(host)) return addresses.get(host);
    const address = deps.apps.hostedAddress(host);
    if (addresses.size >= 1_024) addresses.clear();
    addresses.set(host, address);
    return address;
  };
  return {
    match: (host, rawPath) => {
      const address = addressOf(host);
      if (address !== undefined) return { pattern: "(hosted app)", params: { address, prefix: "", path: rawPath } };
      const underPath = pathAddressOf(rawPath);
      return underPath && { pattern: "(hosted app, path address)", params: { ...underPath } };
    },
    handler: async (ex, { address, prefix, path }) => {
      const target = deps.apps.resolveCached(address!) ?? (await deps.apps.resolve(address!));
      if (!target) throw errors.notFound(`No app is deployed at ${prefix || address}.`, null, "app_not_found");
      if (target.project !== principal(ex).projectId) throw errors.forbidden("This API key's project does not own the app at this address.", "wrong_project");
      const hasBody = ex.method === "POST" || ex.method === "PUT" || ex.method === "PATCH";
      const body = hasBody ? ex.bodyChunks(deps.maxAppBodyBytes) : undefined;
      // Forwarded headers are the gateway's word to the app: a client's copies never reach it.
      const headers = appRequestHeaders(ex.headers, { clientAddress: ex.remoteAddress, host: ex.headers.host, scheme: deps.publicScheme, prefix: prefix || undefined, requestId: ex.requestId });
      const request = { method: ex.method, target: path! + (ex.query ? `?${ex.query}` : ""), headers, body };
      // To the least busy instance; another one when the first failed it for a reason not the app's (AppBalancer).
      await deps.balancer.relay(address!, target, request, sink(ex, prefix || undefined));
    },
  };
}

/** The client's side of an exchange; `prefix`: reached at a path address (response heads put under it). */
function sink(ex: HttpExchange, prefix: string | undefined): ResponseSink {
  const head = (headers: Array<[string, string]>) => (prefix ? responseHeadsUnder(headers, prefix) : headers);
  let waiters: Array<() => void> = [];
  let registered = false;
  const wake = () => {
    for (const w of waiters.splice(0)) w();
  };
  ex.onAbort(wake);
  return {
    get live() {
      return ex.live;
    },
    head: (status, headers) => {
      ex.beginRelayed(status, head(headers));
    },
    whole: (status, headers, body) => ex.relayWhole(status, head(headers), body),
    batch: (fn) => ex.corked(fn),
    write: (chunk) => ex.write(chunk),
    writable: () => {
      if (!ex.live) return Promise.resolve();
      if (!registered) {
        registered = true;
        ex.onWritable(() => {
          wake();
          return true;
        });
      }
      return new Promise<void>((resolve) => waiters.push(resolve));
    },
    end: () => ex.endStream(""),
    abort: () => ex.close(),
    onGone: (handler) => ex.onAbort(handler),
  };
}
