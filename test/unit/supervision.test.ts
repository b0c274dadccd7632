import type { NatsConnection } from "@nats-io/transport-node";
import * as Duration from "effect/Duration";
import * as Effect from "effect/Effect";
import * as Fiber from "effect/Fiber";
import { TestClock } from "effect/testing";
import t from "tap";
import type { Logger } from "../../lib/log.js";
import { nextBackoffMs, restartForever, type RestartPolicy } from "../../lib/process/restart.js";
import { supervise } from "../../cli/child-process.js";
import { superviseActor, Supervisor, type Actor, type ActorContext } from "../../modules/actor-runtime/mod.js";

// The restart policy every supervisor shares (actors and `tributary start`'s processes), driven
// by Effect's TestClock: no test here waits on the wall clock.

const policy: RestartPolicy = { initialBackoffMs: 500, maxBackoffMs: 4_000, stableAfterMs: 60_000 };

const quiet: Logger = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet, enabled: () => false };
const nc = {} as NatsConnection; // the supervisor hands it to actors; these actors never use it

/** Lets promise callbacks (an actor's start and stop) run, without moving the test clock. */
const settle = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)));

/** Advances the test clock by `ms` and lets what woke up run. */
const advance = (ms: number) => Effect.andThen(TestClock.adjust(ms), settle);

t.test("the backoff starts at the initial delay, doubles, and stops at the cap", async (t) => {
  const delays: number[] = [];
  let previous: number | undefined;
  for (let i = 0; i < 6; i++) delays.push((previous = nextBackoffMs(policy, previous, 10)));
  t.same(delays, [500, 1_000, 2_000, 4_000, 4_000, 4_000]);
});

t.test("a run longer than stableAfterMs resets the backoff; one of exactly stableAfterMs does not", async (t) => {
  t.equal(nextBackoffMs(policy, 4_000, 60_000), 4_000, "exactly the stable time: still a crash loop");
  t.equal(nextBackoffMs(policy, 2_000, 60_000), 4_000);
  t.equal(nextBackoffMs(policy, 4_000, 60_001), 500, "longer: healthy, back to the initial delay");
  t.equal(nextBackoffMs(policy, undefined, 0), 500, "the first restart waits the initial delay");
});

/** Runs `body` with a TestClock in place of the clock. */
const withTestClock = <A, E>(body: Effect.Effect<A, E>) => Effect.runPromise(body.pipe(Effect.provide(TestClock.layer())));

t.test("restartForever restarts a run that ends on its own at the policy's times", async (t) => {
  await withTestClock(
    Effect.gen(function* () {
      const starts: number[] = [];
      const stops: Array<{ ranForMs: number; restartInMs: number }> = [];
      let lifetimeMs = 0; // how long the next run lasts before it fails
      const run = Effect.gen(function* () {
        starts.push(yield* Effect.clockWith((c) => c.currentTimeMillis));
        yield* Effect.sleep(lifetimeMs);
        return yield* Effect.fail("crashed");
      });
      const fiber = yield* restartForever(run, policy, (s, d) => stops.push({ ranForMs: s.ranForMs, restartInMs: Duration.toMillis(d) })).pipe(
        Effect.forkChild,
      );
      yield* settle;
      t.same(starts, [0], "the first run starts at once");

      yield* advance(499);
      t.same(starts, [0], "not restarted before the initial delay");
      yield* advance(1);
      t.same(starts, [0, 500], "restarted after exactly the initial delay");
      yield* advance(1_000);
      t.same(starts, [0, 500, 1_500], "then after twice that");
      yield* advance(2_000);
      yield* advance(4_000);
      yield* advance(4_000);
      t.same(starts, [0, 500, 1_500, 3_500, 7_500, 11_500], "doubling up to the cap, then at the cap");

      // A healthy run: it lasts longer than stableAfterMs before it crashes.
      lifetimeMs = 60_001;
      yield* advance(4_000);
      t.equal(starts.at(-1), 15_500, "the next run started at the capped delay");
      lifetimeMs = 0;
      yield* advance(60_001);
      t.equal(stops.at(-1)!.ranForMs, 60_001, "the run's length is measured on the clock");
      yield* advance(499);
      t.equal(starts.length, 7, "not yet");
      yield* advance(1);
      t.equal(starts.at(-1), 15_500 + 60_001 + 500, "after a healthy run the restart waits the initial delay again");

      yield* Fiber.interrupt(fiber);
      yield* advance(60_000);
      t.equal(starts.length, 8, "nothing restarts after interruption");
    }),
  );
});

