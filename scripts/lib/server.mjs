// What scripts/sqs/server.mjs and scripts/dynalite/server.mjs have in
// common: each runs a local server for the sqsonce test suite, bound to
// 127.0.0.1 only, under the control of scripts/lib/server.sh. It imports
// nothing but Node itself, so that both servers, installed as separate npm
// packages, can import it by its path.

export const HOST = "127.0.0.1";

// intFromEnv returns the integer in the environment variable name, or
// fallback when it is unset or empty; it throws unless the value is an
// integer in [0, max].
export function intFromEnv(name, fallback, max) {
  const raw = process.env[name];
  if (raw === undefined || raw === "") {
    return fallback;
  }
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > max) {
    throw new Error(`${name} must be an integer in [0, ${max}], got ${JSON.stringify(raw)}`);
  }
  return n;
}

// serve runs the server that start starts. start() resolves to { port,
// close } once the server listens on HOST (port is the port it bound), and
// close() resolves once the server is closed. name prefixes messages on
// stderr.
//
// When the server is ready, exactly one line is written to stdout:
//
//   listening http://127.0.0.1:PORT
//
// SIGTERM and SIGINT close the server and exit with status 0; a close that
// fails or takes more than 5 s exits with status 1, and so does a failed
// start.
//
// The environment variable parentVar (set by scripts/lib/server.sh) may
// name the process that manages the server. The server then shuts down once
// that process is gone, so a killed test runner cannot leave it behind, and
// it ignores SIGINT: a Ctrl-C in the terminal reaches the whole process
// group, and the server must outlive the interrupted tests' clean-up; the
// parent stops it with SIGTERM.
export function serve(name, parentVar, start) {
  run(name, parentVar, start).catch((err) => {
    process.stderr.write(`${name}: failed to start: ${err?.stack ?? err}\n`);
    process.exit(1);
  });
}

async function run(name, parentVar, start) {
  const { port, close } = await start();

  let stopping = false;
  async function stop(reason) {
    if (stopping) {
      return;
    }
    stopping = true;
    // Never hang on shutdown: force the exit if close() takes too long.
    setTimeout(() => {
      process.stderr.write(`${name}: forced exit after ${reason}\n`);
      process.exit(1);
    }, 5000).unref();
    try {
      await close();
    } catch (err) {
      process.stderr.write(`${name}: close failed: ${err?.stack ?? err}\n`);
      process.exit(1);
    }
    process.exit(0);
  }

  const parent = Number(process.env[parentVar] ?? "");
  const managed = Number.isInteger(parent) && parent > 1;

  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => {
    if (!managed) {
      void stop("SIGINT");
    }
  });

  if (managed) {
    setInterval(() => {
      try {
        process.kill(parent, 0);
      } catch (err) {
        if (err?.code === "ESRCH") {
          void stop(`parent ${parent} exited`);
        }
      }
    }, 1000).unref();
  }

  process.stdout.write(`listening http://${HOST}:${port}\n`);
}
