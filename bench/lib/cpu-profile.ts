// Preloaded into a process under a benchmark (`NODE_OPTIONS=--import <this file>`; Node 20
// refuses --cpu-prof in NODE_OPTIONS): the first SIGUSR2 starts V8's CPU profiler, the next one
// writes the profile (Chrome DevTools' .cpuprofile format) into TRIBUTARY_BENCH_PROFILE_DIR, so
// a profile covers the load and nothing of the start-up.
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector";
import { join } from "node:path";

const dir = process.env.TRIBUTARY_BENCH_PROFILE_DIR;
if (dir) {
  const session = new Session();
  session.connect();
  session.post("Profiler.enable");
  session.post("Profiler.setSamplingInterval", { interval: 250 });
  let running = false;
  let count = 0;
  process.on("SIGUSR2", () => {
    if (!running) {
      running = true;
      session.post("Profiler.start");
      return;
    }
    running = false;
    session.post("Profiler.stop", (err, result) => {
      if (!err) writeFileSync(join(dir, `${process.pid}-${++count}.cpuprofile`), JSON.stringify(result.profile));
    });
  });
}
