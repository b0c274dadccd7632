// Hosted apps: customer ASGI apps deployed from a manifest (tributary.yaml), run by app hosts under
// the sandbox isolation and reached at a per-project address through the gateway.
export {
  checkManifest,
  DNS_LABEL,
  ENTRYPOINT,
  MANIFEST_FILE,
  MAX_ENTRYPOINT_LENGTH,
  MAX_ENV_VALUE_BYTES,
  MAX_ENV_VARS,
  MAX_INSTANCES,
  MAX_MANIFEST_BYTES,
  MAX_TARGET_INFLIGHT,
  DEFAULT_TARGET_INFLIGHT,
  MAX_SECRETS,
  MAX_TIMEOUT_SECONDS,
  MIN_CPU_MHZ,
  MIN_MEMORY_MB,
  parseManifest,
  slugOf,
  type AppHostOffer,
  type AppManifest,
  type AppTimeouts,
  type DeployTarget,
} from "./manifest.js";
export {
  APP_SOCKET,
  AppInstance,
  instanceCommand,
  instanceLimits,
  PLATFORM_SOCKET,
  platformEnv,
  probe,
  type InstanceExit,
  type InstanceHostOptions,
  type InstanceSpec,
  type LogLine,
} from "./instance.js";
export { AppReplica, DEFAULT_REPLICA_POLICY, type ReplicaFailure, type ReplicaPolicy, type ReplicaState, type ReplicaStatus } from "./replica.js";
export { AppHost, type AppHostOptions } from "./app-host.js";
export * as deploymentStates from "./deployment-states.js";
export {
  DEPLOYMENT_ID,
  DEPLOYMENT_STATUSES,
  DeploymentStore,
  INSTANCE_STATUSES,
  RECONCILER_KEY,
  type AppRoute,
  type DeploymentInstance,
  type DeploymentObject,
  type DeploymentStatus,
  type EffectiveTimeouts,
  type InstanceStatus,
  type StoredDeployment,
} from "./deployments.js";
export { AppExchangeClient, type AppExchangeRequest, type ExchangeOutcome, type ResponseSink } from "./exchange-client.js";
export { AppExchangeServer, MAX_FRAME_BYTES, REQUEST_WINDOW, RESPONSE_WINDOW } from "./exchange-host.js";
export { AppConnectionPool, AppHttpRequest, MAX_RESPONSE_HEAD_BYTES, MAX_RESPONSE_HEADERS, type AppResponseHandlers } from "./app-http.js";
export { HOST_INSTANCE_STATES, type AppHostHeartbeat, type AppLogEvent, type HostInstanceState } from "./protocol.js";
export { appRequestHeaders, EDGE_HEADERS, type EdgeFacts } from "./forwarded-headers.js";
export { hostedAddressOf, PATH_ADDRESS_SEGMENT, pathAddressOf, pathUrlOf, PREFIX_HEADER, responseHeadsUnder, type PathAddress } from "./addresses.js";
export { LAUNCHER_PATH, LAUNCHER_SOURCE } from "./launcher-source.js";
export { AppService, type AppServiceOptions, type HostedTarget, type PresentedDeployment } from "./service.js";
export { AppHostDirectory, type HostView, type ServingInstance } from "./host-directory.js";
export { AppBalancer, IDEMPOTENT_METHODS, type AppBalancerOptions } from "./balancer.js";
export * as reconcile from "./reconcile.js";
export { DeploymentReconciler, type ReconcilerOptions } from "./reconciler.js";
