import { execFileSync } from "node:child_process";
import t from "tap";
import { allowedCpus, formatCpuList, onCpus, parseCpuList, planCpus, taskset } from "../../lib/process/cpu-affinity.js";

t.test("CPU lists parse and format like Linux's", async (t) => {
  t.same(parseCpuList("0-3,6"), [0, 1, 2, 3, 6]);
  t.same(parseCpuList(" 5, 1-2 ,2"), [1, 2, 5]);
  t.equal(formatCpuList([6, 0, 1, 2, 3]), "0-3,6");
  t.equal(formatCpuList([1]), "1");
  for (const bad of ["", "a", "3-1", "1;2", "-1"]) t.throws(() => parseCpuList(bad), JSON.stringify(bad));
});

t.test("auto gives each CPU runner its threads, from the top, when a CPU is left for the rest", async (t) => {
  const two = planCpus("auto", [0, 1], [{ name: "r", cpus: 1 }]);
  t.same(two.plan?.runners.get("r"), [1]);
  t.same(two.plan?.services, [0]);

  const eight = planCpus("auto", [0, 1, 2, 3, 4, 5, 6, 7], [{ name: "a", cpus: 2 }, { name: "gpu", cpus: 0 }, { name: "b", cpus: 3 }]);
  t.same(eight.plan?.runners.get("a"), [6, 7]);
  t.same(eight.plan?.runners.get("b"), [3, 4, 5]);
  t.notOk(eight.plan?.runners.has("gpu"), "GPU and sim runners are not pinned");
  t.same(eight.plan?.services, [0, 1, 2]);

  // At the edge: runners needing every CPU leave none for the gateway, so nothing is pinned.
  const full = planCpus("auto", [0, 1], [{ name: "a", cpus: 1 }, { name: "b", cpus: 1 }]);
  t.equal(full.plan, undefined);
  t.match(full.plan ? "" : full.reason, /need 2 CPUs and 2 are available/);
  t.equal(planCpus("auto", [0, 1, 2], [{ name: "a", cpus: 1 }, { name: "b", cpus: 1 }]).plan?.services.length, 1);

  t.equal(planCpus("auto", [0, 1], [{ name: "sim", cpus: 0 }]).plan, undefined, "no CPU runner, no pinning");
  t.equal(planCpus("off", [0, 1, 2, 3], [{ name: "a", cpus: 1 }]).plan, undefined);
});

t.test("own pins every runner to CPUs of its own, wrapping round; the rest float over all", async (t) => {
  const two = planCpus("own", [0, 1], [{ name: "a", cpus: 1 }, { name: "b", cpus: 1 }, { name: "sim", cpus: 0 }]).plan!;
  t.same(two.runners.get("a"), [1]);
  t.same(two.runners.get("b"), [0]);
  t.notOk(two.runners.has("sim"));
  t.same(two.services, [0, 1]);
  const over = planCpus("own", [0, 1], [{ name: "a", cpus: 1 }, { name: "b", cpus: 2 }]).plan!;
  t.same(over.runners.get("b"), [0, 1], "past the last CPU it wraps round");
  t.same(planCpus("own", [0, 1], [{ name: "a", cpus: 5 }]).plan!.runners.get("a"), [0, 1], "never more CPUs than there are");
});

t.test("an explicit list is shared by the CPU runners; the rest go to the other processes", async (t) => {
  const plan = planCpus("2-3", [0, 1, 2, 3], [{ name: "a", cpus: 1 }, { name: "b", cpus: 4 }]).plan!;
  t.same(plan.runners.get("a"), [2, 3]);
  t.same(plan.runners.get("b"), [2, 3]);
  t.same(plan.services, [0, 1]);
  t.throws(() => planCpus("0-1", [0, 1], [{ name: "a", cpus: 1 }]), /leaves no CPU/);
  t.throws(() => planCpus("7", [0, 1], [{ name: "a", cpus: 1 }]), /does not offer: 7/);
  t.throws(() => planCpus("x", [0, 1], [{ name: "a", cpus: 1 }]), /not a CPU list/);
});

t.test("onCpus runs the command under taskset on those CPUs", async (t) => {
  t.same(onCpus("node", ["a.js"], undefined), { command: "node", args: ["a.js"] });
  t.same(onCpus("node", ["a.js"], []), { command: "node", args: ["a.js"] });
  if (!taskset()) {
    t.comment("taskset is not installed: the command runs unpinned");
    t.same(onCpus("node", ["a.js"], [0]), { command: "node", args: ["a.js"] });
    return;
  }
  const cpu = allowedCpus().at(-1)!;
  const line = onCpus("sh", ["-c", "taskset -pc $$"], [cpu]);
  t.same(line.args.slice(0, 2), ["-c", `${cpu}`]);
  const out = execFileSync(line.command, line.args, { encoding: "utf8" });
  t.match(out, new RegExp(`affinity list: ${cpu}\\s*$`), "the child runs on the CPU it was given");
});
