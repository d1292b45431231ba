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
// process that manages the server: the server then shuts down once that
// process is gone and ignores SIGINT (see serve in scripts/lib/server.mjs).
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

import { HOST, intFromEnv, serve } from "../lib/server.mjs";

serve("dynalite", "SQSONCE_DYNALITE_PARENT_PID", async () => {
  const port = intFromEnv("DYNALITE_PORT", 0, 65535);
  const tableMs = intFromEnv("DYNALITE_TABLE_MS", 50, 60000);
  const server = dynalite({ createTableMs: tableMs, deleteTableMs: tableMs, updateTableMs: tableMs });
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, HOST, resolve);
  });
  const addr = server.address();
  return {
    port: typeof addr === "object" && addr !== null ? addr.port : port,
    close: () =>
      new Promise((resolve, reject) => {
        // Keep-alive connections would hold close() open until they idle out.
        server.closeAllConnections?.();
        server.close((err) => (err ? reject(err) : resolve()));
      }),
  };
});
