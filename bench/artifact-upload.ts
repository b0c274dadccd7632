// The gateway's memory while a 1 GiB artifact streams through it: uploaded in parts (in
// parallel), assembled by finish, uploaded single-shot, and downloaded, against the same
// gateway's idle RSS in the same run. Bytes should flow socket -> JetStream without ever sitting
// whole in memory, so the peak should stay within a few tens of MiB of idle.
//
//   node dist/bench/artifact-upload.js [--mib 1024] [--parallel 4]
import { createHash } from "node:crypto";
import { request } from "node:http";
import { loadavg } from "node:os";
import { markdownTable, machineLine, writeResults } from "./lib/table.js";
import { rssMiB, startActorHost, startGateway, startNats, TEST_KEY } from "./lib/processes.js";

const args = process.argv.slice(2);
const arg = (name: string, fallback: number) => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const MIB = 1024 * 1024;
const totalBytes = arg("mib", 1024) * MIB;
const parallel = arg("parallel", 4);
const PART_BYTES = 16 * MIB;
const BLOCK = MIB;

/** Block `i` of the artifact: deterministic, different per block, made on the fly (never 1 GiB in this process). */
function block(i: number, length = BLOCK): Buffer {
  const b = Buffer.alloc(length, i % 251);
  b.writeUInt32BE(i, 0);
  return b;
}

/** Sends `length` bytes starting at `offset` of the artifact as a request body, honouring backpressure. */
function send(path: string, headers: Record<string, string>, offset: number, length: number, head = Buffer.alloc(0), tail = Buffer.alloc(0)): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(gatewayUrl + path, {
      method: "POST",
      headers: { authorization: `Bearer ${TEST_KEY}`, "content-length": String(head.length + length + tail.length), ...headers },
    });
    req.on("error", reject);
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("error", reject);
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
    });
    void (async () => {
      req.write(head);
      for (let at = offset; at < offset + length; at += BLOCK) {
        const n = Math.min(BLOCK, offset + length - at);
        if (!req.write(block(at / BLOCK, n))) await new Promise((r) => req.once("drain", r));
      }
      req.end(tail);
    })();
  });
}

function sha256Of(bytes: number): string {
  const h = createHash("sha256");
  for (let at = 0; at < bytes; at += BLOCK) h.update(block(at / BLOCK, Math.min(BLOCK, bytes - at)));
  return h.digest("hex");
}
const wholeSha256 = sha256Of(totalBytes);

