import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { inCgroup } from "./isolation.js";

// Opt-in outbound network for a sandbox (`network: "egress"`): slirp4netns, a user-mode TCP/IP
// stack, is attached to the sandbox's own network namespace (bwrap made it; it holds only `lo`
// otherwise). The sandbox sees a tap device with 10.0.2.100/24, gateway 10.0.2.2 and DNS
// 10.0.2.3; slirp4netns turns its packets into ordinary sockets of its own on the host, so the
// sandbox reaches only what a host process could, minus:
//  - the host's loopback (NATS, the gateway's internals, metrics): --disable-host-loopback makes
//    10.0.2.2 unreachable, and 127.0.0.1 inside is the sandbox's own loopback;
//  - a deny list of CIDRs (cluster and private ranges, the host's own addresses): "unreachable"
//    routes in the sandbox's namespace, set from the host before slirp4netns attaches, so no
//    packet to them ever reaches the stack. The sandbox's processes have no capability in that
//    namespace's user namespace (bwrap drops them; no-new-privs; nested user namespaces are
//    disabled), so they cannot change the routes.
// IPv4 only: slirp4netns runs without --enable-ipv6, the sandbox has no IPv6 route at all.

/** Ranges a sandbox never reaches by default: private, shared, link-local (cloud metadata), loopback, multicast, reserved. */
export const DEFAULT_EGRESS_DENY = [
  "0.0.0.0/8",
  "10.0.0.0/8",
  "100.64.0.0/10",
  "127.0.0.0/8",
  "169.254.0.0/16",
  "172.16.0.0/12",
  "192.0.0.0/24",
  "192.168.0.0/16",
  "198.18.0.0/15",
  "224.0.0.0/4",
  "240.0.0.0/4",
];

/** The sandbox's side of slirp4netns's virtual network (its defaults): address .100, gateway .2, DNS .3. */
export const EGRESS_DNS = "10.0.2.3";
const SLIRP_CIDR = "10.0.2.0/24";
/** How long a sandbox's network may take to come up before the sandbox fails. */
export const EGRESS_READY_TIMEOUT_MS = 5_000;

export interface EgressOptions {
  slirp4netns: string;
  python: string;
  /** IPv4 CIDRs made unreachable inside every egress sandbox. */
  deny: string[];
}

const IPV4_CIDR = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/;

/** Parses a comma- or space-separated list of IPv4 CIDRs (a bare address is a /32); throws naming the bad entry. */
export function parseCidrList(list: string): string[] {
  const out: string[] = [];
  for (const raw of list.split(/[\s,]+/).filter(Boolean)) {
    const entry = raw.includes("/") ? raw : `${raw}/32`;
    const m = IPV4_CIDR.exec(entry);
    if (!m || m.slice(1, 5).some((o) => Number(o) > 255) || Number(m[5]) > 32) throw new Error(`not an IPv4 CIDR: ${raw.slice(0, 64)}`);
    // The network's own address (10.1.2.3/8 is 10.0.0.0/8): the kernel refuses a route with host bits set.
    const bits = Number(m[5]);
    const value = m.slice(1, 5).reduce((n, o) => n * 256 + Number(o), 0);
    const size = 2 ** (32 - bits);
    const base = Math.floor(value / size) * size;
    out.push(`${[24, 16, 8, 0].map((s) => Math.floor(base / 2 ** s) % 256).join(".")}/${bits}`);
  }
  return out;
}

/** This machine's own IPv4 addresses as /32s (what a sandbox would reach the host's services on). */
export function hostAddressCidrs(): string[] {
  const out = new Set<string>();
  for (const addrs of Object.values(networkInterfaces()))
    for (const a of addrs ?? []) if (a.family === "IPv4" && !a.internal) out.add(`${a.address}/32`);
  return [...out];
}

/** Why egress cannot work on this machine, or undefined when it can. */
export function egressUnavailable(options: EgressOptions): string | undefined {
  if (process.getuid?.() !== 0) return "the sandbox host does not run as root (slirp4netns joins each sandbox's network namespace from the host)";
  if (!existsSync("/dev/net/tun")) return "/dev/net/tun is missing (slirp4netns needs a tap device)";
  const version = spawnSync(options.slirp4netns, ["--version"], { encoding: "utf8", timeout: 5_000 });
  if (version.error || version.status !== 0) return `cannot run ${options.slirp4netns} (install slirp4netns)`;
  return undefined;
}

/**
 * Run as root with the sandbox's pid: joins the sandbox's network namespace in a child and adds an
 * "unreachable" route per denied CIDR over rtnetlink, then (only if every route is in) execs
 * slirp4netns on that namespace (through the fd it holds, so a recycled pid cannot redirect it).
 */
