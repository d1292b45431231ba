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
// them is in flight, as before. And since several messages of a group may
// now come back at once (visibility 0, or their visibility timeout ends),
// it puts them back in their order: fauxqs puts each one back at the head
// of its group, which would reverse them.

import { buildApp } from "fauxqs";
import { SqsQueue } from "./node_modules/fauxqs/dist/sqs/sqsStore.js";

fifoLikeSQS(SqsQueue);

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
    this.processTimers(); // what came back unlocks its group first
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

  const changeVisibility = Queue.prototype.changeVisibility;
  const processTimers = Queue.prototype.processTimers;
  if (typeof changeVisibility !== "function" || typeof processTimers !== "function") {
    throw new Error("fauxqs has no SqsQueue.changeVisibility or processTimers: the FIFO patch does not fit this version");
  }
  Queue.prototype.changeVisibility = function (receiptHandle, timeoutSeconds) {
    const entry = this.inflightMessages.get(receiptHandle);
    changeVisibility.call(this, receiptHandle, timeoutSeconds);
    if (this.isFifo() && entry?.message.messageGroupId) {
      inSequence(this.fifoMessages.get(entry.message.messageGroupId));
    }
  };
  Queue.prototype.processTimers = function () {
    processTimers.call(this);
    if (this.isFifo()) {
      for (const group of this.fifoMessages.values()) {
        inSequence(group);
      }
    }
  };
}

// inSequence sorts a group's waiting messages by their sequence numbers
// (zero-padded decimal strings), unless they are in order already.
function inSequence(group) {
  if (!group) {
    return;
  }
  for (let i = 1; i < group.length; i++) {
    if (group[i - 1].sequenceNumber > group[i].sequenceNumber) {
      group.sort((a, b) => (a.sequenceNumber < b.sequenceNumber ? -1 : a.sequenceNumber > b.sequenceNumber ? 1 : 0));
      return;
    }
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
