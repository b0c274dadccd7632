import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as Duration from "effect/Duration";
import * as Effect from "effect/Effect";
import type { Logger } from "../lib/log.js";
import { onCpus } from "../lib/process/cpu-affinity.js";
import { withParentDeathSignal } from "../lib/process/death-signal.js";
import { portInUse } from "../lib/process/ports.js";
import { ensureNkeyIdentities, nkeyUsers } from "../lib/nats/identities.js";
import { natsAuthorizationBlock, type NatsIdentity } from "../lib/nats/permissions.js";
import { spawnScoped } from "./child-process.js";

export interface EmbeddedNatsOptions {
  home: string;
  port: number;
  log: Logger;
  /** CPUs to run on (the services' share when runners are pinned). */
  cpus?: readonly number[];
  /** The `authorization` block of its identities (embeddedIdentities). */
  authorization: string;
}

export interface NatsServerConfigOptions {
  /** The `authorization` block (natsAuthorizationBlock); none means an open server (tests of refusal only). */
  authorization?: string;
  serverName?: string;
  /** The address it listens on for clients and routes (default loopback: one machine). */
  host?: string;
  /**
   * A JetStream cluster: this node's route port and its peers' route URLs; `advertise`: the
   * host:port its peers are told to reach its routes at (when they reach it through a proxy).
   */
  cluster?: { name: string; port: number; routes: string[]; advertise?: string };
  /** How often it pings clients and routes, and after how many unanswered pings it drops them (nats-server's defaults: 2 min, 2). */
  ping?: { intervalSeconds: number; maxOutstanding: number };
  /** Lame-duck mode (`--signal ldm`): how long clients are given to move, after a grace period (nats-server's defaults: 2 min, 10 s). */
  lameDuck?: { durationSeconds: number; graceSeconds: number };
}

/**
 * nats-server's configuration for one machine: JetStream with its store in `storeDir`, loopback
 * only, and a payload limit that fits the gateway's largest request body. Port -1 picks a free one.
 */
export function natsServerConfig(port: number, storeDir: string, options: NatsServerConfigOptions = {}): string {
  const host = options.host ?? "127.0.0.1";
  const lines = [
    `server_name: ${options.serverName ?? "tributary-local"}`,
    `listen: ${host}:${port}`,
    `max_payload: 8MB`,
    `jetstream {`,
    `  store_dir: ${JSON.stringify(storeDir)}`,
    `}`,
  ];
  if (options.cluster)
    lines.push(
      `cluster {`,
      `  name: ${options.cluster.name}`,
      `  listen: ${host}:${options.cluster.port}`,
      `  routes: [${options.cluster.routes.map((r) => JSON.stringify(r)).join(", ")}]`,
      ...(options.cluster.advertise ? [`  advertise: ${JSON.stringify(options.cluster.advertise)}`] : []),
      `}`,
    );
  if (options.ping) lines.push(`ping_interval: "${options.ping.intervalSeconds}s"`, `ping_max: ${options.ping.maxOutstanding}`);
  if (options.lameDuck) lines.push(`lame_duck_duration: ${options.lameDuck.durationSeconds}s`, `lame_duck_grace_period: ${options.lameDuck.graceSeconds}s`);
  if (options.authorization) lines.push(options.authorization);
  return lines.join("\n") + "\n";
}

/**
 * The embedded server's identities: one nkey per kind of process in $TRIBUTARY_HOME/nats/identities
 * (made on first start, kept after), and the environment that hands each process its own.
 */
export function embeddedIdentities(home: string) {
  const identities = ensureNkeyIdentities(join(home, "nats", "identities"));
  return {
    authorization: natsAuthorizationBlock(nkeyUsers(identities.values())),
    env: (identity: NatsIdentity): Record<string, string> => ({ TRIBUTARY_NATS_NKEY_FILE: identities.get(identity)!.seedFile }),
  };
}

function writeConfig(home: string, port: number, authorization: string): string {
  const dir = join(home, "nats");
  mkdirSync(join(dir, "jetstream"), { recursive: true });
  const path = join(dir, "nats-server.conf");
  writeFileSync(path, natsServerConfig(port, join(dir, "jetstream"), { authorization }), { mode: 0o600 });
  return path;
}

const portOpen = (port: number) => portInUse("127.0.0.1", port);

/** nats-server's log: $TRIBUTARY_HOME/logs/nats-server.log (the directory 0700, the file 0600). */
export function natsLogFile(home: string): string {
  const dir = join(home, "logs");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  return join(dir, "nats-server.log");
}

/** nats-server's marker of an error line, and of a fatal one (it exits after). */
const natsError = /\[(ERR|FTL)\] (.*)$/;
const TAIL_LINES = 10;

/**
 * Starts nats-server as a scoped child and waits until it accepts connections. Its output goes to
 * its log file; its error lines are logged here too, and a start that fails says why from the
 * file's last lines.
 */
export function embeddedNats(options: EmbeddedNatsOptions) {
  return Effect.gen(function* () {
    if (yield* Effect.promise(() => portOpen(options.port)))
      return yield* Effect.fail(new Error(`port ${options.port} is taken: set TRIBUTARY_NATS_PORT, or NATS_URL to use the server there`));
    const config = writeConfig(options.home, options.port, options.authorization);
    const logFile = natsLogFile(options.home);
    const tail: string[] = [];
    const onLine = (line: string) => {
      tail.push(line);
      if (tail.length > TAIL_LINES) tail.shift();
      const error = natsError.exec(line);
      if (error?.[1] === "FTL") options.log.error(`nats-server: ${error[2]}`, { log: logFile });
      else if (error) options.log.warn(`nats-server: ${error[2]}`, { log: logFile });
    };
    // Ends with the supervisor even when it is killed (a Node child watches its stdin instead).
    const { bound, ...line } = withParentDeathSignal(onCpus("nats-server", ["-c", config], options.cpus));
    if (!bound) options.log.warn("nats-server would outlive a killed supervisor: setpriv (util-linux) with --pdeathsig is not installed");
    const server = yield* spawnScoped({ name: "nats-server", ...line, env: process.env, stopTimeoutMs: 10_000, logFile, onLine }, options.log);
    const ready = yield* Effect.promise(async () => {
      for (let i = 0; i < 100 && server.exitCode === null && server.signalCode === null; i++) {
        if (await portOpen(options.port)) return true;
        await new Promise((r) => setTimeout(r, 100));
      }
      return false;
    }).pipe(Effect.timeoutOption(Duration.seconds(15)));
    if (ready._tag === "None" || !ready.value) {
      const lines = tail.length > 0 ? `; its last lines:\n${tail.map((l) => "  " + l).join("\n")}` : " (it wrote nothing)";
      return yield* Effect.fail(new Error(`nats-server did not start: see ${logFile}${lines}`));
    }
    options.log.info("nats-server ready", { url: `nats://127.0.0.1:${options.port}`, serverPid: server.pid, store: join(options.home, "nats", "jetstream"), log: logFile });
    return `nats://127.0.0.1:${options.port}`;
  });
}