const SETUP_SOURCE = String.raw`
import ctypes, os, socket, struct, sys
args = sys.argv[1:]
sep = args.index("--")
pid, cidrs, slirp = args[0], args[1:sep], args[sep + 1:]
net = os.open("/proc/%d/ns/net" % int(pid), os.O_RDONLY)
child = os.fork()
if child == 0:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(net, 0x40000000) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
        nl.bind((0, 0))
        for seq, cidr in enumerate(cidrs, 1):
            addr, plen = cidr.split("/")
            # rtmsg: AF_INET, dst_len, src_len, tos, table main, proto boot, scope universe, type RTN_UNREACHABLE, flags
            body = struct.pack("=BBBBBBBBI", socket.AF_INET, int(plen), 0, 0, 254, 3, 0, 7, 0) + struct.pack("=HH", 8, 1) + socket.inet_aton(addr)
            # RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE
            nl.send(struct.pack("=IHHII", 16 + len(body), 24, 0x1 | 0x4 | 0x200 | 0x400, seq, 0) + body)
            reply = nl.recv(65536)
            err = struct.unpack_from("=i", reply, 16)[0]
            if err != 0 and -err != 17:
                raise OSError(-err, "route " + cidr)
        os._exit(0)
    except BaseException as e:
        sys.stderr.write("egress setup: %s\n" % e)
        os._exit(1)
_, status = os.waitpid(child, 0)
if status != 0:
    sys.exit(3)
os.set_inheritable(net, True)
os.execvp(slirp[0], [a.replace("{netns}", "/proc/self/fd/%d" % net) for a in slirp])
`;

/**
 * One sandbox's network stack: the setup helper, then slirp4netns in its place. It joins the
 * sandbox's cgroup (its CPU and memory count as the sandbox's), keeps only the capabilities it
 * needs to attach (CAP_SYS_ADMIN to join the namespace, CAP_NET_ADMIN to make the tap, CAP_SETPCAP
 * to drop its bounding set; slirp4netns keeps CAP_NET_BIND_SERVICE as root and refuses to start
 * without it), and drops
 * even those once attached (--enable-sandbox: an empty root of its own; --enable-seccomp).
 * It exits when the host does (its stdin is the host's pipe: --exit-fd).
 */
export class EgressStack {
  private readonly child: ChildProcess;
  readonly ready: Promise<void>;
  private stderr = "";

  constructor(options: EgressOptions, sandboxPid: number, cgroupProcs: readonly string[]) {
    const slirp = [
      "setpriv", "--bounding-set=-all,+sys_admin,+net_admin,+setpcap,+net_bind_service", "--inh-caps=-all", "--",
      options.slirp4netns,
      "--configure",
      "--mtu=65520",
      `--cidr=${SLIRP_CIDR}`,
      "--disable-host-loopback",
      "--enable-sandbox",
      "--enable-seccomp",
      "--exit-fd=0",
      "--ready-fd=3",
      "--netns-type=path",
      "{netns}",
      "tap0",
    ];
    const argv = inCgroup(cgroupProcs, [options.python, "-I", "-S", "-c", SETUP_SOURCE, String(sandboxPid), ...options.deny, "--", ...slirp]);
    this.child = spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "ignore", "pipe", "pipe"], env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" } });
    this.child.stdin!.on("error", () => {});
    this.child.stderr!.on("data", (d: Buffer) => {
      if (this.stderr.length < 2_000) this.stderr += d.toString("utf8");
    });
    const readyPipe = this.child.stdio[3] as NodeJS.ReadableStream;
    this.ready = new Promise((resolve, reject) => {
      readyPipe.once("data", () => resolve());
      this.child.once("exit", (code, signal) => reject(new Error(`the sandbox's network stack ended (${signal ?? code}): ${this.errorText()}`)));
      this.child.once("error", (err) => reject(err));
    });
    this.ready.catch(() => {});
  }

  /** What the stack said on stderr (its own warnings filtered), for the host's log. */
  errorText(): string {
    return this.stderr
      .split("\n")
      .filter((l) => l && !l.startsWith("WARNING: Support for seccomp is experimental"))
      .join("; ")
      .slice(0, 400);
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  kill(): void {
    if (this.alive) this.child.kill("SIGKILL");
  }
}

/** Reads bwrap's --info-fd JSON from `pipe` until it closes: the sandbox's pid on the host. */
export function readChildPid(pipe: NodeJS.ReadableStream): Promise<number> {
  return new Promise((resolve, reject) => {
    let text = "";
    let found = false;
    pipe.on("data", (d: Buffer) => {
      // bwrap writes a few hundred bytes, in several writes: the pipe is read to its end (closing it
      // early would kill bwrap with SIGPIPE), keeping only what the pid needs.
      if (found || text.length > 16_384) return;
      text += d.toString("utf8");
      const m = /"child-pid"\s*:\s*(\d+)\s*[,}]/.exec(text);
      if (m) {
        found = true;
        resolve(Number(m[1]));
      }
    });
    pipe.once("end", () => reject(new Error("bwrap reported no sandbox pid")));
    pipe.once("error", reject);
  });
}
