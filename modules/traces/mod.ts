// The public surface of the traces module: what `log: true` records (one trace per request), the
// observation every inference request carries (usage and metrics read it too), the writer that
// stores traces off the request path, and the trace stream's reads.
export { type ObservedUsage, RequestObservation, type TraceEndpoint, type TraceStatus } from "./observation.js";
export { buildTrace, capText, type CappedText, newTraceId, statusOf, type Trace, TRACE_ID, traceIdTime, traceSchema } from "./trace-record.js";
export { type TraceQuery, type TraceRetention, TraceStore } from "./trace-store.js";
export { readTraceMessage, TRACE_MESSAGE_MAGIC } from "./trace-codec.js";
export { packTraces, TraceWriter, type TraceWriterOptions } from "./trace-writer.js";
export { parseTraceQuery, TRACE_STATUSES } from "./trace-query.js";
