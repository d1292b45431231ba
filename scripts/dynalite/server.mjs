// Local DynamoDB-compatible server for the sqsonce test suite.
//
// Starts dynalite (an implementation of the DynamoDB API on LevelDB, here
// kept in memory) on 127.0.0.1 only. The port comes from DYNALITE_PORT
// (default 0: the kernel picks a free port).
//
// When the server is ready, exactly one line is written to stdout:
//
//   listening http://127.0.0.1:PORT
//
// SIGTERM and SIGINT close the server and exit with status 0.
//
// SQSONCE_DYNALITE_PARENT_PID (set by scripts/with-dynalite.sh) names the
// process that manages the server. The server then shuts down once that
// process is gone, so a killed test runner cannot leave it behind, and it
// ignores SIGINT: a Ctrl-C in the terminal reaches the whole process group,
// and the server must outlive the interrupted tests' clean-up; the parent
// stops it with SIGTERM.
//
// Tables stay CREATING, DELETING or UPDATING for DYNALITE_TABLE_MS
// milliseconds (default 50; dynalite's own default is 500), so that code
// waiting for a table to become active is exercised without slowing the
// tests down.
//
// What dynalite does not do, and the tests must not assume: transactions,
// TTL deletion (UpdateTimeToLive is an unknown operation; DescribeTimeToLive
// answers DISABLED), ReturnValuesOnConditionCheckFailure (ignored).

import dynalite from "dynalite";

const HOST = "127.0.0.1";

function parseInt(name, raw, fallback, max) {
  if (raw === undefined || raw === "") {
    return fallback;
  }
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > max) {
    throw new Error(`${name} must be an integer in [0, ${max}], got ${JSON.stringify(raw)}`);
  }
  return n;
}

async function main() {
  const port = parseInt("DYNALITE_PORT", process.env.DYNALITE_PORT, 0, 65535);
  const tableMs = parseInt("DYNALITE_TABLE_MS", process.env.DYNALITE_TABLE_MS, 50, 60000);
  const server = dynalite({ createTableMs: tableMs, deleteTableMs: tableMs, updateTableMs: tableMs });
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, HOST, resolve);
  });
  const addr = server.address();
  const boundPort = typeof addr === "object" && addr !== null ? addr.port : port;

  let stopping = false;
  function stop(reason) {
    if (stopping) {
      return;
    }
    stopping = true;
    // Never hang on shutdown: force the exit if close() takes too long.
    setTimeout(() => {
      process.stderr.write(`dynalite: forced exit after ${reason}\n`);
      process.exit(1);
    }, 5000).unref();
    // Keep-alive connections would hold close() open until they idle out.
    server.closeAllConnections?.();
    server.close((err) => {
      if (err) {
        process.stderr.write(`dynalite: close failed: ${err?.stack ?? err}\n`);
        process.exit(1);
      }
      process.exit(0);
    });
  }

  const parent = Number(process.env.SQSONCE_DYNALITE_PARENT_PID ?? "");
  const managed = Number.isInteger(parent) && parent > 1;

  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => {
    if (!managed) {
      stop("SIGINT");
    }
  });

  if (managed) {
    setInterval(() => {
      try {
        process.kill(parent, 0);
      } catch (err) {
        if (err?.code === "ESRCH") {
          stop(`parent ${parent} exited`);
        }
      }
    }, 1000).unref();
  }

  process.stdout.write(`listening http://${HOST}:${boundPort}\n`);
}

main().catch((err) => {
  process.stderr.write(`dynalite: failed to start: ${err?.stack ?? err}\n`);
  process.exit(1);
});
