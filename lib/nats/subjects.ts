// Every NATS subject, queue group, KV bucket and stream name of the platform, in one place.
// docs/architecture.md has the same table for operators.

export const SUBJECT_ROOT = "tributary.v1";

/**
 * Model ids such as "qwen/qwen3-0.6b" may contain characters that NATS reserves in subjects
 * ('.', '*', '>', whitespace). They are percent-encoded into a single subject token.
 */
export function modelToken(modelId: string): string {
  return modelId.replace(/[.*>%\s]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0"));
}

export function decodeModelToken(token: string): string {
  return token.replace(/%([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

export const subjects = {
  /** Generate requests for any runner of a model (queue group `runnerQueue`); used when a gateway knows no runner yet. */
  generate: (modelId: string) => `${SUBJECT_ROOT}.generate.${modelToken(modelId)}`,
  /** Generate requests addressed to one runner actor (the gateway picked it from heartbeats). */
  runnerGenerate: (runnerId: string) => `${SUBJECT_ROOT}.runner.${runnerId}.generate`,
  /** Cancels addressed to one runner actor. */
  runnerCancel: (runnerId: string) => `${SUBJECT_ROOT}.runner.${runnerId}.cancel`,
  /** Which requests a runner still holds (HeldQuery/HeldReply): streams gone quiet ask it. */
  runnerHeld: (runnerId: string) => `${SUBJECT_ROOT}.runner.${runnerId}.held`,
  /** A request's events again, from a sequence number on (ResendQuery/ResendReply): a requester that lost some asks. */
  runnerResend: (runnerId: string) => `${SUBJECT_ROOT}.runner.${runnerId}.resend`,
  /** Cancels for a model, for requests whose runner is not known yet. */
  cancel: (modelId: string) => `${SUBJECT_ROOT}.cancel.${modelToken(modelId)}`,
  /** Runner heartbeats of a model. */
  heartbeat: (modelId: string) => `${SUBJECT_ROOT}.heartbeat.${modelToken(modelId)}`,
  /** All runner heartbeats. */
  heartbeatAll: `${SUBJECT_ROOT}.heartbeat.>`,
  /** Reply subjects of one gateway: it subscribes once to the wildcard and routes by request id. */
  replyWildcard: (gatewayId: string) => `${SUBJECT_ROOT}.reply.${gatewayId}.>`,
  reply: (gatewayId: string, requestId: string) => `${SUBJECT_ROOT}.reply.${gatewayId}.${requestId}`,
  /**
   * Where runners send one gateway's events packed (RunnerEventBatch, one message per runner
   * step). Outside the wildcard above (one token shorter), within the same grants.
   */
  replyBatch: (gatewayId: string) => `${SUBJECT_ROOT}.reply.${gatewayId}`,
  /** Batch jobs (stream `streams.batchJobs`): one message per batch, held by the coordinator that owns it. */
  batchJob: `${SUBJECT_ROOT}.batch.job`,
  /** Batch lines waiting to run (stream `streams.batchWork`), one subject per model and batch. */
  batchWork: (modelId: string, batchId: string) => `${SUBJECT_ROOT}.batch.work.${modelToken(modelId)}.${batchId}`,
  /** Every waiting line of one model (the filter of that model's work consumer). */
  batchWorkOfModel: (modelId: string) => `${SUBJECT_ROOT}.batch.work.${modelToken(modelId)}.>`,
  /** Every waiting line of one batch, whatever its models (purged on cancel, expiry and deletion). */
  batchWorkOfBatch: (batchId: string) => `${SUBJECT_ROOT}.batch.work.*.${batchId}`,
  batchWorkAll: `${SUBJECT_ROOT}.batch.work.>`,
  /** Lease requests (and returns) of one rate-limit budget: only its current owner subscribes. */
  budgetLease: (modelId: string, scope: string, scopeId: string) => `${SUBJECT_ROOT}.budget.${modelToken(modelId)}.${scope}.${scopeId}.lease`,
  budgetReturn: (modelId: string, scope: string, scopeId: string) => `${SUBJECT_ROOT}.budget.${modelToken(modelId)}.${scope}.${scopeId}.return`,
  /** Activation of a budget that has no (live) owner: any actor host (queue group `budgetHosts`) takes it. */
  budgetActivate: `${SUBJECT_ROOT}.budget.activate`,
  /** "Do you still own this budget?", addressed to the actor host recorded as its owner. */
  budgetHostProbe: (hostId: string) => `${SUBJECT_ROOT}.budget-host.${hostId}.probe`,
  /** Background response jobs (stream `streams.responsesBackground`): one message per queued response. */
  responsesBackground: `${SUBJECT_ROOT}.responses.background`,
  /** Cancels of background responses, to whichever worker runs it (core NATS). */
  responseCancel: (responseId: string) => `${SUBJECT_ROOT}.responses.cancel.${responseId}`,
  responseCancelAll: `${SUBJECT_ROOT}.responses.cancel.*`,
  /** Stream events of a background response with stream: true (stream `streams.responseEvents`). */
  responseEvents: (responseId: string) => `${SUBJECT_ROOT}.responses.events.${responseId}`,
  responseEventsAll: `${SUBJECT_ROOT}.responses.events.>`,
  /**
   * Traces of `log: true` requests (stream `streams.traces`), one subject per project, model, key
   * and status (each a kvToken), so that the list filters run in the server.
   */
  trace: (projectId: string, modelId: string, keyId: string, status: string) =>
    `${SUBJECT_ROOT}.traces.${traceToken(projectId)}.${traceToken(modelId)}.${traceToken(keyId)}.${traceToken(status)}`,
  /** The traces of a project, narrowed by whichever of model, key and status are given. */
  traceFilter: (projectId: string, filter: { model?: string; keyId?: string; status?: string } = {}) =>
    `${SUBJECT_ROOT}.traces.${traceToken(projectId)}.${filter.model ? traceToken(filter.model) : "*"}.${filter.keyId ? traceToken(filter.keyId) : "*"}.${filter.status ? traceToken(filter.status) : "*"}`,
  tracesAll: `${SUBJECT_ROOT}.traces.>`,
  /** Usage rollups (stream `streams.usage`): each gateway and actor host publishes its per-minute counts here. */
  usageRollup: (sourceId: string) => `${SUBJECT_ROOT}.usage.${sourceId}`,
  usageRollupAll: `${SUBJECT_ROOT}.usage.>`,
  /** Sandbox host heartbeats (capacity and sandboxes running), one subject for every host. */
  sandboxHostHeartbeat: `${SUBJECT_ROOT}.sandbox-host.heartbeat`,
  /** Calls to one sandbox host (create, exec, files, stop), request/reply, schema-checked JSON. */
  sandboxHostRpc: (hostId: string) => `${SUBJECT_ROOT}.sandbox-host.${hostId}.rpc`,
  /** Output events of one streamed exec, from the host to the gateway that asked. */
  sandboxExecEvents: (execId: string) => `${SUBJECT_ROOT}.sandbox-exec.${execId}`,
  /** Jobs waiting to run (stream `streams.jobs`, work queue): `{project, job_id}` JSON. */
  jobQueue: `${SUBJECT_ROOT}.jobs.queue`,
  /** Cancels of running jobs, to whichever worker runs it (core NATS). */
  jobCancel: (jobId: string) => `${SUBJECT_ROOT}.jobs.cancel.${jobId}`,
  jobCancelAll: `${SUBJECT_ROOT}.jobs.cancel.*`,
  /** Output of a job (stream `streams.jobLogs`): one message per chunk of stdout or stderr. */
  jobLogs: (jobId: string) => `${SUBJECT_ROOT}.jobs.logs.${jobId}`,
  jobLogsAll: `${SUBJECT_ROOT}.jobs.logs.*`,
  /** App host heartbeats (capacity, and the deployments each runs with their state), one subject for every host. */
  appHostHeartbeat: `${SUBJECT_ROOT}.app-host.heartbeat`,
  /** Calls to one app host (start or stop an instance, stop a deployment, logs), request/reply, schema-checked JSON. */
  appHostRpc: (hostId: string) => `${SUBJECT_ROOT}.app-host.${hostId}.rpc`,
  /** A gateway holding a request for a deployment with no instance serving: the reconciler starts one. */
  appDemand: `${SUBJECT_ROOT}.app-demand`,
  /** "Do you reconcile deployments now?", to the actor host the reconciler's record names. */
  appReconcilerProbe: (hostId: string) => `${SUBJECT_ROOT}.app-reconciler.${hostId}.probe`,
  /** HTTP exchange frames (AppRequestFrame, protobuf) from gateways to one app host. */
  appHostExchange: (hostId: string) => `${SUBJECT_ROOT}.app-host.${hostId}.exchange`,
  /** HTTP exchange frames (AppResponseFrame) back to one gateway: it subscribes to its wildcard and routes by exchange id. */
  appReply: (gatewayId: string, exchangeId: string) => `${SUBJECT_ROOT}.app-reply.${gatewayId}.${exchangeId}`,
  appReplyWildcard: (gatewayId: string) => `${SUBJECT_ROOT}.app-reply.${gatewayId}.>`,
  /** Log lines of one deployment's instances, as they are written (followed by GET .../logs?follow=true). */
  appLogs: (deploymentId: string) => `${SUBJECT_ROOT}.app-logs.${deploymentId}`,
} as const;

/**
 * Wildcards covering each family of subjects above (as the processes subscribe to them): what the
 * permission lists of lib/nats/permissions.ts grant (test/unit/nats-permissions.test.ts checks
 * that every subject above falls under its wildcard).
 */
export const subjectWildcards = {
  generate: `${SUBJECT_ROOT}.generate.*`,
  runnerGenerate: `${SUBJECT_ROOT}.runner.*.generate`,
  runnerCancel: `${SUBJECT_ROOT}.runner.*.cancel`,
  runnerHeld: `${SUBJECT_ROOT}.runner.*.held`,
  runnerResend: `${SUBJECT_ROOT}.runner.*.resend`,
  cancel: `${SUBJECT_ROOT}.cancel.*`,
  heartbeat: subjects.heartbeatAll,
  reply: `${SUBJECT_ROOT}.reply.>`,
  batchJob: subjects.batchJob,
  batchWork: subjects.batchWorkAll,
  budgetLease: `${SUBJECT_ROOT}.budget.*.*.*.lease`,
  budgetReturn: `${SUBJECT_ROOT}.budget.*.*.*.return`,
  budgetActivate: subjects.budgetActivate,
  budgetHostProbe: `${SUBJECT_ROOT}.budget-host.*.probe`,
  responsesBackground: subjects.responsesBackground,
  responseCancel: `${SUBJECT_ROOT}.responses.cancel.*`,
  responseEvents: subjects.responseEventsAll,
  sandboxHostHeartbeat: subjects.sandboxHostHeartbeat,
  sandboxHostRpc: `${SUBJECT_ROOT}.sandbox-host.*.rpc`,
  sandboxExecEvents: `${SUBJECT_ROOT}.sandbox-exec.*`,
  jobQueue: subjects.jobQueue,
  jobCancel: subjects.jobCancelAll,
  jobLogs: subjects.jobLogsAll,
  appHostHeartbeat: subjects.appHostHeartbeat,
  appHostRpc: `${SUBJECT_ROOT}.app-host.*.rpc`,
  appDemand: subjects.appDemand,
  appReconcilerProbe: `${SUBJECT_ROOT}.app-reconciler.*.probe`,
  appHostExchange: `${SUBJECT_ROOT}.app-host.*.exchange`,
  appReply: `${SUBJECT_ROOT}.app-reply.>`,
  appLogs: `${SUBJECT_ROOT}.app-logs.*`,
  traces: subjects.tracesAll,
  usageRollup: subjects.usageRollupAll,
} as const;

export const queues = {
  /** Queue group shared by all runners of one model on `subjects.generate`. */
  runners: (modelId: string) => `runners.${modelToken(modelId)}`,
  /** Actor hosts sharing the activation of rate-limit budgets. */
  budgetHosts: "budget-hosts",
} as const;

/**
 * One KV key token for an arbitrary string (a model id, a project id, a template name): KV keys
 * may hold only [-/_=.A-Za-z0-9] and use '.' as a separator, so every other character is written
 * as its UTF-8 bytes, =XX each ("qwen/qwen3-0.6b" -> "qwen=2Fqwen3-0=2E6b"). '=' itself is escaped,
 * so the encoding is injective and kvTokenDecode reverses it.
 */
const PLAIN_TOKEN = /^[-_A-Za-z0-9]*$/;

export function kvToken(value: string): string {
  // Most values (ids, plain names) need no escaping: one test instead of one per character.
  if (PLAIN_TOKEN.test(value)) return value;
  let out = "";
  for (const ch of value) {
    if (/[-_A-Za-z0-9]/.test(ch)) out += ch;
    else for (const byte of Buffer.from(ch, "utf8")) out += "=" + byte.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

/** A subject token for a trace field: its kvToken, "-" for an empty value (a subject token cannot be empty). */
function traceToken(value: string): string {
  return value ? kvToken(value) : "-";
}

export function kvTokenDecode(token: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < token.length; i++) {
    if (token[i] === "=") {
      bytes.push(parseInt(token.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(token.charCodeAt(i));
  }
  return Buffer.from(bytes).toString("utf8");
}

/**
 * JetStream KV buckets, Object Store buckets and streams. Each feature adds its own here, with a
 * line on what it holds; docs/architecture.md's table lists them for operators.
 */
export const buckets = {
  /** KV: file metadata (the OpenAI file object), key `<project>.<file id>`. */
  files: "tributary_files",
  /** Object Store: file contents, object name = file id (uploads, batch output and error files). */
  fileContents: "tributary_file_contents",
  /**
   * KV: artifact records (the artifact object, its project, the object holding its bytes), key
   * `<project>.<artifact id>`; while it is uploading in parts, one entry per part received,
   * `<project>.<artifact id>.<part number>` (size and sha256).
   */
  artifacts: "tributary_artifacts",
  /**
   * Object Store: artifact contents, object `<artifact id>` (single-shot) or `<artifact id>.final-<token>`
   * (assembled from parts: the record names it); the parts of an unfinished multipart upload are
   * objects `<artifact id>.part-<n>` until finish assembles them.
   */
  artifactContents: "tributary_artifact_contents",
  /** KV: batch records (the OpenAI batch object and its coordinator state), key `<project>.<batch id>`. */
  batches: "tributary_batches",
  /** KV: one finished line of a batch, key `<batch id>.<line>`, written create-only (first writer wins). */
  batchResults: "tributary_batch_results",
  /**
   * KV: organizations, projects, API keys and invitations (JSON records):
   * `org.<org>`, `project.<org>.<project>`, `apikey.<sha256 of the key, hex>` (the key record;
   * the key itself is stored nowhere), `keyid.<org>.<key id>` (index: key id -> hash),
   * `invitation.<invitation id>`. Gateways watch it to drop revoked keys from their caches.
   */
  accounts: "tributary_accounts",
  /** KV: last-used time of each API key, `<key id>`; written by gateways in batches, not per request. */
  apiKeyUsage: "tributary_api_key_usage",
  /**
   * KV: rate-limit budget state, `<model>.<scope>.<scope id>` (kvToken-encoded): the owning actor
   * host, the current window and what was granted in it. Every grant is written here (compare-and-set
   * on the revision) before it is answered, so a new owner resumes without double-spending.
   */
  rateLimits: "tributary_rate_limits",
  /** Stored responses (store: true), their input items and chain links, keyed <project>.<response id>. */
  responses: "tributary_responses",
  /** Conversations and their ordered items, keyed <project>.<conversation id>[.it.<seq>.<item id>]. */
  conversations: "tributary_conversations",
  /** Named prompt templates run by POST /v1/responses/{name}, keyed <project>.<name>. */
  prompts: "tributary_prompts",
  /**
   * KV (one bucket per width: minute, hour, day): usage rollups, `<bucket start, unix s>.<project>` (a kvToken)
   * -> rows by key, model and batch-or-not: requests, input, cached input and output tokens, errors.
   * Written only by the usage folder actor (compare-and-set); kept per width (see usage retention).
   */
  usageMinute: "tributary_usage_minute",
  usageHour: "tributary_usage_hour",
  usageDay: "tributary_usage_day",
  /** KV: dashboard members, `member.<org>.<member>` (scrypt password hash), `email.<sha256 of the email>` (index), invitations, and `signin.<sha256 of the token>` (one-time sign-in links). */
  members: "tributary_members",
  /** KV (max age: the session lifetime): dashboard sessions, `session.<sha256 of the token>`. */
  sessions: "tributary_sessions",
  /** KV: sandbox records (the sandbox object and its host), key `<project>.<sandbox id>`; kept 7 days after their last change. */
  sandboxes: "tributary_sandboxes",
  /** KV: secrets, envelope-encrypted (a data key per secret, wrapped by the master key), key `<project>.<NAME>`. */
  secrets: "tributary_secrets",
  /** KV: job records (the job object, its project and its environment), key `<project>.<job id>`; kept 7 days after their last write. */
  jobs: "tributary_jobs",
  /**
   * KV: hosted app deployments, `<project>.<deployment id>` (the deployment object, its manifest
   * and host), and `route.<project>`: the deployment a project's hosted address serves.
   */
  appDeployments: "tributary_app_deployments",
} as const;

export const streams = {
  /** Work queue of batch jobs: a coordinator holds a batch's message (acked when the batch is final). */
  batchJobs: "TRIBUTARY_BATCH_JOBS",
  /** Work queue of batch lines, consumed by the batch workers with explicit ack. */
  batchWork: "TRIBUTARY_BATCH_WORK",
  /** Work queue of background responses: the actor host's response workers consume it. */
  responsesBackground: "TRIBUTARY_RESPONSES_BACKGROUND",
  /** Stream events of background responses created with stream: true, for GET ?stream=true replay. */
  responseEvents: "TRIBUTARY_RESPONSE_EVENTS",
  /** Traces of `log: true` requests; retention by age and bytes (whole messages expire, oldest first). */
  traces: "TRIBUTARY_TRACES",
  /** Per-minute usage counts on their way to the usage folder (work queue). */
  usage: "TRIBUTARY_USAGE",
  /** Work queue of jobs: the actor hosts' job workers consume it. */
  jobs: "TRIBUTARY_JOBS",
  /** Output of jobs (7 days), read by GET /v1/jobs/{id}/logs. */
  jobLogs: "TRIBUTARY_JOB_LOGS",
} as const;

/** Durable consumers on the streams above. */
export const consumers = {
  batchCoordinators: "batch-coordinators",
  /** One per model, filtered on that model's work subjects. */
  batchWorkers: (modelId: string) => `batch-workers-${modelToken(modelId).replace(/[^A-Za-z0-9_-]/g, "_")}`,
  /** The background response workers of every actor host share it. */
  responsesBackground: "responses-background",
  /** The usage folders of every actor host share it (one message in flight: folds stay in order). */
  usageFolders: "usage-folders",
  /** The job workers of every actor host share it. */
  jobWorkers: "job-workers",
} as const;