t.test("restartForever restarts a run that returns or dies, not only one that fails", async (t) => {
  await withTestClock(
    Effect.gen(function* () {
      let runs = 0;
      const run = Effect.suspend(() => (++runs % 2 === 0 ? Effect.die(new Error("bug")) : Effect.void));
      const exits: string[] = [];
      const fiber = yield* restartForever(run, policy, (s) => exits.push(s.exit._tag)).pipe(Effect.forkChild);
      yield* settle;
      yield* advance(500);
      yield* advance(1_000);
      t.equal(runs, 3);
      t.same(exits, ["Success", "Failure", "Success"]);
      yield* Fiber.interrupt(fiber);
    }),
  );
});

t.test("interrupting a run stops it through its finalizers and restarts nothing", async (t) => {
  await withTestClock(
    Effect.gen(function* () {
      let acquired = 0;
      let released = 0;
      const run = Effect.scoped(Effect.andThen(Effect.acquireRelease(Effect.sync(() => ++acquired), () => Effect.sync(() => ++released)), Effect.never));
      const fiber = yield* restartForever(run, policy, () => t.fail("no run ends on its own")).pipe(Effect.forkChild);
      yield* settle;
      t.equal(acquired, 1);
      yield* Fiber.interrupt(fiber);
      t.equal(released, 1, "released on interruption");
      yield* advance(120_000);
      t.equal(acquired, 1, "not restarted");
    }),
  );
});

/** An actor that records what happens to it; the test fails it through the context it was given. */
class ScriptedActor implements Actor {
  ctx: ActorContext | undefined;
  started = false;
  stopped = false;
  constructor(
    readonly name: string,
    private readonly startError?: Error,
  ) {}
  async start(ctx: ActorContext): Promise<void> {
    this.ctx = ctx;
    if (this.startError) throw this.startError;
    this.started = true;
  }
  async stop(): Promise<void> {
    this.stopped = true;
  }
}

t.test("one-for-one: a failed actor is stopped and replaced by a fresh instance; the others keep running", async (t) => {
  await withTestClock(
    Effect.gen(function* () {
      const made: ScriptedActor[] = [];
      const other: ScriptedActor[] = [];
      const failing = superviseActor(() => (made.push(new ScriptedActor("a")), made.at(-1)!), nc, quiet, policy);
      const steady = superviseActor(() => (other.push(new ScriptedActor("b")), other.at(-1)!), nc, quiet, policy);
      const fibers = [yield* Effect.forkChild(failing.run), yield* Effect.forkChild(steady.run)];
      yield* settle;
      t.equal(made.length, 1);
      t.ok(made[0]!.started);
      t.equal(failing.actor.current, made[0]);

      made[0]!.ctx!.fail(new Error("lost its subscription"));
      yield* settle;
      t.ok(made[0]!.stopped, "the failed instance is stopped at once");
      t.equal(made.length, 1, "its replacement waits for the backoff");
      yield* advance(500);
      t.equal(made.length, 2, "a fresh instance from the factory");
      t.ok(made[1]!.started);
      t.equal(failing.actor.current, made[1]);

      made[0]!.ctx!.fail(new Error("late report from the old instance"));
      yield* advance(60_000);
      t.equal(made.length, 2, "a failure reported by a replaced instance changes nothing");
      t.notOk(made[1]!.stopped);

      made[1]!.ctx!.fail(new Error("again"));
      yield* settle;
      yield* advance(999);
      t.equal(made.length, 2, "the instance ran 60 s, not longer: the backoff doubled");
      yield* advance(1);
      t.equal(made.length, 3);

      t.equal(other.length, 1, "the other actor was never replaced");
      t.notOk(other[0]!.stopped, "nor stopped");

      yield* Fiber.interruptAll(fibers);
      t.ok(made[2]!.stopped && other[0]!.stopped, "interruption stops the running instances");
    }),
  );
});

