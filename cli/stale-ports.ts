import { portHolder, portInUse } from "../lib/process/ports.js";

// Before `tributary start` starts anything: every port the stack will listen on must be free. A
// port held by a process of an earlier stack (one that outlived its supervisor, or another stack
// on the same ports) is named with its holder, instead of a child failing and restarting forever
// (or, for the gateway, quietly sharing the port through SO_REUSEPORT).

export interface StackPort {
  host: string;
  port: number;
  /** The setting that moves it (TRIBUTARY_PORT, ...). */
  setting: string;
}

/** `host:port` or `[v6]:port` as the settings write addresses; undefined without a port. */
export function stackPortOf(address: string, setting: string): StackPort | undefined {
  const m = /^\[?(.*?)\]?:(\d{1,5})$/.exec(address);
  return m ? { host: m[1]!, port: Number(m[2]), setting } : undefined;
}

/** Processes of a Tributary stack, by their command lines. */
const OURS = /\/dist\/(gateway|runners|actors|sandbox-host)\/main\.js|\/dist\/cli\/main\.js|nats-server .*nats-server\.conf/;

/** Why the stack cannot start on `ports` (the first one taken, and who holds it), or undefined. */
export async function takenPort(ports: readonly StackPort[]): Promise<string | undefined> {
  for (const { host, port, setting } of ports) {
    if (port === 0 || !(await portInUse(host, port))) continue;
    const holder = portHolder(port);
    if (!holder) return `port ${port} (${setting}) is taken by another process: stop it, or set ${setting}`;
    const who = `pid ${holder.pid} (${holder.command.slice(0, 200)})`;
    return OURS.test(holder.command)
      ? `port ${port} (${setting}) is held by ${who}, a process of an earlier Tributary stack still running: stop it (kill ${holder.pid}), or set ${setting}`
      : `port ${port} (${setting}) is taken by ${who}: stop it, or set ${setting}`;
  }
  return undefined;
}
