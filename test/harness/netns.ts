import { execFileSync, spawnSync } from "node:child_process";
import { closeSync, openSync, rmSync } from "node:fs";

// Hosts on one machine as network namespaces, for faults of the network between processes
// (test/harness/netns-cluster.ts). A switch namespace holds a Linux bridge; each host is a
// namespace with one veth into it (`eth0`, an address in a private /24). The test process joins
// the bridge too (an "observer" port), so it can reach every host, and a host may get a "front"
// link: a point-to-point veth to the root namespace that a cut of its bridge port leaves alone
// (a gateway cut from the cluster keeps its clients).
//
// A cut detaches the host's port from the bridge (`ip link set <port> nomaster`): its frames go
// nowhere, while both ends keep their carrier, so peers see silence (TCP retransmits, then the
// applications' own timeouts), not a reset or "network unreachable". Healing reattaches it, and
// the same TCP connections carry on. (This kernel has no netem, tc filters or netfilter.)
//
// The harness holds each namespace open (a file descriptor of its /run/netns file) and reaches it
// through /proc/<pid>/fd/<fd> once made (nsenter --net=...): in one run the /run/netns mounts
// vanished mid-run (unmounted from outside the harness), which destroyed the switch namespace,
// with it every veth, and left `ip netns exec <name>` failing with "Invalid argument".
//
// Everything is named with a prefix unique to the run (`trib-<pid>-`) and removed by destroy(),
// on process exit (including the harness's SIGINT/SIGTERM exit) and, for a run that was
// SIGKILLed, by the next run (namespaces whose pid is gone).

const ip = (...args: string[]) => execFileSync("ip", args, { stdio: ["ignore", "pipe", "pipe"] }).toString();

/** A namespace made by name and held by a descriptor of this process. */
class HeldNamespace {
  readonly fd: number;
  constructor(readonly name: string) {
    ip("netns", "add", name);
    this.fd = openSync(`/run/netns/${name}`, "r");
  }
  /** The path that reaches it while this process lives, whatever becomes of /run/netns. */
  get path(): string {
    return `/proc/${process.pid}/fd/${this.fd}`;
  }
  /** The command prefix that runs a command inside it (nsenter execs: the pid stays the command's). */
  get exec(): string[] {
    return ["nsenter", `--net=${this.path}`, "--"];
  }
  ip(...args: string[]): string {
    return execFileSync("nsenter", [`--net=${this.path}`, "--", "ip", ...args], { stdio: ["ignore", "pipe", "pipe"] }).toString();
  }
  release(): void {
    closeSync(this.fd);
    spawnSync("ip", ["netns", "del", this.name], { stdio: "ignore" });
    rmSync(`/run/netns/${this.name}`, { force: true });
  }
}

export interface NetnsHost {
  name: string;
  /** The namespace's name. */
  ns: string;
  /** Its address on the switch. */
  address: string;
  /** The command prefix that runs a process inside it (nsenter: it execs, so the pid is the process's own). */
  exec: string[];
  /** Its bridge port (in the switch namespace). */
  port: string;
}

export interface FrontLink {
  /** The host's end (listen here). */
  hostAddress: string;
  /** The root namespace's end. */
  rootAddress: string;
}

/** Why namespaces cannot be made here (not root, no `ip netns`), or undefined when they can. */
export function netnsUnavailable(): string | undefined {
  if (process.platform !== "linux") return `network namespaces need Linux (this is ${process.platform})`;
  if (process.getuid?.() !== 0) return "network namespaces need root (ip netns add)";
  const probe = spawnSync("ip", ["netns", "list"], { stdio: "pipe" });
  if (probe.error || probe.status !== 0) return `\`ip netns\` is not available: ${String(probe.error ?? probe.stderr)}`.trim();
  const name = `trib-probe-${process.pid}`;
  const add = spawnSync("ip", ["netns", "add", name], { stdio: "pipe" });
  spawnSync("ip", ["netns", "del", name], { stdio: "pipe" });
  if (add.status !== 0) return `\`ip netns add\` fails here: ${add.stderr.toString().trim()}`;
  return undefined;
}

/** Namespaces of earlier runs whose process is gone (a SIGKILLed run cleans nothing up). */
function removeStaleNamespaces(): void {
  for (const line of ip("netns", "list").split("\n")) {
    const m = /^(trib-(\d+)-\S+)/.exec(line);
    if (!m) continue;
    let alive = true;
    try {
      process.kill(Number(m[2]), 0);
    } catch {
      alive = false;
    }
    if (!alive) spawnSync("ip", ["netns", "del", m[1]!], { stdio: "ignore" });
  }
}

/** Two /24s (10.a.b.0 and 10.a.b+1.0) that no route of the root namespace touches. */
function freeSubnets(): [string, string] {
  const routes = ip("-4", "route", "show", "table", "all");
  const taken = (net: string) => routes.includes(net);
  for (let i = 0; i < 2_000; i++) {
    const a = 64 + ((process.pid + i * 7) % 128);
    const b = (Math.floor(process.pid / 128) + i * 2) % 254;
    const first = `10.${a}.${b}.`;
    const second = `10.${a}.${b + 1}.`;
    if (!taken(first) && !taken(second)) return [first, second];
  }
  throw new Error("no free 10.x.y.0/24 pair for the namespaces' network");
}

export class NetnsNetwork {
  readonly prefix: string;
  readonly switchNs: string;
  private readonly switch: HeldNamespace;
  private readonly held: HeldNamespace[] = [];
  /** The test process's address on the switch (it reaches every host there). */
  readonly observerAddress: string;
  private readonly hosts = new Map<string, NetnsHost>();
  private readonly rootLinks: string[] = [];
  private readonly net: string;
  private readonly frontNet: string;
  private fronts = 0;
  private destroyed = false;
  private readonly onExit = () => this.destroy();

