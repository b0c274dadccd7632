// The shared test stack's keeper (shared-stack.ts): started detached by the first test file that
// asks for the stack, it starts the stack, writes where it is, and ends it (every process, its
// NATS store) when the process whose pid it was given (the run's owner) is gone.
//   node dist/test/harness/shared-stack-daemon.js DIR OWNER_PID
import { renameSync, rmSync, writeFileSync } from "node:fs";
import { failedFile, readyFile, sharedStackOptions, type SharedStackAddress } from "./shared-stack.js";
import { launchStack } from "./stack.js";

const [dir, ownerPidText] = process.argv.slice(2);
const ownerPid = Number(ownerPidText);
if (!dir || !Number.isInteger(ownerPid)) {
  process.stderr.write("usage: shared-stack-daemon DIR OWNER_PID\n");
  process.exit(2);
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
};

const stops: Array<() => Promise<unknown>> = [];
let ending: Promise<never> | undefined;
/** Ends every process of the stack and removes its directory, then exits; later calls wait for the first. */
function end(code: number): Promise<never> {
  ending ??= (async () => {
    await Promise.allSettled(stops.map((stop) => stop()));
    rmSync(dir, { recursive: true, force: true });
    process.exit(code);
  })();
  return ending;
}

// Checked from the start: an owner that ends while the stack starts ends it too.
setInterval(() => {
  if (!alive(ownerPid)) void end(0);
}, 500);
for (const signal of ["SIGTERM", "SIGINT"] as const) process.on(signal, () => void end(0));

try {
  const options = sharedStackOptions();
  const stack = await launchStack(options, (stop) => stops.push(stop));
  const address: SharedStackAddress = {
    natsUrl: stack.nats.url,
    natsStoreDir: stack.nats.storeDir,
    gatewayUrl: stack.gateway.url,
    gatewayPort: stack.gateway.port,
    adminAddr: stack.actors.adminAddr,
    catalogPath: options.env!.TRIBUTARY_CATALOG!,
  };
  writeFileSync(readyFile(dir) + ".tmp", JSON.stringify(address));
  renameSync(readyFile(dir) + ".tmp", readyFile(dir));
  process.stderr.write(`shared test stack ready: ${JSON.stringify(address)}\n`);
  for (const p of [stack.nats, stack.actors, ...stack.runners, stack.gateway, ...stack.sandboxHosts])
    void p.exited.then((code) => {
      if (ending === undefined) process.stderr.write(`a process of the shared test stack exited (${code}): the files after it will fail\n`);
    });
} catch (err) {
  writeFileSync(failedFile(dir), err instanceof Error ? (err.stack ?? err.message) : String(err));
  await end(1);
}
