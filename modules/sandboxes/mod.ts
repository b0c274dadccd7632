// Sandboxes: isolated code execution on sandbox hosts. The host side (SandboxHost: bubblewrap,
// cgroups, the in-sandbox agent), the gateway side (SandboxService: records, placement, calls
// routed to a sandbox's host) and the actor host's sweeper share the records and the protocol.
export { SandboxHostClient, SandboxHostDirectory } from "./client.js";
export { SandboxHost, SANDBOX_PIDS, WORK_DIR_PREFIX, type SandboxHostOptions } from "./host.js";
export { detectCgroups, inCgroup, probeIsolation, SandboxCgroup, walledCommand, type CgroupMode, type IsolationOptions, type SandboxLimits, type WalledProgram } from "./isolation.js";
export type { DirEntry, ExecEvent } from "./protocol.js";
export { SANDBOX_ID, SandboxStore, type SandboxObject } from "./records.js";
export * as sandboxStates from "./sandbox-states.js";
export { SANDBOX_STATUSES, type SandboxStatus } from "./sandbox-states.js";
export {
  MAX_PATH_LENGTH,
  parseEmpty,
  parseExec,
  parseSandboxCreate,
  parseSecretCreate,
  parseSecretRotate,
  parseTimeoutUpdate,
  workspacePath,
  type ExecRequest,
  type SandboxBounds,
  type SandboxCreateRequest,
  type SandboxNetwork,
} from "./requests.js";
export { probeEgress } from "./sandbox-process.js";
export { DEFAULT_EGRESS_DENY, egressUnavailable, hostAddressCidrs, parseCidrList, type EgressOptions } from "./egress.js";
export { SandboxService, type ExecResult, type ExecStream, type ShellSession } from "./service.js";
export { SandboxSweeper } from "./sweeper.js";
