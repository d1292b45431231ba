// The sqs-consumer contender of the sqsonce comparison benchmark
// (scripts/bench): sqs-consumer with a handler that does nothing, or waits
// --work milliseconds per message.
//
// Usage: node consumer.mjs --endpoint URL --queue-url URL --expect N
//          [--instances 2] [--batch-size 10] [--mode batch|message] [--wait 20]
//          [--work 0]
//
// sqs-consumer has no concurrency option: a Consumer receives one batch
// (batchSize, at most 10), runs the handler for it, deletes it and only
// then polls again. --instances runs several Consumers on one client to
// handle more messages at once. --mode batch uses handleMessageBatch (one
// DeleteMessageBatch per batch); --mode message uses handleMessage (one
// DeleteMessage per message, handlers of a batch run concurrently). With
// --work W each message waits W ms (a timer): in batch mode the messages
// of a batch wait at the same time, so a batch takes about W, the same
// work per message as in message mode.
//
// It stops once --expect deliveries are deleted (or at SIGTERM) and prints
// one JSON line with the same fields as the Go contenders' report.

import { SQSClient } from "@aws-sdk/client-sqs";
import { Consumer } from "sqs-consumer";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    endpoint: { type: "string", default: process.env.SQSONCE_TEST_SQS_ENDPOINT ?? "" },
    "queue-url": { type: "string" },
    expect: { type: "string", default: "0" },
    instances: { type: "string", default: "2" },
    "batch-size": { type: "string", default: "10" },
    mode: { type: "string", default: "batch" },
    wait: { type: "string", default: "20" },
    work: { type: "string", default: "0" },
  },
});

const endpoint = new URL(args.endpoint);
if (endpoint.protocol !== "http:" || !["127.0.0.1", "localhost", "[::1]"].includes(endpoint.hostname)) {
  console.error(`sqs-consumer: --endpoint ${args.endpoint}: want http on a loopback address`);
  process.exit(2);
}
const queueUrl = args["queue-url"];
const expect = Number(args.expect);
const instances = Number(args.instances);
const batchSize = Number(args["batch-size"]);
const waitTimeSeconds = Number(args.wait);
const workMs = Number(args.work);
if (!queueUrl || !(instances >= 1) || !(batchSize >= 1 && batchSize <= 10) || !["batch", "message"].includes(args.mode) || !(workMs >= 0)) {
  console.error("sqs-consumer: bad arguments");
  process.exit(2);
}

const work = () => new Promise((resolve) => setTimeout(resolve, workMs));

const nowNs = () => Math.round((performance.timeOrigin + performance.now()) * 1e6);
const nowMs = () => performance.timeOrigin + performance.now();

const sqs = new SQSClient({
  region: "us-east-1",
  endpoint: args.endpoint,
  credentials: { accessKeyId: "bench", secretAccessKey: "bench" },
  // The local server's queue URLs name a host that does not resolve.
  useQueueUrlAsEndpoint: false,
});

// Count the SQS requests by action, as the Go contenders do.
const requests = {};
const send = sqs.send.bind(sqs);
sqs.send = (command, ...rest) => {
  const action = command.constructor.name.replace(/Command$/, "");
  requests[action] = (requests[action] ?? 0) + 1;
  return send(command, ...rest);
};

let processed = 0;
let startNs = 0;
let firstNs = 0;
let lastNs = 0;
const latencies = [];
let finished = false;

function quantile(sorted, q) {
  if (sorted.length === 0) return 0;
  const i = Math.ceil(q * sorted.length) - 1;
  return sorted[Math.min(Math.max(i, 0), sorted.length - 1)];
}

const consumers = [];

function finish() {
  if (finished) return;
  finished = true;
  for (const c of consumers) c.stop({ abort: true });
  latencies.sort((a, b) => a - b);
  const report = {
    contender: "sqs-consumer",
    processed,
    start_ns: startNs,
    first_ns: firstNs,
    last_ns: lastNs,
    lat_p50_ms: quantile(latencies, 0.5),
    lat_p99_ms: quantile(latencies, 0.99),
    lat_count: latencies.length,
    requests,
  };
  process.stdout.write(JSON.stringify(report) + "\n", () => process.exit(0));
}

function onProcessed(message) {
  const ns = nowNs();
  if (firstNs === 0) firstNs = ns;
  lastNs = ns;
  processed++;
  try {
    const sent = JSON.parse(message.Body).sent;
    if (typeof sent === "number") latencies.push(ns / 1e6 - sent);
  } catch {
    // no "sent" field: no latency for it
  }
  if (expect > 0 && processed >= expect) finish();
}

for (let i = 0; i < instances; i++) {
  const options = {
    queueUrl,
    sqs,
    batchSize,
    waitTimeSeconds,
    pollingWaitTimeMs: 0,
  };
  if (args.mode === "batch") {
    options.handleMessageBatch =
      workMs > 0
        ? async (messages) => {
            await Promise.all(messages.map(work)); // each message's work, at the same time
            return messages;
          }
        : async (messages) => messages; // no-op: acknowledge all
  } else {
    options.handleMessage =
      workMs > 0
        ? async (message) => {
            await work();
            return message;
          }
        : async (message) => message; // no-op: acknowledge
  }
  const c = Consumer.create(options);
  c.on("message_processed", onProcessed);
  c.on("error", (err) => {
    if (!finished) console.error("sqs-consumer: error:", err.message);
  });
  c.on("processing_error", (err) => console.error("sqs-consumer: processing error:", err.message));
  consumers.push(c);
}

process.on("SIGTERM", finish);
process.on("SIGINT", finish);

startNs = nowNs();
for (const c of consumers) c.start();
