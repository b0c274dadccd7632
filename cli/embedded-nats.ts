import { mkdirSync, writeFileSync } from "node:fs";
import { connect as tcpConnect } from "node:net";
import { join } from "node:path";
import { Duration, Effect } from "effect";
import type { Logger } from "../lib/log.js";
import { onCpus } from "../lib/process/cpu-affinity.js";
import { spawnScoped } from "./child-process.js";

export interface EmbeddedNatsOptions {
  home: string;
  port: number;
  log: Logger;
  /** CPUs to run on (the services' share when runners are pinned). */
  cpus?: readonly number[];
}

/**
 * nats-server's configuration for one machine: JetStream with its store in `storeDir`, loopback
 * only, and a payload limit that fits the gateway's largest request body. Port -1 picks a free one.
 */
export function natsServerConfig(port: number, storeDir: string): string {
  return [
    `server_name: tributary-local`,
    `listen: 127.0.0.1:${port}`,
    `max_payload: 8MB`,
    `jetstream {`,
    `  store_dir: ${JSON.stringify(storeDir)}`,
    `}`,
    "",
  ].join("\n");
}

function writeConfig(home: string, port: number): string {
  const dir = join(home, "nats");
  mkdirSync(join(dir, "jetstream"), { recursive: true });
  const path = join(dir, "nats-server.conf");
  writeFileSync(path, natsServerConfig(port, join(dir, "jetstream")));
  return path;
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: "127.0.0.1", port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on("error", () => resolve(false));
  });
}

/** Starts nats-server as a scoped child and waits until it accepts connections. */
export function embeddedNats(options: EmbeddedNatsOptions) {
  return Effect.gen(function* () {
    if (yield* Effect.promise(() => portOpen(options.port)))
      return yield* Effect.fail(new Error(`port ${options.port} is taken: set TRIBUTARY_NATS_PORT, or NATS_URL to use the server there`));
    const config = writeConfig(options.home, options.port);
    yield* spawnScoped({ name: "nats-server", ...onCpus("nats-server", ["-c", config], options.cpus), env: process.env, stopTimeoutMs: 10_000 }, options.log);
    const ready = yield* Effect.promise(async () => {
      for (let i = 0; i < 100; i++) {
        if (await portOpen(options.port)) return true;
        await new Promise((r) => setTimeout(r, 100));
      }
      return false;
    }).pipe(Effect.timeoutOption(Duration.seconds(15)));
    if (ready._tag === "None" || !ready.value) return yield* Effect.fail(new Error("nats-server did not start (see its output above)"));
    options.log.info("nats-server ready", { url: `nats://127.0.0.1:${options.port}`, store: join(options.home, "nats", "jetstream") });
    return `nats://127.0.0.1:${options.port}`;
  });
}
