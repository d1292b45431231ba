// Local SQS-compatible server for the sqsonce test suite.
//
// Starts fauxqs (an in-memory SQS emulator speaking the AWS JSON protocol)
// on 127.0.0.1 only, with request logging off. The port comes from
// FAUXQS_PORT (default 0: the kernel picks a free port).
//
// When the server is ready, exactly one line is written to stdout:
//
//   listening http://127.0.0.1:PORT
//
// SIGTERM and SIGINT close the server (pending long polls are released) and
// exit with status 0.
//
// SQSONCE_SQS_PARENT_PID (set by scripts/with-sqs.sh) names the process that
// manages the server. The server then shuts down once that process is gone,
// so a killed test runner cannot leave it behind, and it ignores SIGINT: a
// Ctrl-C in the terminal reaches the whole process group, and the server must
// outlive the interrupted tests' clean-up; the parent stops it with SIGTERM.
//
// fauxqs' own startFauxqs() always binds 0.0.0.0; this script builds the same
// Fastify app with buildApp() and binds it to the loopback interface instead.

import { buildApp } from "fauxqs";

const HOST = "127.0.0.1";

function parsePort(raw) {
  if (raw === undefined || raw === "") {
    return 0;
  }
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`FAUXQS_PORT must be an integer in [0, 65535], got ${JSON.stringify(raw)}`);
  }
  return port;
}

async function main() {
  const port = parsePort(process.env.FAUXQS_PORT);
  const app = buildApp({ logger: false });
  await app.listen({ port, host: HOST });
  const addr = app.server.address();
  const boundPort = typeof addr === "object" && addr !== null ? addr.port : port;

  let stopping = false;
  async function stop(reason) {
    if (stopping) {
      return;
    }
    stopping = true;
    // Never hang on shutdown: force the exit if close() takes too long.
    setTimeout(() => {
      process.stderr.write(`fauxqs: forced exit after ${reason}\n`);
      process.exit(1);
    }, 5000).unref();
    try {
      await app.close();
    } catch (err) {
      process.stderr.write(`fauxqs: close failed: ${err?.stack ?? err}\n`);
      process.exit(1);
    }
    process.exit(0);
  }

  const parent = Number(process.env.SQSONCE_SQS_PARENT_PID ?? "");
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

  process.stdout.write(`listening http://${HOST}:${boundPort}\n`);
}

main().catch((err) => {
  process.stderr.write(`fauxqs: failed to start: ${err?.stack ?? err}\n`);
  process.exit(1);
});
