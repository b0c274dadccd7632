// Every NATS subject, queue group, KV bucket and stream name of the platform, in one place.
// The README has the same table for operators.

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
  /** Cancels for a model, for requests whose runner is not known yet. */
  cancel: (modelId: string) => `${SUBJECT_ROOT}.cancel.${modelToken(modelId)}`,
  /** Runner heartbeats of a model. */
  heartbeat: (modelId: string) => `${SUBJECT_ROOT}.heartbeat.${modelToken(modelId)}`,
  /** All runner heartbeats. */
  heartbeatAll: `${SUBJECT_ROOT}.heartbeat.>`,
  /** Reply subjects of one gateway: it subscribes once to the wildcard and routes by request id. */
  replyWildcard: (gatewayId: string) => `${SUBJECT_ROOT}.reply.${gatewayId}.>`,
  reply: (gatewayId: string, requestId: string) => `${SUBJECT_ROOT}.reply.${gatewayId}.${requestId}`,
  /** Background response jobs (stream `streams.responsesBackground`): one message per queued response. */
  responsesBackground: `${SUBJECT_ROOT}.responses.background`,
  /** Cancels of background responses, to whichever worker runs it (core NATS). */
  responseCancel: (responseId: string) => `${SUBJECT_ROOT}.responses.cancel.${responseId}`,
  responseCancelAll: `${SUBJECT_ROOT}.responses.cancel.*`,
  /** Stream events of a background response with stream: true (stream `streams.responseEvents`). */
  responseEvents: (responseId: string) => `${SUBJECT_ROOT}.responses.events.${responseId}`,
  responseEventsAll: `${SUBJECT_ROOT}.responses.events.>`,
} as const;

export const queues = {
  /** Queue group shared by all runners of one model on `subjects.generate`. */
  runners: (modelId: string) => `runners.${modelToken(modelId)}`,
} as const;

/**
 * JetStream KV buckets, Object Store buckets and streams. Each feature adds its own here, with a
 * line on what it holds; the README's table lists them for operators.
 */
export const buckets = {
  /** Stored responses (store: true), their input items and chain links, keyed <project>.<response id>. */
  responses: "tributary_responses",
  /** Conversations and their ordered items, keyed <project>.<conversation id>[.it.<seq>.<item id>]. */
  conversations: "tributary_conversations",
  /** Named prompt templates run by POST /v1/responses/{name}, keyed <project>.<name>. */
  prompts: "tributary_prompts",
} as const;

export const streams = {
  /** Work queue of background responses: the actor host's response workers consume it. */
  responsesBackground: "TRIBUTARY_RESPONSES_BACKGROUND",
  /** Stream events of background responses created with stream: true, for GET ?stream=true replay. */
  responseEvents: "TRIBUTARY_RESPONSE_EVENTS",
} as const;

/** Durable consumers on the streams above. */
export const consumers = {
  /** The background response workers of every actor host share it. */
  responsesBackground: "responses-background",
} as const;
