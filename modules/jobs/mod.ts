// Jobs: a command run to completion in a fresh sandbox, durably (records in KV, a JetStream work
// queue, output in a log stream), by the actor hosts' job workers.
export { JobControl, JobRunner, type JobOutcome } from "./job-runner.js";
export * as jobStates from "./job-states.js";
export { JOB_ID, JOB_STATUSES, jobLogChunk, jobMessage, JobStore, type JobLogChunk, type JobMessage, type JobObject, type JobStatus } from "./job-store.js";
export { MAX_JOB_RETRIES, parseJobCreate, type JobCreateRequest } from "./requests.js";
