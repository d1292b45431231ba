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
//
// FIFO receives return what SQS returns: up to ten messages of one group in
// one receive, in order, behind each other (AWS: "Amazon SQS FIFO queues
// ... messages ... in the same message group ID are returned in order";
// a receive may return several of one group). fauxqs 1.9.2 returns only a
// group's head and locks the group until it is settled, which would hide
// every case of a message that waits behind another of its group in a
// worker's hands. fifoLikeSQS below makes one receive take a group's next
// messages too, each once, also with a VisibilityTimeout of 0; the group
// stays locked for other receives while any of them is in flight, as
// before.
//
// A group's messages also come back in order when their visibility ends
// (a visibility timeout that runs out, or ChangeMessageVisibility to 0):
// fauxqs puts each such message back at the front of its group, one at a
// time, which turns several of them, in flight together, round (a receiver
// killed with G1, G2, G3 in hand would see G3, G2, G1 next).
// fifoReturnsInOrder below puts them back in the order they arrived.

import { buildApp } from "fauxqs";
import { SqsQueue } from "./node_modules/fauxqs/dist/sqs/sqsStore.js";

fifoLikeSQS(SqsQueue);
fifoReturnsInOrder(SqsQueue);

// fifoLikeSQS wraps dequeueFifo, which takes at most one message per
// unlocked group per call: it calls it again while the receive has room,
// letting each call see the groups that this receive locked (and only
// those) as unlocked, so that their next messages follow in order.
//
// The messages of one receive stay in flight while it lasts, whatever its
// visibility timeout: each call first puts back what has become visible,
// and with a VisibilityTimeout of 0 that would be the message just taken,
// taken again by the next call (ten times the same message). The receive's
// own visibility is set once it is done; with 0 its messages are visible
// again to the next receive, as on AWS. fauxqs' count of the messages in
// flight of each group (fifoLockedGroups) is then set from the messages in
// flight themselves.
function fifoLikeSQS(Queue) {
  const dequeueOne = Queue.prototype.dequeueFifo;
  if (typeof dequeueOne !== "function") {
    throw new Error("fauxqs has no SqsQueue.dequeueFifo: the FIFO receive patch does not fit this version");
  }
  Queue.prototype.dequeueFifo = function (maxCount, visibilityTimeoutOverride, dlqResolver) {
    const want = Math.min(maxCount, 10);
    const seconds = visibilityTimeoutOverride ?? parseInt(this.attributes.VisibilityTimeout);
    this.processTimers(); // what came back unlocks its group first
    const start = Date.now();
    const mine = new Set(); // receipt handles of this receive
    const out = [];
    try {
      while (out.length < want) {
        this.fifoLockedGroups = groupsInFlight(this, mine);
        const got = dequeueOne.call(this, want - out.length, RECEIVE_HOLD_SECONDS, dlqResolver);
        if (got.length === 0) {
          break;
        }
        for (const m of got) {
          mine.add(m.ReceiptHandle);
        }
        out.push(...got);
      }
    } finally {
      for (const handle of mine) {
        const entry = this.inflightMessages.get(handle);
        if (entry !== undefined) {
          entry.visibilityDeadline = start + seconds * 1000;
        }
      }
      this.fifoLockedGroups = groupsInFlight(this, new Set());
    }
    return out;
  };
}

// RECEIVE_HOLD_SECONDS is the visibility timeout of a message while the
// receive that took it runs: long enough to outlast it.
const RECEIVE_HOLD_SECONDS = 3600;

// groupsInFlight returns, as fauxqs' fifoLockedGroups, the number of
// messages in flight of each FIFO group, leaving out the receipt handles
// in except.
function groupsInFlight(queue, except) {
  const counts = new Map();
  for (const [handle, entry] of queue.inflightMessages) {
    if (except.has(handle)) {
      continue;
    }
    const group = entry.message.messageGroupId ?? "__default";
    counts.set(group, (counts.get(group) ?? 0) + 1);
  }
  return counts;
}

// fifoReturnsInOrder numbers every message as a queue takes it (enqueue:
// a send, or a move to a dead-letter queue) and, after each of the two
// calls that put in-flight messages back (changeVisibility and
// processTimers), sorts a FIFO queue's groups by that number where they
// are out of order.
function fifoReturnsInOrder(Queue) {
  for (const name of ["enqueue", "changeVisibility", "processTimers"]) {
    if (typeof Queue.prototype[name] !== "function") {
      throw new Error(`fauxqs has no SqsQueue.${name}: the FIFO return patch does not fit this version`);
    }
  }
  const arrival = new WeakMap();
  let arrivals = 0;
  const order = (a, b) => (arrival.get(a) ?? 0) - (arrival.get(b) ?? 0);
  const sortGroups = (queue) => {
    if (!queue.isFifo()) {
      return;
    }
    for (const msgs of queue.fifoMessages.values()) {
      if (msgs.some((m, i) => i > 0 && order(msgs[i - 1], m) > 0)) {
        msgs.sort(order);
      }
    }
  };

  const enqueue = Queue.prototype.enqueue;
  Queue.prototype.enqueue = function (msg, ...rest) {
    arrival.set(msg, ++arrivals);
    return enqueue.call(this, msg, ...rest);
  };
  for (const name of ["changeVisibility", "processTimers"]) {
    const putBack = Queue.prototype[name];
    Queue.prototype[name] = function (...args) {
      const result = putBack.apply(this, args);
      sortGroups(this);
      return result;
    };
  }
}

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
