import { errors } from "../../modules/errors/mod.js";
import type { HttpExchange } from "./exchange.js";

export type Params = Record<string, string>;
export type Handler = (ex: HttpExchange, params: Params) => void | Promise<void>;

interface Route {
  method: string;
  pattern: string;
  /** Segments; ":name" captures one segment, "*name" captures the rest (slashes included). */
  segments: string[];
  handler: Handler;
  /** Runs without authentication (probes, the dashboard's static page). */
  public: boolean;
}

export interface Match {
  /** The route's pattern (a bounded label for metrics). */
  pattern: string;
  handler: Handler;
  params: Params;
  public: boolean;
}

/** A small method + path router. Knows enough about its routes to answer 404 and 405 correctly. */
export class Router {
  private readonly routes: Route[] = [];
  /** First path segments another dispatcher answers before the router (the hosted apps' path addresses). */
  private readonly reserved = new Set<string>();

  on(method: string, pattern: string, handler: Handler, options: { public?: boolean } = {}): this {
    const first = pattern.split("/").filter(Boolean)[0];
    if (first !== undefined && this.reserved.has(first)) throw new Error(`route ${method} ${pattern}: /${first}/ is reserved`);
    this.routes.push({ method, pattern, segments: pattern.split("/").filter(Boolean), handler, public: options.public ?? false });
    return this;
  }

  /**
   * Keeps the paths under `/segment/` out of the router: what is there is dispatched before the
   * router sees it, so a route there would never run. One registered before or after throws.
   */
  reserve(segment: string): this {
    const taken = this.routes.find((r) => r.segments[0] === segment);
    if (taken) throw new Error(`route ${taken.method} ${taken.pattern}: /${segment}/ is reserved`);
    this.reserved.add(segment);
    return this;
  }

  get(pattern: string, handler: Handler, options?: { public?: boolean }): this {
    return this.on("GET", pattern, handler, options);
  }

  post(pattern: string, handler: Handler, options?: { public?: boolean }): this {
    return this.on("POST", pattern, handler, options);
  }

  delete(pattern: string, handler: Handler, options?: { public?: boolean }): this {
    return this.on("DELETE", pattern, handler, options);
  }

  /** The matching route, or throws the 404/405 DomainError for the request. */
  match(method: string, path: string): Match {
    const parts = path.split("/").filter(Boolean);
    const allowed: string[] = [];
    for (const route of this.routes) {
      const params = matchSegments(route.segments, parts);
      if (!params) continue;
      if (route.method === method || (method === "HEAD" && route.method === "GET"))
        return { pattern: route.pattern, handler: route.handler, params, public: route.public };
      if (!allowed.includes(route.method)) allowed.push(route.method);
    }
    if (allowed.length > 0) throw errors.methodNotAllowed(method, path, allowed);
    throw errors.unknownRoute(method, path);
  }
}

function matchSegments(pattern: string[], parts: string[]): Params | undefined {
  const params: Params = {};
  for (let i = 0; i < pattern.length; i++) {
    const seg = pattern[i]!;
    if (seg.startsWith("*")) {
      if (i >= parts.length) return undefined;
      params[seg.slice(1)] = parts.slice(i).map(decodeSegment).join("/");
      return params;
    }
    const part = parts[i];
    if (part === undefined) return undefined;
    if (seg.startsWith(":")) params[seg.slice(1)] = decodeSegment(part);
    else if (seg !== part) return undefined;
  }
  return pattern.length === parts.length ? params : undefined;
}

function decodeSegment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
