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
// messages too; the group stays locked for other receives while any of
// them is in flight, as before.
//
// And messages of a group that come back (their visibility timeout ran out,
// or was set to 0) take their place in the group again, as in SQS, where a
// group's order is the order its messages entered the queue. fauxqs puts
// each one back at the head of its group as it comes, which reverses
// messages that were in flight together (with one message per group in
// flight, as fauxqs has it, that could not happen). keepFIFOOrder below
// numbers each message as it enters a queue and sorts a group by that
// number after messages came back to it.

import { buildApp } from "fauxqs";
import { SqsQueue } from "./node_modules/fauxqs/dist/sqs/sqsStore.js";

fifoLikeSQS(SqsQueue);
keepFIFOOrder(SqsQueue);

// fifoLikeSQS wraps dequeueFifo, which takes at most one message per
// unlocked group per call: it calls it again while the receive has room,
// letting each call see the groups that this receive locked (and only
// those) as unlocked, so that their next messages follow in order.
function fifoLikeSQS(Queue) {
  const dequeueOne = Queue.prototype.dequeueFifo;
  if (typeof dequeueOne !== "function") {
    throw new Error("fauxqs has no SqsQueue.dequeueFifo: the FIFO receive patch does not fit this version");
  }
  Queue.prototype.dequeueFifo = function (maxCount, visibilityTimeoutOverride, dlqResolver) {
    const want = Math.min(maxCount, 10);
    const lockedBefore = new Set(this.fifoLockedGroups.keys());
    const out = [];
    for (;;) {
      const mine = new Map();
      for (const [group, n] of this.fifoLockedGroups) {
        if (!lockedBefore.has(group)) {
          mine.set(group, n);
        }
      }
      for (const group of mine.keys()) {
        this.fifoLockedGroups.delete(group);
      }
      const got = dequeueOne.call(this, want - out.length, visibilityTimeoutOverride, dlqResolver);
      for (const [group, n] of mine) {
        this.fifoLockedGroups.set(group, (this.fifoLockedGroups.get(group) ?? 0) + n);
      }
      out.push(...got);
      if (got.length === 0 || out.length >= want) {
        return out;
      }
    }
  };
}

// keepFIFOOrder numbers every message as it enters a queue (a send, or a
// move to a dead-letter queue: enqueue) and wraps the two methods that put
// in-flight messages back into their groups (changeVisibility,
// processTimers) so that each group is in that order again afterwards.
function keepFIFOOrder(Queue) {
  const { enqueue, changeVisibility, processTimers } = Queue.prototype;
  if ([enqueue, changeVisibility, processTimers].some((f) => typeof f !== "function")) {
    throw new Error("fauxqs has no SqsQueue.enqueue, changeVisibility or processTimers: the FIFO order patch does not fit this version");
  }
  const entered = new WeakMap(); // message -> its number in its queue
  let next = 0;
  const sortGroups = (queue) => {
    for (const msgs of queue.fifoMessages.values()) {
      for (let i = 1; i < msgs.length; i++) {
        if ((entered.get(msgs[i - 1]) ?? 0) > (entered.get(msgs[i]) ?? 0)) {
          msgs.sort((a, b) => (entered.get(a) ?? 0) - (entered.get(b) ?? 0));
          break;
        }
      }
    }
  };
  Queue.prototype.enqueue = function (msg) {
    entered.set(msg, ++next);
    return enqueue.call(this, msg);
  };
  Queue.prototype.changeVisibility = function (...args) {
    const out = changeVisibility.apply(this, args);
    if (this.isFifo()) {
      sortGroups(this);
    }
    return out;
  };
  Queue.prototype.processTimers = function (...args) {
    const out = processTimers.apply(this, args);
    if (this.isFifo()) {
      sortGroups(this);
    }
    return out;
  };
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