t.test("an actor whose start throws is stopped and started again", async (t) => {
  await withTestClock(
    Effect.gen(function* () {
      const made: ScriptedActor[] = [];
      const supervised = superviseActor(() => (made.push(new ScriptedActor("c", made.length === 0 ? new Error("no bucket") : undefined)), made.at(-1)!), nc, quiet, policy);
      const fiber = yield* Effect.forkChild(supervised.run);
      yield* Effect.promise(() => supervised.actor.firstStart);
      yield* settle;
      t.ok(made[0]!.stopped, "a failed start is stopped (it may have subscribed before it threw)");
      yield* advance(500);
      t.equal(made.length, 2);
      t.ok(made[1]!.started);
      yield* Fiber.interrupt(fiber);
    }),
  );
});

t.test("Supervisor: spawn returns the started actor; stopAll stops every actor and restarts none", async (t) => {
  const supervisor = new Supervisor(nc, quiet, policy);
  let stopping = 0;
  let bothStopping = false;
  class SlowStop extends ScriptedActor {
    override async stop(): Promise<void> {
      stopping++;
      // Each stop waits until both have begun: stopAll stops the actors together, not one by one.
      await new Promise<void>((resolve) => {
        const check = () => (stopping === 2 ? ((bothStopping = true), resolve()) : setImmediate(check));
        check();
      });
      this.stopped = true;
    }
  }
  const a = (await supervisor.spawn(() => new SlowStop("a"))) as SlowStop;
  const b = (await supervisor.spawn(() => new SlowStop("b"))) as SlowStop;
  t.ok(a.started && b.started, "spawn resolves after the start");
  t.same(supervisor.actors, [a, b]);
  await supervisor.stopAll();
  t.ok(bothStopping, "both stops ran at the same time");
  t.ok(a.stopped && b.stopped);
  a.ctx!.fail(new Error("after stopAll"));
  await new Promise((resolve) => setImmediate(resolve));
  t.same(supervisor.actors, [a, b], "nothing was restarted");
});

t.test("tributary start restarts a child process on the same policy, reset after a healthy run", async (t) => {
  // A real child process that exits with 3 shortly after it starts; the clock is the test's.
  const restarts: Array<Record<string, unknown>> = [];
  let heard = () => {};
  const log: Logger = { ...quiet, error: (_msg, fields) => (restarts.push(fields ?? {}), heard()), child: () => log };
  const nextRestart = () => Effect.promise(() => new Promise<void>((resolve) => (heard = resolve)));
  const spec = { name: "crasher", command: process.execPath, args: ["-e", "setTimeout(() => process.exit(3), 50)"], env: process.env, stopTimeoutMs: 1_000 };
  await withTestClock(
    Effect.gen(function* () {
      const fiber = yield* Effect.forkChild(supervise(spec, log, policy));
      yield* nextRestart();
      t.match(restarts[0], { child: "crasher", code: 3, restartInMs: 500 }, "the first restart waits the initial delay");
      const second = yield* Effect.forkChild(nextRestart());
      yield* advance(500);
      yield* Fiber.join(second);
      t.match(restarts[1], { code: 3, restartInMs: 1_000 }, "a child that keeps crashing waits longer each time");
      const third = yield* Effect.forkChild(nextRestart());
      yield* advance(1_000);
      yield* advance(60_001); // the third child runs past stableAfterMs before it exits
      yield* Fiber.join(third);
      t.match(restarts[2], { code: 3, ranForMs: 60_001, restartInMs: 500 }, "after a healthy run the backoff starts over");
      yield* Fiber.interrupt(fiber);
    }),
  );
});
