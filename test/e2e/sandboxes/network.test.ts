// tier: slow (a stack of its own)
import t from "tap";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { readdirSync, readFileSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { startSandboxHost } from "../../harness/processes.js";
import { startStack } from "../../harness/stack.js";
import { DEFAULT_EGRESS_DENY } from "../../../modules/sandboxes/mod.js";

// network: "egress": a sandbox reaches an HTTP server on this machine's own non-loopback address
// (the machine has no internet), never the platform's loopback ports, never a denied CIDR.
const address = Object.values(networkInterfaces())
  .flat()
  .find((a) => a && a.family === "IPv4" && !a.internal)?.address;
if (!address) {
  t.comment("no non-loopback IPv4 address here: nothing to reach");
  process.exit(0);
}

const toInt = (ip: string) => ip.split(".").reduce((n, o) => n * 256 + Number(o), 0);
const contains = (cidr: string, ip: string) => {
  const [base, bits] = cidr.split("/");
  const size = 2 ** (32 - Number(bits));
  return Math.floor(toInt(ip) / size) === Math.floor(toInt(base!) / size);
};

/** Pids of slirp4netns processes whose parent is `pid`. */
function slirpChildrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === pid && readFileSync(`/proc/${entry}/cmdline`, "utf8").includes("slirp4netns")) out.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

const server = createServer((_req, res) => res.end("egress-ok"));
await new Promise<void>((resolve) => server.listen(0, "0.0.0.0", resolve));
t.teardown(() => server.close());
const serverPort = (server.address() as AddressInfo).port;

// Host A: the built-in deny list (minus a range holding this machine's address, on machines whose
// address is private), and this machine's own addresses allowed, so the server is reachable.
const allowedDeny = DEFAULT_EGRESS_DENY.filter((c) => !contains(c, address));
const stack = await startStack(t, {
  runners: 0,
  sandboxHosts: 1,
  // Hosts killed below are given up on quickly.
  env: { TRIBUTARY_SANDBOX_HOST_TIMEOUT_MS: "1500" },
  sandboxHostEnv: { TRIBUTARY_SANDBOX_EGRESS: "on", TRIBUTARY_SANDBOX_EGRESS_DENY: allowedDeny.join(","), TRIBUTARY_SANDBOX_EGRESS_DENY_HOST: "off" },
});
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
const json = async (res: Response) => (await res.json()) as any;
const natsPort = Number(new URL(stack.nats.url).port);
const py = async (id: string, script: string) => json(await post(`/v1/sandboxes/${id}/exec`, { command: ["/usr/bin/python3", "-c", script], timeout_seconds: 30 }));

/** Python that tries each host:port (1 s each) and prints "host:port connected|errno N". */
const connectScript = (targets: [string, number][]) =>
  `import socket
for host, port in ${JSON.stringify(targets)}:
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect((host, port))
        print("%s:%d connected" % (host, port))
    except socket.timeout:
        print("%s:%d timeout" % (host, port))
    except OSError as e:
        print("%s:%d errno %d" % (host, port, e.errno))`;

const httpGet = `import urllib.request
try:
    print(urllib.request.urlopen("http://${address}:${serverPort}/", timeout=5).read().decode())
except Exception as e:
    print("failed", e)`;

/** Reject routes in the sandbox's table, as CIDRs (from /proc/net/route: little-endian hex). */
const rejectRoutes = `for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if int(f[3], 16) & 0x0200:
        dst, mask = int(f[1], 16).to_bytes(4, "little"), int(f[7], 16)
        print("%s/%d" % (".".join(map(str, dst)), bin(mask).count("1")))`;

const sandbox = await json(await post("/v1/sandboxes", { network: "egress", memory_mb: 128, disk_mb: 8 }));
if (sandbox.status !== "running") t.comment(JSON.stringify(stack.sandboxHosts[0]!.logs.filter((r) => r.level !== "info")));

