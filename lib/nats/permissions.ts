import { buckets, streams, subjectWildcards } from "./subjects.js";

// Who may publish and subscribe to what on NATS: one identity per kind of process, its allow
// lists derived from the subject, bucket and stream names of subjects.ts. The embedded
// nats-server (cli/), the test harness and k8s/nats-auth.conf (generated from here, checked by
// test/unit/nats-permissions.test.ts) all render their `authorization` block from this module.
//
// What a list does not allow is refused by the server: a gateway cannot subscribe to generate
// or budget subjects (it cannot answer as a runner or a budget owner) nor publish replies or
// heartbeats (it cannot pose as a runner); a runner reaches no JetStream at all (no $JS.API, no
// $KV: it cannot read the accounts bucket).
//
// Request/reply: every identity has its own inbox prefix (`_INBOX.<identity>`) and may subscribe
// only below it, so no process reads another kind's replies. Answers to requests go out through
// `allow_responses`: a process may publish once to the reply subject of a message it received,
// and to no other inbox.

export const NATS_IDENTITIES = ["gateway", "actors", "runner", "admin", "sandbox-host"] as const;
export type NatsIdentity = (typeof NATS_IDENTITIES)[number];

export function isNatsIdentity(value: string): value is NatsIdentity {
  return (NATS_IDENTITIES as readonly string[]).includes(value);
}

export interface NatsPermissions {
  publish: { allow: string[]; deny?: string[] };
  subscribe: { allow: string[]; deny?: string[] };
  /** May answer requests it received (once each, on their reply subject). */
  allowResponses: boolean;
}

/** The inbox prefix an identity's connections use for request/reply and JetStream deliveries. */
export const inboxPrefix = (identity: NatsIdentity) => `_INBOX.${identity}`;

const w = subjectWildcards;
// Core subjects, grouped by who sends them (docs/architecture.md's subject table).
const generation = {
  /** Sent by whoever runs a generation (gateway, actor host for batches and background runs). */
  requests: [w.generate, w.runnerGenerate, w.runnerCancel, w.runnerHeld, w.runnerResend, w.cancel],
  /** Runner -> requester: deltas on the requester's reply subjects. */
  replies: w.reply,
  heartbeats: w.heartbeat,
};
const budgets = { lease: w.budgetLease, ret: w.budgetReturn, activate: w.budgetActivate, probe: w.budgetHostProbe };
const responses = { background: w.responsesBackground, cancel: w.responseCancel, events: w.responseEvents };
const batches = { job: w.batchJob, work: w.batchWork };
/** Traces of `log: true` requests and usage rows, written by gateways and actor hosts into their streams. */
const observations = [w.traces, w.usageRollup];
/** Sandbox hosts: heartbeats and their calls (gateway, job workers -> host), streamed exec output (host -> caller). */
const sandboxes = { heartbeat: w.sandboxHostHeartbeat, rpc: w.sandboxHostRpc, execEvents: w.sandboxExecEvents };
/** Jobs: queued into their stream by the gateway, cancelled on core NATS, their output into the log stream. */
const jobs = { queue: w.jobQueue, cancel: w.jobCancel, logs: w.jobLogs };
/** App hosts: heartbeats, calls (gateway -> host), HTTP exchanges (both ways) and deployment logs (host -> gateway). */
const apps = { heartbeat: w.appHostHeartbeat, rpc: w.appHostRpc, demand: w.appDemand, reconcilerProbe: w.appReconcilerProbe, exchange: w.appHostExchange, reply: w.appReply, logs: w.appLogs };

const kvStream = (bucket: string) => `KV_${bucket}`;
const objStream = (bucket: string) => `OBJ_${bucket}`;

/**
 * What a JetStream client needs for a set of KV buckets, Object Stores and streams: the API
 * subjects naming those streams (create/update/info/purge, direct and stored reads, consumers),
 * acks of their consumers, and publishing into KV and Object Store subjects. Nothing here names
 * another stream, so the server refuses the rest.
 */
function jetStreamAccess(access: { kv: string[]; obj: string[]; streams: string[] }): string[] {
  const names = [...access.kv.map(kvStream), ...access.obj.map(objStream), ...access.streams];
  return [
    "$JS.API.INFO",
    ...names.flatMap((s) => [
      `$JS.API.STREAM.*.${s}`,
      `$JS.API.STREAM.MSG.*.${s}`,
      `$JS.API.DIRECT.GET.${s}`,
      `$JS.API.DIRECT.GET.${s}.>`,
      `$JS.API.CONSUMER.*.${s}`,
      `$JS.API.CONSUMER.*.${s}.>`,
      `$JS.API.CONSUMER.DURABLE.CREATE.${s}.>`,
      `$JS.API.CONSUMER.MSG.NEXT.${s}.>`,
      `$JS.ACK.${s}.>`,
      `$JS.FC.${s}.>`,
    ]),
    ...access.kv.map((b) => `$KV.${b}.>`),
    ...access.obj.map((b) => `$O.${b}.>`),
  ];
}

/** No service deletes a stream or bucket: an operator does, as `admin`. */
const noStreamDeletion = ["$JS.API.STREAM.DELETE.>"];

