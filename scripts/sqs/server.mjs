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
// manages the server: the server then shuts down once that process is gone
// and ignores SIGINT (see serve in scripts/lib/server.mjs).
//
// fauxqs' own startFauxqs() always binds 0.0.0.0; this script builds the same
// Fastify app with buildApp() and binds it to the loopback interface instead.

import { buildApp } from "fauxqs";

import { HOST, intFromEnv, serve } from "../lib/server.mjs";

serve("fauxqs", "SQSONCE_SQS_PARENT_PID", async () => {
  const port = intFromEnv("FAUXQS_PORT", 0, 65535);
  const app = buildApp({ logger: false });
  await app.listen({ port, host: HOST });
  const addr = app.server.address();
  return {
    port: typeof addr === "object" && addr !== null ? addr.port : port,
    close: () => app.close(),
  };
});