t.test("an egress sandbox reaches a server on this machine's address", async (t) => {
  t.match(sandbox, { status: "running", network: "egress" });
  t.equal((await py(sandbox.id, httpGet)).stdout, "egress-ok\n");
  const none = await json(await post("/v1/sandboxes", { memory_mb: 64, disk_mb: 8 }));
  t.equal(none.network, "none");
  t.match((await py(none.id, httpGet)).stdout, /^failed/, "a sandbox without network does not");
});

t.test("the platform's loopback ports are out of reach", async (t) => {
  const targets: [string, number][] = [];
  for (const port of [natsPort, stack.gateway.port, serverPort]) targets.push(["127.0.0.1", port], ["10.0.2.2", port]);
  const out = (await py(sandbox.id, connectScript(targets))).stdout as string;
  t.notMatch(out, /connected/, out);
  // 127.0.0.1 is the sandbox's own loopback (refused: nothing listens there); 10.0.2.2 (the host's
  // loopback through slirp4netns) is disabled (--disable-host-loopback).
  t.match(out, new RegExp(`127\\.0\\.0\\.1:${natsPort} errno 111`));
  t.match(out, new RegExp(`10\\.0\\.2\\.2:${natsPort} errno (101|111|113)`));
});

t.test("denied ranges have no route: cloud metadata, private ranges", async (t) => {
  const routes = ((await py(sandbox.id, rejectRoutes)).stdout as string).trim().split("\n");
  t.same(routes.sort(), [...allowedDeny].sort(), "one unreachable route per denied CIDR");
  // Targets in ranges still denied on this machine (one holding its own address is allowed above).
  const targets = ([["169.254.169.254", 80], ["10.96.0.1", 443], ["192.168.1.1", 80], ["100.64.0.1", 80]] as [string, number][]).filter(([ip]) => allowedDeny.some((c) => contains(c, ip)));
  const out = (await py(sandbox.id, connectScript(targets))).stdout as string;
  t.equal(out, targets.map(([ip, port]) => `${ip}:${port} errno 113\n`).join(""), "EHOSTUNREACH at once: the packets never reach the stack");
});

t.test("routing cannot be bypassed: no raw or packet sockets, no route changes", async (t) => {
  // A packet socket on tap0 would skip the routing table (and so the deny list): it needs CAP_NET_RAW.
  const script = `import socket, subprocess
for name, family, kind in (("packet", socket.AF_PACKET, socket.SOCK_RAW), ("raw", socket.AF_INET, socket.SOCK_RAW)):
    try:
        socket.socket(family, kind, socket.IPPROTO_RAW if family == socket.AF_INET else 0)
        print(name, "opened")
    except OSError as e:
        print(name, "errno", e.errno)`;
  t.equal((await py(sandbox.id, script)).stdout, "packet errno 1\nraw errno 1\n", "EPERM for both");
  const del = await json(await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: "ip route del unreachable 10.0.0.0/8 2>&1 || echo refused; ip route flush table main 2>&1 || echo refused" }));
  t.match(del.stdout, /refused\n.*refused\n$/s, del.stdout);
  const routes = ((await py(sandbox.id, rejectRoutes)).stdout as string).trim().split("\n");
  t.same(routes.sort(), [...allowedDeny].sort(), "the deny routes are all still there");
});

t.test("DNS: the sandbox's resolver is slirp4netns's forwarder; IPv6 has no route", async (t) => {
  t.equal((await py(sandbox.id, `print(open("/etc/resolv.conf").read(), end="")`)).stdout, "nameserver 10.0.2.3\n");
  t.equal((await py(sandbox.id, `import socket\nprint(socket.gethostbyname("localhost"))`)).stdout, "127.0.0.1\n", "localhost from /etc/hosts, not DNS");
  const v6 = await py(sandbox.id, `import socket\ns = socket.socket(socket.AF_INET6)\ntry:\n    s.connect(("2001:db8::1", 80))\nexcept OSError as e:\n    print("errno", e.errno)`);
  t.match(v6.stdout, /^errno (101|97|99)\n$/, v6.stdout + v6.stderr);
});

