import t from "tap";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Bucket } from "@nats-io/kv";
import { compareVersions, connectedServerVersion, SUBJECT_PURGE_FIXED_IN, subjectPurgeSparesOtherConsumers, versionAtLeast } from "../../lib/nats/server-version.js";
import { removeKey } from "../../lib/nats/kv-records.js";

// The version comparison that decides whether single-key removals may purge (lib/nats/server-version.ts):
// semver precedence, not text order, and the safe answer for versions it cannot read; and that
// removeKey takes the version from the connection a bucket was opened on (no server here: a
// connection that only holds its INFO, a bucket whose purge and delete are recorded).

t.test("versions compare by semver precedence, not as text", async (t) => {
  const ascending = ["1.99.99", "2.9.9", "2.9.10", "2.9.11", "2.9.12-beta.2", "2.9.12-beta.11", "2.9.12-rc", "2.9.12", "2.9.13", "2.10.0-RC.1", "2.10.0-RC.2", "2.10.0", "2.10.22", "2.11.0", "10.0.0"];
  for (let i = 0; i < ascending.length; i++)
    for (let j = 0; j < ascending.length; j++) {
      const expected = Math.sign(i - j);
      t.equal(compareVersions(ascending[i]!, ascending[j]!), expected, `${ascending[i]} vs ${ascending[j]}`);
    }
  t.equal(compareVersions("v2.9.12", "2.9.12"), 0, "a leading v");
  t.equal(compareVersions("2.9.12+build.7", "2.9.12"), 0, "build metadata does not count");
  t.equal(compareVersions("2.9.12-1", "2.9.12-alpha"), -1, "numeric pre-release identifiers come before words");
  t.equal(compareVersions("2.9.12-alpha", "2.9.12-alpha.1"), -1, "fewer pre-release identifiers come first");
});

t.test("what is not a semver version compares as nothing", async (t) => {
  for (const odd of ["", "2.9", "2.9.x", "2.09.12", "2.9.12.1", "latest", "2.9.12-", "2.9.12-beta..1"]) t.equal(compareVersions(odd, "2.9.12"), undefined, JSON.stringify(odd));
});

t.test("a server has the purge fix from 2.9.12 on; unknown versions do not", async (t) => {
  t.equal(SUBJECT_PURGE_FIXED_IN, "2.9.12");
  for (const fixed of ["2.9.12", "2.9.25", "2.10.0", "2.10.0-RC.1", "2.11.4", "3.0.0"]) t.ok(versionAtLeast(fixed, SUBJECT_PURGE_FIXED_IN), fixed);
  for (const unfixed of ["2.9.10", "2.9.11", "2.9.9", "2.9.12-beta.1", "2.2.0", "1.4.1"]) t.notOk(versionAtLeast(unfixed, SUBJECT_PURGE_FIXED_IN), unfixed);
  t.notOk(versionAtLeast(undefined, SUBJECT_PURGE_FIXED_IN), "no version (no INFO yet)");
  t.notOk(versionAtLeast("unknown", SUBJECT_PURGE_FIXED_IN), "a version that does not parse");
});

/** A JetStream client on a connection whose server sent `version` in its INFO (nothing is sent over it). */
const clientOn = (version: string | undefined) => jetstream({ info: version === undefined ? undefined : { version }, options: {} } as unknown as NatsConnection);

t.test("the version is the one of the server the client's connection is on", async (t) => {
  t.equal(connectedServerVersion(clientOn("2.9.10")), "2.9.10");
  t.equal(connectedServerVersion(clientOn(undefined)), undefined, "no INFO yet");
  t.notOk(subjectPurgeSparesOtherConsumers(clientOn("2.9.10")), "Debian 12's package");
  t.ok(subjectPurgeSparesOtherConsumers(clientOn("2.10.29")), "the Kubernetes manifests' 2.10");
  t.notOk(subjectPurgeSparesOtherConsumers(clientOn(undefined)), "unknown: the safe way");
});

t.test("removeKey purges where the server has the fix, and deletes elsewhere", async (t) => {
  for (const [version, expected] of [["2.9.10", "delete"], ["2.9.11", "delete"], ["2.9.12", "purge"], ["2.10.0", "purge"], [undefined, "delete"]] as const) {
    const kv = new Bucket("files", clientOn(version), undefined as never);
    const calls: string[] = [];
    kv.purge = async (key) => void calls.push(`purge ${key}`);
    kv.delete = async (key) => void calls.push(`delete ${key}`);
    await removeKey(kv, "p.file-1");
    t.same(calls, [`${expected} p.file-1`], `server ${version ?? "unknown"}`);
  }
});
