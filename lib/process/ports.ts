import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { connect } from "node:net";

// Who holds a TCP port on this machine. A process left over from an earlier run keeps listening
// where a new one wants to: uWebSockets.js listens with SO_REUSEPORT, so a new gateway would even
// share the port with the stale one (the kernel spreading connections over both) instead of
// failing. Checking before starting, and naming the holder, turns that into a clear refusal.

/** Whether something accepts TCP connections at host:port (a wildcard host is asked on loopback). */
export function portInUse(host: string, port: number): Promise<boolean> {
  const target = host === "0.0.0.0" || host === "" ? "127.0.0.1" : host === "::" ? "::1" : host;
  return new Promise((resolve) => {
    const socket = connect({ host: target, port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on("error", () => resolve(false));
  });
}

export interface PortHolder {
  pid: number;
  /** Its command line, arguments separated by spaces. */
  command: string;
}

/**
 * The process listening on TCP `port` (any address), from /proc: the listening sockets' inodes in
 * /proc/net/tcp and tcp6, then the process whose descriptors include one. Undefined when none is
 * found, or it cannot be seen (another user's process, no /proc).
 */
export function portHolder(port: number): PortHolder | undefined {
  const inodes = new Set<string>();
  const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      // sl local_address rem_address st ... inode (st 0A: listening)
      const fields = line.trim().split(/\s+/);
      if (fields.length > 9 && fields[1]!.endsWith(`:${hexPort}`) && fields[3] === "0A") inodes.add(fields[9]!);
    }
  }
  if (inodes.size === 0) return undefined;
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((name) => /^\d+$/.test(name));
  } catch {
    return undefined;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let link: string;
      try {
        link = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
      if (inode !== undefined && inodes.has(inode)) return { pid: Number(pid), command: commandLine(Number(pid)) };
    }
  }
  return undefined;
}

function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
  } catch {
    return "?";
  }
}