t.test("the network stack runs beside its sandbox and ends with it", async (t) => {
  const host = stack.sandboxHosts[0]!.child.pid!;
  t.equal(slirpChildrenOf(host).length, 1, "one slirp4netns, for the one egress sandbox");
  t.match(await json(await post(`/v1/sandboxes/${sandbox.id}/stop`, {})), { status: "stopped" });
  t.same(slirpChildrenOf(host), [], "none left behind");
});

t.test("bad values of network are refused naming the parameter", async (t) => {
  for (const network of ["internet", "host", "", 1, "egress ".repeat(20)]) {
    const res = await post("/v1/sandboxes", { network });
    t.equal(res.status, 400, JSON.stringify(network));
    t.equal((await json(res)).error.param, "network");
  }
  const job = await post("/v1/jobs", { command: "true", network: "host" });
  t.equal(job.status, 400, "jobs share the option");
  t.equal((await json(job)).error.param, "network");
});

// Host B: the defaults (this machine's own addresses denied) plus a configured range.
t.test("with the defaults, this machine's own address is denied too; configured ranges add to them", async (t) => {
  await stack.sandboxHosts[0]!.stop();
  const hostB = await startSandboxHost(stack.nats.url, { TRIBUTARY_SANDBOX_EGRESS: "on", TRIBUTARY_SANDBOX_EGRESS_DENY: "default,198.51.100.0/24" });
  t.teardown(() => hostB.kill());
  const b = await json(await post("/v1/sandboxes", { network: "egress", memory_mb: 64, disk_mb: 8 }));
  t.equal(b.status, "running", JSON.stringify(b));
  const routes = ((await py(b.id, rejectRoutes)).stdout as string).trim().split("\n");
  t.ok(routes.includes(`${address}/32`), "this machine's address");
  t.ok(routes.includes("198.51.100.0/24"), "the configured range");
  t.ok(DEFAULT_EGRESS_DENY.every((c) => routes.includes(c)), "the built-in list");
  t.match((await py(b.id, httpGet)).stdout, /^failed.*No route to host/, "the same server is unreachable");
  t.equal((await py(b.id, connectScript([["198.51.100.7", 80]]))).stdout, "198.51.100.7:80 errno 113\n");
  // A kill -9 of the host: the stack's exit fd (a pipe from the host) closes, and it ends too.
  const [slirp] = slirpChildrenOf(hostB.child.pid!);
  t.ok(slirp, "a slirp4netns beside the sandbox");
  await hostB.kill();
  let alive = true;
  for (let i = 0; i < 40 && alive; i++) {
    await new Promise((r) => setTimeout(r, 50));
    try {
      alive = !readFileSync(`/proc/${slirp}/stat`, "utf8").includes(") Z ");
    } catch {
      alive = false;
    }
  }
  t.notOk(alive, "slirp4netns did not outlive its host");
});

t.test("where no live host offers egress, sandboxes and jobs asking for it are a 400 naming network", async (t) => {
  const hostC = await startSandboxHost(stack.nats.url, { TRIBUTARY_SANDBOX_EGRESS: "off" });
  t.teardown(() => hostC.kill());
  let res = await post("/v1/sandboxes", { network: "egress", memory_mb: 64, disk_mb: 8 });
  // Until the killed host B is given up on (1.5 s of silence), it still counts.
  for (let i = 0; i < 40 && res.status !== 400; i++) {
    await new Promise((r) => setTimeout(r, 100));
    res = await post("/v1/sandboxes", { network: "egress", memory_mb: 64, disk_mb: 8 });
  }
  t.equal(res.status, 400);
  t.match((await json(res)).error, { param: "network", message: /no sandbox host here offers network egress/ });
  const job = await post("/v1/jobs", { command: "true", network: "egress" });
  t.equal(job.status, 400);
  t.equal((await json(job)).error.param, "network");
  t.equal((await json(await post("/v1/sandboxes", { memory_mb: 64, disk_mb: 8 }))).status, "running", "sandboxes without network still start there");
});
