import t from "tap";
import { jetstream } from "@nats-io/jetstream";
import { newSortableId } from "../../../lib/ids.js";
import { subjects } from "../../../lib/nats/subjects.js";
import { JobStore } from "../../../modules/jobs/mod.js";
import { sharedStack } from "../../harness/shared-stack.js";

// The end of a job's output, as the dashboard's job page reads it every few seconds: the newest
// chunks up to a size, read back from the newest one in widening ranges of the log stream, with
// other jobs' output in between, and whether earlier output was left out.

const stack = await sharedStack(t);
const nc = await stack.nats.connect("admin");
t.teardown(() => nc.close());
const jobs = await JobStore.open(nc);
const js = jetstream(nc);

const long = newSortableId("job_");
const short = newSortableId("job_");
const chunk = (n: number) => `line ${String(n).padStart(4, "0")} ${"x".repeat(90)}\n`;
// 1,200 chunks of ~100 bytes of one job, interleaved with another's (the stream holds both).
for (let n = 0; n < 1200; n++) {
  await js.publish(subjects.jobLogs(long), JSON.stringify({ attempt: 1, stream: n % 7 === 0 ? "stderr" : "stdout", data: Buffer.from(chunk(n)).toString("base64") }));
  if (n % 100 === 0) await js.publish(subjects.jobLogs(short), JSON.stringify({ attempt: 1, stream: "stdout", data: Buffer.from(`short ${n}\n`).toString("base64") }));
}
const text = (chunks: Array<{ data: string }>) => chunks.map((c) => Buffer.from(c.data, "base64").toString()).join("");

t.test("a long output: its last chunks, at least the size asked, and earlier output left out", async (t) => {
  const tail = await jobs.logTail(long, 50 * 1024);
  t.equal(tail.truncated, true);
  const got = text(tail.chunks);
  t.ok(got.length >= 50 * 1024 && got.length < 50 * 1024 + 200, `${got.length} bytes`);
  t.ok(got.endsWith(chunk(1199)), "ends with the newest chunk");
  const first = Number(/^line (\d+)/.exec(got)![1]);
  t.equal(got, Array.from({ length: 1200 - first }, (_, i) => chunk(first + i)).join(""), "every chunk from there on, in order, none of the other job's");
  t.same(new Set(tail.chunks.map((c) => c.stream)), new Set(["stdout", "stderr"]), "with their streams");
});

t.test("a short output whole; none for a job without any", async (t) => {
  const tail = await jobs.logTail(short, 50 * 1024);
  t.same([tail.truncated, text(tail.chunks)], [false, Array.from({ length: 12 }, (_, i) => `short ${i * 100}\n`).join("")]);
  t.same(await jobs.logTail(newSortableId("job_"), 1024), { chunks: [], truncated: false });
});
