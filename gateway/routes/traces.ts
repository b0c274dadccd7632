import { errors } from "../../modules/errors/mod.js";
import { listObject } from "../../modules/openai/mod.js";
import { parseTraceQuery, TRACE_ID, type TraceStore } from "../../modules/traces/mod.js";
import type { Router } from "../http/router.js";

/**
 * GET /v1/traces and GET /v1/traces/{id} (Tributary's definition): the traces of `log: true`
 * requests of the caller's project, newest first. Another project's trace is a 404.
 */
export function registerTraceRoutes(router: Router, traces: TraceStore): void {
  router.get("/v1/traces", async (ex) => {
    const query = parseTraceQuery(ex.searchParams());
    const page = await traces.list(ex.principal!.projectId, query);
    ex.json(200, listObject(page));
  });

  router.get("/v1/traces/:id", async (ex, { id }) => {
    const notFound = () => errors.notFound(`Trace with id '${id!.slice(0, 64)}' not found.`);
    if (!TRACE_ID.test(id!)) throw notFound();
    const trace = await traces.get(ex.principal!.projectId, id!);
    if (!trace) throw notFound();
    ex.json(200, trace);
  });
}
