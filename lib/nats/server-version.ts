import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import { BaseApiClientImpl } from "@nats-io/jetstream/internal";

// What the connected nats-server can be relied on for, by its version (the INFO it sent on
// connect). `tributary start` on Debian 12 runs its package, nats-server 2.9.10; the Kubernetes
// manifests run 2.10.

/** A version as semver orders them: numbers, then the pre-release identifiers (build metadata is ignored). */
interface Version {
  numbers: [number, number, number];
  /** Empty for a release; a pre-release ("2.10.0-RC.1") sorts before its release. */
  preRelease: string[];
}

const SEMVER = /^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$/;

function parseVersion(text: string): Version | undefined {
  const m = SEMVER.exec(text.trim());
  if (!m) return undefined;
  return { numbers: [Number(m[1]), Number(m[2]), Number(m[3])], preRelease: m[4]?.split(".") ?? [] };
}

/** Semver precedence of two pre-release identifiers: numbers numerically and before words, words in ASCII order. */
function compareIdentifiers(a: string, b: string): number {
  const aNumeric = /^\d+$/.test(a);
  const bNumeric = /^\d+$/.test(b);
  if (aNumeric && bNumeric) return Math.sign(Number(a) - Number(b));
  if (aNumeric !== bNumeric) return aNumeric ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * -1, 0 or 1 as version `a` comes before, level with or after `b` in semver precedence
 * ("2.9.9" < "2.9.10" < "2.10.0-RC.1" < "2.10.0"); undefined when either is not a semver version.
 */
export function compareVersions(a: string, b: string): -1 | 0 | 1 | undefined {
  const va = parseVersion(a);
  const vb = parseVersion(b);
  if (!va || !vb) return undefined;
  for (let i = 0; i < 3; i++) if (va.numbers[i] !== vb.numbers[i]) return va.numbers[i]! < vb.numbers[i]! ? -1 : 1;
  // A release comes after its pre-releases.
  if (va.preRelease.length === 0 || vb.preRelease.length === 0) return va.preRelease.length === vb.preRelease.length ? 0 : va.preRelease.length === 0 ? 1 : -1;
  for (let i = 0; i < Math.min(va.preRelease.length, vb.preRelease.length); i++) {
    const order = compareIdentifiers(va.preRelease[i]!, vb.preRelease[i]!);
    if (order !== 0) return order as -1 | 1;
  }
  return va.preRelease.length === vb.preRelease.length ? 0 : va.preRelease.length < vb.preRelease.length ? -1 : 1;
}

/** Whether `version` is `minimum` or later; false when it is unknown or not a semver version. */
export function versionAtLeast(version: string | undefined, minimum: string): boolean {
  if (version === undefined) return false;
  const order = compareVersions(version, minimum);
  return order !== undefined && order >= 0;
}

/**
 * The first nats-server release whose subject purge moves only the consumers that read nothing but
 * the purged subject (nats-io/nats-server#3838, "Fix current consumers not getting messages after
 * purge", merged 2023-02-02 and tagged in v2.9.12). Before it, a purge of one subject, a KV purge
 * or an Object Store write included (both roll up their subject), moved every consumer whose filter
 * covers that subject to the purge's own message: past the messages of other subjects it had not
 * delivered yet, which a listing or a watcher running meanwhile then never saw.
 */
export const SUBJECT_PURGE_FIXED_IN = "2.9.12";

/**
 * Whether a subject purge on the server that `client` is connected to leaves the consumers of other
 * subjects where they are (see SUBJECT_PURGE_FIXED_IN). False when the version is unknown: the
 * callers then take the way that is safe on any server. Asked at each use, so a reconnect to
 * another server counts; the connected server stands for its cluster (a cluster mid-upgrade from
 * before 2.9.12 may still purge on an older stream leader).
 */
export function subjectPurgeSparesOtherConsumers(client: JetStreamClient | JetStreamManager): boolean {
  return versionAtLeast(connectedServerVersion(client), SUBJECT_PURGE_FIXED_IN);
}

/** The version of the server `client`'s connection is on now; undefined before its INFO, or for a client of another make. */
export function connectedServerVersion(client: JetStreamClient | JetStreamManager): string | undefined {
  return client instanceof BaseApiClientImpl ? client.getConnection().info?.version : undefined;
}
