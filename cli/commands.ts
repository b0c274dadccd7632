// The tributary command line's commands (cli/main.ts runs them).
//   tributary start      the whole stack on this machine (see README.md)
//   tributary sandbox|jobs|secrets|apps|deploy ...  clients of a gateway (cli/gateway-client.ts)
//   tributary admin ...  organizations, projects, API keys, invitations (cli/admin.ts)
// Every command parses its arguments with cli/args.ts. Each command loads only what it runs:
// `tributary --help` or `tributary admin` must not pay for the stack launcher and its dependencies.

const usage = `usage: tributary <command> [options]

Run a stack:
  start          the whole stack on this machine (embedded nats-server, actor host, runners, sandbox host,
                 gateway); --model GGUF serves one model file, --port N, --host ADDRESS, --catalog FILE

Use it (the local stack's gateway, or the one --url or TRIBUTARY_URL names):
  sandbox        create, list, exec, shell, stop, rm: sandboxes of the key's project
  jobs           create, list, logs, cancel: commands run to completion in a fresh sandbox
  secrets        set, list, rm: the project's secrets (values are read hidden, never shown)
  apps           list, logs, stop: hosted app deployments
  deploy [DIR]   pack, upload and deploy the hosted app whose tributary.yaml is in DIR or a parent

Operate:
  admin          organizations, projects, API keys and invitations (the admin service)
  gateway        run one gateway process (HTTP/SSE edge), as in a cluster
  runner         run one runner process (the models in TRIBUTARY_RUNNER_MODELS, else all)
  actors         run one platform actor host
  sandbox-host   run one sandbox host (bubblewrap sandboxes on this machine)
  nats-auth-k8s  print k8s/nats-auth.yaml (the NATS users and permissions of a cluster)

tributary <command> --help shows a command's options.
`;

/** The single-process commands: each module starts its process when imported, so their flags are checked first. */
const processes: Record<string, { module: string; what: string }> = {
  gateway: { module: "../gateway/main.js", what: "Runs one gateway process (the HTTP/SSE edge), as in a cluster." },
  runner: { module: "../runners/main.js", what: "Runs one runner process: the models in TRIBUTARY_RUNNER_MODELS, else every catalog model." },
  actors: { module: "../actors/main.js", what: "Runs one platform actor host." },
  "sandbox-host": { module: "../sandbox-host/main.js", what: "Runs one sandbox host (bubblewrap sandboxes and hosted app instances on this machine)." },
};

/** The commands that take no options (nor arguments): `--help`, or anything else is a usage error. */
async function noOptions(command: string, argv: string[], text: string): Promise<void> {
  const { parseCommand } = await import("./args.js");
  parseCommand(argv, { name: `tributary ${command}`, usage: `usage: tributary ${command}\n\n${text}\n`, options: {} });
}

/** Where a command's own messages go (the process's streams; a test's in process). */
export interface Output {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
}

/**
 * Runs the command `argv` names: its exit code, or it throws what cli/args.ts's exitCodeOf turns
 * into one (bad input, --help, an API's refusal). A process command (gateway, runner, ...) never
 * returns: its process runs until its own shutdown exits it.
 */
export async function runCommand(argv: string[], out: Output = process): Promise<number> {
  const [command, ...rest] = argv;
  if (command && Object.hasOwn(processes, command)) {
    const { module, what } = processes[command]!;
    await noOptions(command, rest, `${what}\nIt takes no options: every setting is an environment variable (docs/configuration.md).`);
    await import(module);
    return new Promise<number>(() => {}); // the process runs until its own shutdown exits it
  }
  switch (command) {
    case "start": {
      // The flags are checked before anything starts: --help or a bad flag starts nothing.
      const options = (await import("./start-options.js")).parseStartOptions(rest);
      const [{ Cause, Effect, Exit, Fiber }, { createLogger }, { startStack }, { terminal }] = await Promise.all([
        import("effect"), import("../lib/log.js"), import("./start.js"), import("./terminal.js"),
      ]);
      const log = createLogger("cli");
      const fiber = Effect.runFork(Effect.scoped(startStack(options)));
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
      await noOptions(command, rest, "Prints k8s/nats-auth.yaml: the NATS users and permissions of a cluster.");
      const { k8sNatsAuthManifest } = await import("./k8s-nats-auth.js");
      out.stdout.write(k8sNatsAuthManifest());
      return 0;
    }
    case "sandbox":
      return (await import("./sandbox.js")).runSandbox(rest);
    case "jobs":
      return (await import("./jobs.js")).runJobs(rest);
    case "secrets":
      return (await import("./secrets.js")).runSecrets(rest);
    case "apps":
      return (await import("./apps.js")).runApps(rest);
    case "deploy":
      return (await import("./deploy.js")).runDeploy(rest);
    case "admin":
      return (await import("./admin.js")).runAdmin(rest);
    case "help":
    case "--help":
    case "-h":
      out.stdout.write(usage);
      return 0;
    case undefined:
      out.stderr.write(usage);
      return 2;
    default:
      out.stderr.write(`tributary: unknown command '${command}'\n\n${usage}`);
      return 2;
  }
}