const loadAtStart = loadavg()[0]!;
const nats = await startNats();
// The single-shot phase sends as much as the default limit allows (uWebSockets.js resets a
// Content-Length of 10 digits, so a 1 GiB single-shot upload cannot arrive at all).
const singleBytes = Math.min(totalBytes, 512 * MIB);
const env = {};
const actors = await startActorHost(nats.url, env);
const gateway = await startGateway(nats.url, env);
const gatewayUrl = gateway.url;
const pid = gateway.child.pid!;
const api = (path: string, init: RequestInit = {}) =>
  fetch(gatewayUrl + path, { ...init, headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json", ...(init.headers as Record<string, string>) } });

interface Phase {
  name: string;
  bytes: number;
  seconds: number;
  peakRss: number;
  endRss: number;
  note: string;
}
const phases: Phase[] = [];

/** Runs `work`, sampling the gateway's RSS every 50 ms. */
async function measured(name: string, bytes: number, work: () => Promise<string>): Promise<void> {
  let peak = rssMiB(pid);
  const timer = setInterval(() => (peak = Math.max(peak, rssMiB(pid))), 50);
  const started = performance.now();
  const note = await work();
  const seconds = (performance.now() - started) / 1000;
  clearInterval(timer);
  peak = Math.max(peak, rssMiB(pid));
  phases.push({ name, bytes, seconds, peakRss: peak, endRss: rssMiB(pid), note });
  process.stderr.write(`${name}: ${seconds.toFixed(1)} s, peak RSS ${peak.toFixed(0)} MiB (${note})\n`);
}

try {
  // Warm the routes (first requests compile code paths), then let the heap settle.
  const small = await api("/v1/multipart", { method: "POST", body: JSON.stringify({ filename: "warm.tgz", bytes: 10 }) });
  const warm = (await small.json()) as { id: string };
  await api(`/v1/multipart/${warm.id}/part?part_number=1`, { method: "POST", body: Buffer.alloc(10) });
  await api(`/v1/multipart/${warm.id}/finish`, { method: "POST" });
  await api(`/v1/artifacts/${warm.id}`, { method: "DELETE" });
  await new Promise((r) => setTimeout(r, 2_000));
  const idleRss = rssMiB(pid);

  let id = "";
  await measured(`parts: ${totalBytes / PART_BYTES} x 16 MiB, ${parallel} at a time`, totalBytes, async () => {
    const res = await api("/v1/multipart", { method: "POST", body: JSON.stringify({ filename: "big.tgz", bytes: totalBytes, sha256: wholeSha256 }) });
    const upload = (await res.json()) as { id: string; part_size: number };
    if (upload.part_size !== PART_BYTES) throw new Error(`unexpected part size ${upload.part_size}`);
    id = upload.id;
    const parts = Array.from({ length: Math.ceil(totalBytes / PART_BYTES) }, (_, i) => i + 1);
    await Promise.all(
      Array.from({ length: parallel }, async () => {
        for (let n = parts.shift(); n !== undefined; n = parts.shift()) {
          const offset = (n - 1) * PART_BYTES;
          const r = await send(`/v1/multipart/${id}/part?part_number=${n}`, { "content-type": "application/octet-stream" }, offset, Math.min(PART_BYTES, totalBytes - offset));
          if (r.status !== 200) throw new Error(`part ${n}: ${r.status} ${r.body}`);
        }
      }),
    );
    return "every part 200";
  });
  await measured("finish: assemble and verify", totalBytes, async () => {
    const res = await api(`/v1/multipart/${id}/finish`, { method: "POST" });
    const done = (await res.json()) as { status: string; sha256: string };
    if (done.status !== "ready" || done.sha256 !== wholeSha256) throw new Error(`finish: ${JSON.stringify(done).slice(0, 300)}`);
    return "sha256 verified";
  });
  await measured("download (GET content)", totalBytes, async () => {
    const res = await api(`/v1/artifacts/${id}/content`);
    const h = createHash("sha256");
    for await (const chunk of res.body!) h.update(chunk as Uint8Array);
    if (h.digest("hex") !== wholeSha256) throw new Error("download: sha256 differs");
    return "sha256 matches";
  });
  await api(`/v1/artifacts/${id}`, { method: "DELETE" });
  await measured(`single-shot (multipart/form-data), ${singleBytes / MIB} MiB`, singleBytes, async () => {
    const boundary = "----tributary-bench";
    const head = Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="big.tgz"\r\ncontent-type: application/octet-stream\r\n\r\n`);
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const r = await send("/v1/artifacts", { "content-type": `multipart/form-data; boundary=${boundary}` }, 0, singleBytes, head, tail);
    const artifact = JSON.parse(r.body) as { id: string; sha256: string };
    if (r.status !== 200 || artifact.sha256 !== sha256Of(singleBytes)) throw new Error(`single-shot: ${r.status} ${r.body.slice(0, 300)}`);
    await api(`/v1/artifacts/${artifact.id}`, { method: "DELETE" });
    return "sha256 verified";
  });

  const rows = phases.map((p) => [p.name, (p.bytes / MIB / p.seconds).toFixed(0), p.peakRss.toFixed(0), (p.peakRss - idleRss).toFixed(0), p.endRss.toFixed(0), p.note]);
  writeResults("artifact-upload.md", `Artifact upload: gateway memory while ${totalBytes / MIB} MiB stream through it`, [
    machineLine(),
    `Artifact: ${totalBytes / MIB} MiB. Gateway idle RSS (after warm-up, same run): ${idleRss.toFixed(0)} MiB. RSS sampled every 50 ms. One nats-server (file storage), one actor host, one gateway, the client in the bench process; \`node dist/bench/artifact-upload.js --mib ${totalBytes / MIB} --parallel ${parallel}\`.`,
    `Load average (1 min) at the start and the end: ${loadAtStart.toFixed(1)}, ${loadavg()[0]!.toFixed(1)} (on 2 CPUs: above 2, other work shares the machine and the MiB/s figures are lower bounds).`,
    markdownTable(["phase", "MiB/s", "peak RSS (MiB)", "peak over idle (MiB)", "RSS after (MiB)", "check"], rows),
    "Target: the peak over idle stays bounded (tens of MiB: chunk buffers of the requests in flight and the Object Store's read-ahead), independent of the artifact's size.",
  ]);
} finally {
  await gateway.kill();
  await actors.kill();
  await nats.stop();
}