  private constructor() {
    removeStaleNamespaces();
    this.prefix = `trib-${process.pid}-`;
    [this.net, this.frontNet] = freeSubnets();
    this.switchNs = `${this.prefix}sw`;
    process.on("exit", this.onExit);
    // SIGINT/SIGTERM end the process through exit (and so destroy()) unless the script handles
    // them itself, as test/harness/processes.ts does for its children.
    for (const signal of ["SIGTERM", "SIGINT"] as const)
      process.once(signal, () => {
        if (process.listenerCount(signal) === 0) process.exit(signal === "SIGTERM" ? 143 : 130);
      });
    this.switch = this.hold(this.switchNs);
    ip("-n", this.switchNs, "link", "set", "lo", "up");
    ip("-n", this.switchNs, "link", "add", "br0", "type", "bridge");
    ip("-n", this.switchNs, "link", "set", "br0", "up");
    // The observer port: the root namespace's own veth into the switch.
    const rootEnd = this.rootLink("o");
    this.observerAddress = `${this.net}254`;
    ip("link", "add", rootEnd, "type", "veth", "peer", "name", "observer", "netns", this.switchNs);
    ip("-n", this.switchNs, "link", "set", "observer", "master", "br0", "up");
    ip("addr", "add", `${this.observerAddress}/24`, "dev", rootEnd);
    ip("link", "set", rootEnd, "up");
  }

  private hold(name: string): HeldNamespace {
    const ns = new HeldNamespace(name);
    this.held.push(ns);
    return ns;
  }

  /** A switch and the observer port; hosts are added with addHost. */
  static create(): NetnsNetwork {
    return new NetnsNetwork();
  }

  /** A root-namespace interface name of this run (at most 15 characters). */
  private rootLink(suffix: string): string {
    const name = `tr${process.pid}${suffix}`;
    this.rootLinks.push(name);
    return name;
  }

  /** A host named `name` (letters and digits, short: it names its bridge port), on the switch. */
  addHost(name: string): NetnsHost {
    if (this.hosts.has(name)) throw new Error(`host ${name} exists`);
    const index = this.hosts.size + 1;
    if (index > 250) throw new Error("at most 250 hosts");
    const ns = `${this.prefix}${name}`;
    const port = `p-${name}`.slice(0, 15);
    const held = this.hold(ns);
    ip("-n", ns, "link", "set", "lo", "up");
    ip("-n", this.switchNs, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns);
    ip("-n", this.switchNs, "link", "set", port, "master", "br0", "up");
    const address = `${this.net}${index}`;
    ip("-n", ns, "addr", "add", `${address}/24`, "dev", "eth0");
    ip("-n", ns, "link", "set", "eth0", "up");
    const host = { name, ns, address, port, exec: held.exec };
    this.hosts.set(name, host);
    return host;
  }

  /** A point-to-point link between `host` and the root namespace, a /30 of its own. */
  addFront(host: NetnsHost): FrontLink {
    const i = this.fronts++;
    if (i >= 63) throw new Error("at most 63 front links");
    const rootEnd = this.rootLink(`f${i}`);
    const rootAddress = `${this.frontNet}${4 * i + 1}`;
    const hostAddress = `${this.frontNet}${4 * i + 2}`;
    ip("link", "add", rootEnd, "type", "veth", "peer", "name", "front", "netns", host.ns);
    ip("addr", "add", `${rootAddress}/30`, "dev", rootEnd);
    ip("link", "set", rootEnd, "up");
    ip("-n", host.ns, "addr", "add", `${hostAddress}/30`, "dev", "front");
    ip("-n", host.ns, "link", "set", "front", "up");
    return { hostAddress, rootAddress };
  }

  host(name: string): NetnsHost {
    const host = this.hosts.get(name);
    if (!host) throw new Error(`no host ${name}`);
    return host;
  }

  /** Cuts `host` from the switch: its traffic to every other host (and the observer) is silently lost. */
  cut(host: NetnsHost | string): void {
    const h = typeof host === "string" ? this.host(host) : host;
    this.switch.ip("link", "set", h.port, "nomaster");
  }

  /** Reattaches a cut host. */
  heal(host: NetnsHost | string): void {
    const h = typeof host === "string" ? this.host(host) : host;
    this.switch.ip("link", "set", h.port, "master", "br0");
  }

  isCut(host: NetnsHost | string): boolean {
    const h = typeof host === "string" ? this.host(host) : host;
    return !this.switch.ip("-o", "link", "show", h.port).includes("master br0");
  }

  /** Bytes `host` has sent onto the switch so far (its bridge port's receive counter). */
  sentBytes(host: NetnsHost | string): number {
    const h = typeof host === "string" ? this.host(host) : host;
    const [link] = JSON.parse(this.switch.ip("-s", "-j", "link", "show", h.port)) as Array<{ stats64: { rx: { bytes: number } } }>;
    return link!.stats64.rx.bytes;
  }

  /** Namespaces of this run still present (a check that destroy left nothing behind). */
  static leftovers(prefix: string): string[] {
    return ip("netns", "list")
      .split("\n")
      .map((l) => l.split(" ")[0]!)
      .filter((n) => n.startsWith(prefix));
  }

  /**
   * Deletes every namespace and root-side link of the run. Synchronous, so it can run in an
   * "exit" handler. A namespace whose processes still run disappears when they end; the harness
   * kills them before (and its own exit handler SIGKILLs any left).
   */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    process.off("exit", this.onExit);
    for (const link of this.rootLinks) spawnSync("ip", ["link", "del", link], { stdio: "ignore" });
    for (const ns of this.held) ns.release();
  }
}