/** State the gateway reads and writes: everything a request can touch, not the budgets' state. */
const gatewayState = {
  kv: [
    buckets.files, buckets.batches, buckets.batchResults, buckets.accounts, buckets.apiKeyUsage, buckets.responses, buckets.conversations, buckets.prompts,
    // The usage API and the dashboard read the rollups; sign-in keeps members and sessions.
    buckets.usageMinute, buckets.usageHour, buckets.usageDay, buckets.members, buckets.sessions,
    buckets.sandboxes, buckets.secrets, buckets.jobs, buckets.artifacts, buckets.appDeployments,
  ],
  obj: [buckets.fileContents, buckets.artifactContents],
  streams: [streams.batchJobs, streams.batchWork, streams.responsesBackground, streams.responseEvents, streams.traces, streams.usage, streams.jobs, streams.jobLogs],
};
/**
 * A sandbox host reads the records of its sandboxes and the secrets it hands them (decrypted only
 * there); as an app host it reads app bundles (artifacts) and writes its deployments' records.
 */
const sandboxHostState = { kv: [buckets.sandboxes, buckets.secrets, buckets.artifacts, buckets.appDeployments], obj: [buckets.artifactContents], streams: [] };
/** The actor host holds every piece of state: budgets, batches, files, accounts, responses. */
const objectStores: readonly string[] = [buckets.fileContents, buckets.artifactContents];
const actorsState = {
  kv: Object.values(buckets).filter((b) => !objectStores.includes(b)),
  obj: [...objectStores],
  streams: Object.values(streams),
};

export function natsPermissions(identity: NatsIdentity): NatsPermissions {
  const inbox = `${inboxPrefix(identity)}.>`;
  switch (identity) {
    case "gateway":
      return {
        publish: {
          allow: [
            ...generation.requests,
            budgets.lease, budgets.ret, budgets.activate,
            responses.background, responses.cancel, responses.events,
            batches.job,
            ...observations,
            sandboxes.rpc, jobs.queue, jobs.cancel,
            // Apps: calls to app hosts, exchanges, demand for an instance, and the end of a stopped deployment's logs.
            apps.rpc, apps.exchange, apps.demand, apps.logs,
            ...jetStreamAccess(gatewayState),
            // The dashboard's rate-limit page reads budgets (direct gets only: it never writes them).
            `$JS.API.DIRECT.GET.${kvStream(buckets.rateLimits)}.>`,
          ],
          deny: noStreamDeletion,
        },
        subscribe: { allow: [generation.replies, generation.heartbeats, sandboxes.heartbeat, sandboxes.execEvents, apps.heartbeat, apps.reply, apps.logs, inbox] },
        allowResponses: false,
      };
    case "actors":
      return {
        publish: {
          allow: [
            ...generation.requests,
            budgets.lease, budgets.ret, budgets.activate, budgets.probe,
            responses.background, responses.cancel, responses.events,
            batches.job, batches.work,
            ...observations,
            sandboxes.rpc, jobs.queue, jobs.cancel, jobs.logs,
            // The reconciler starts and stops app instances, asks who reconciles, ends a failed deployment's logs.
            apps.rpc, apps.reconcilerProbe, apps.logs,
            ...jetStreamAccess(actorsState),
          ],
          deny: noStreamDeletion,
        },
        subscribe: {
          allow: [
            generation.replies, generation.heartbeats, budgets.lease, budgets.ret, budgets.activate, budgets.probe, responses.cancel,
            sandboxes.heartbeat, sandboxes.execEvents, jobs.cancel, apps.heartbeat, apps.demand, apps.reconcilerProbe, inbox,
          ],
        },
        allowResponses: true,
      };
    case "runner":
      return {
        publish: { allow: [generation.replies, generation.heartbeats] },
        subscribe: { allow: [...generation.requests, inbox] },
        allowResponses: true,
      };
    case "sandbox-host":
      return {
        publish: { allow: [sandboxes.heartbeat, sandboxes.execEvents, apps.heartbeat, apps.reply, apps.logs, apps.rpc, ...jetStreamAccess(sandboxHostState)], deny: noStreamDeletion },
        subscribe: { allow: [sandboxes.rpc, apps.rpc, apps.exchange, inbox] },
        allowResponses: true,
      };
    case "admin":
      // Operators (the `nats` CLI, `tributary start` watching its runners load, tests that
      // inspect state): everything.
      return { publish: { allow: [">"] }, subscribe: { allow: [">"] }, allowResponses: true };
  }
}

/** How one user authenticates in the rendered server configuration. */
export type NatsUserCredential =
  | { identity: NatsIdentity; nkey: string }
  /** `password` is written verbatim: a literal, or `$VARIABLE` for nats-server to read from its environment. */
  | { identity: NatsIdentity; user: string; password: string };

const quote = (s: string) => JSON.stringify(s);
const list = (items: readonly string[]) => `[${items.map(quote).join(", ")}]`;

/** nats-server's `authorization { users: [...] }` block for these users, with their identity's permissions. */
export function natsAuthorizationBlock(users: readonly NatsUserCredential[]): string {
  const lines = ["authorization {", "  users: ["];
  for (const u of users) {
    const p = natsPermissions(u.identity);
    const who = "nkey" in u ? `nkey: ${quote(u.nkey)}` : `user: ${quote(u.user)}, password: ${u.password.startsWith("$") ? u.password : quote(u.password)}`;
    const side = (s: { allow: string[]; deny?: string[] }) => `{ allow: ${list(s.allow)}${s.deny ? `, deny: ${list(s.deny)}` : ""} }`;
    lines.push(`    # ${u.identity}`);
    lines.push(`    { ${who}, permissions: {`);
    lines.push(`      publish: ${side(p.publish)}`);
    lines.push(`      subscribe: ${side(p.subscribe)}`);
    if (p.allowResponses) lines.push(`      allow_responses: true`);
    lines.push(`    } }`);
  }
  lines.push("  ]", "}");
  return lines.join("\n");
}
