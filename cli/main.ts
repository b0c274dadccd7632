#!/usr/bin/env node
// The tributary command line.
//   tributary start      the whole stack on this machine (see README.md)
//   tributary admin ...  organizations, projects, API keys, invitations (cli/admin.ts)
// Each command loads only what it runs: `tributary --help` or `tributary admin` must not pay for
// the stack launcher and its dependencies.

const usage = `usage: tributary <command>

commands:
  start     run the whole stack on this machine (embedded nats-server, actor host, runners, gateway)
  admin     manage organizations, projects, API keys and invitations (tributary admin --help)
  sandbox   sandbox shell SANDBOX_ID: a terminal in a sandbox (tributary sandbox --help)
  deploy    deploy [DIR]: pack, upload and deploy the hosted app whose tributary.yaml is in DIR or a parent
  gateway   run one gateway process (HTTP/SSE edge), as in a cluster
  runner    run one runner process (the models in TRIBUTARY_RUNNER_MODELS, else all)
  actors    run one platform actor host
  nats-auth-k8s  print k8s/nats-auth.yaml (the NATS users and permissions of a cluster)
  sandbox-host  run one sandbox host (bubblewrap sandboxes on this machine)
`;

/** The single-process commands: each module starts its process when imported. */
const processes: Record<string, string> = {
  gateway: "../gateway/main.js",
  runner: "../runners/main.js",
  actors: "../actors/main.js",
  "sandbox-host": "../sandbox-host/main.js",
};

async function main(argv: string[]): Promise<number> {
  const [command] = argv;
  if (command && Object.hasOwn(processes, command)) {
    await import(processes[command]!);
    return new Promise<number>(() => {}); // the process runs until its own shutdown exits it
  }
  switch (command) {
    case "start": {
      const [{ Cause, Effect, Exit, Fiber }, { createLogger }, { startStack }, { terminal }] = await Promise.all([
        import("effect"), import("../lib/log.js"), import("./start.js"), import("./terminal.js"),
      ]);
      const log = createLogger("cli");
      const fiber = Effect.runFork(Effect.scoped(startStack()));
      let signals = 0;
      // Said on stdout, like the start report: whatever the log level, the person who pressed
      // Ctrl-C sees what it does.
      const stop = () => {
        if (++signals > 1) {
          terminal.print("Second Ctrl-C: exiting now, without draining.\n");
          process.exit(130);
        }
        terminal.close();
        terminal.print("\nStopping: draining the gateway's streams, then runners, then nats-server (Ctrl-C again to exit at once)...\n");
        Effect.runFork(Fiber.interrupt(fiber));
      };
      process.on("SIGINT", stop);
      process.on("SIGTERM", stop);
      const exit = await Effect.runPromise(Fiber.await(fiber));
      if (Exit.isFailure(exit) && !Exit.hasInterrupts(exit)) {
        const err = Cause.squash(exit.cause);
        log.error("start failed", { err: err instanceof Error ? `${err.name}: ${err.message}` : String(err) });
        return 1;
      }
      return 0;
    }
    case "nats-auth-k8s": {
      const { k8sNatsAuthManifest } = await import("./k8s-nats-auth.js");
      process.stdout.write(k8sNatsAuthManifest());
      return 0;
    }
    case "sandbox": {
      const { runSandbox } = await import("./sandbox.js");
      return runSandbox(argv.slice(1));
    }
    case "deploy": {
      const { runDeploy } = await import("./deploy.js");
      return runDeploy(argv.slice(1));
    }
    case "admin": {
      const { runAdmin } = await import("./admin.js");
      return runAdmin(argv.slice(1));
    }
    default:
      process.stderr.write(usage);
      return command === undefined || command === "help" || command === "--help" ? 0 : 2;
  }
}

main(process.argv.slice(2)).then((code) => process.exit(code));
