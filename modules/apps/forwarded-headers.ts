import { PREFIX_HEADER } from "./addresses.js";

// What a hosted app is told about the client, and by whom. The gateway is the edge of this
// platform: nothing in front of it is trusted, so every header that carries a proxy's word about
// the request (who the client is, which host and scheme it used, where the app is mounted, the
// request's id) comes from the gateway alone. A client's copies are dropped, not appended to: an
// app (or uvicorn's proxy-headers handling, or a framework's ProxyFix) that reads the first or the
// last X-Forwarded-For would otherwise believe whatever address the client wrote there. The
// gateway's own values are set once, on both addresses.
//
// Behind a load balancer the app sees the balancer's address as the client's, as the gateway's
// own connection limits do: trusting a balancer's X-Forwarded-For would need a list of trusted
// proxies, which the platform does not have.

/** Request headers only the gateway sets (lowercase): a client's copies never reach an app. */
export const EDGE_HEADERS: ReadonlySet<string> = new Set([
  "forwarded",
  "x-forwarded-for",
  "x-forwarded-host",
  "x-forwarded-port",
  "x-forwarded-prefix",
  "x-forwarded-proto",
  "x-real-ip",
  "x-request-id",
]);

/** What the gateway knows of one request at the edge. */
export interface EdgeFacts {
  /** The client's IP address (the peer of the gateway's connection). */
  clientAddress: string;
  /** The Host the client asked for (undefined: none was sent). */
  host: string | undefined;
  /** The scheme clients reach hosted addresses with (TRIBUTARY_APPS_PUBLIC_SCHEME). */
  scheme: string;
  /** The path address's prefix (`/apps/<organization>/<project>`), or undefined at the host name. */
  prefix: string | undefined;
  /** The gateway's id of the request (its x-request-id, in its logs and traces). */
  requestId: string;
}

/**
 * The request headers an app gets: the client's (names lowercase, as the gateway reads them)
 * without EDGE_HEADERS, then the gateway's own X-Forwarded-For, -Host, -Proto, -Prefix (at a
 * path address) and X-Request-Id.
 */
export function appRequestHeaders(clientHeaders: Record<string, string>, edge: EdgeFacts): Array<[string, string]> {
  const headers: Array<[string, string]> = [];
  for (const name in clientHeaders) if (!EDGE_HEADERS.has(name)) headers.push([name, clientHeaders[name]!]);
  headers.push(["x-forwarded-for", edge.clientAddress], ["x-forwarded-proto", edge.scheme]);
  if (edge.host !== undefined) headers.push(["x-forwarded-host", edge.host]);
  if (edge.prefix) headers.push([PREFIX_HEADER, edge.prefix]);
  headers.push(["x-request-id", edge.requestId]);
  return headers;
}
