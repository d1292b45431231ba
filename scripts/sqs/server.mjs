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
// fauxqs 1.9.2 differs from AWS where sqsonce's proofs depend on it; the
// functions below make it behave as AWS documents and as localstack's
// AWS-validated tests record it (tests/aws/services/sqs/test_sqs.py and
// its snapshot), each named for the behaviour it gives:
//
//   - fifoReceiveUpToFirstInFlight: a FIFO receive takes as many messages
//     of one group as it can, in order, up to the group's first message
//     still in flight, each once (fauxqs: one message per group, and none
//     from a group with any message in flight);
//   - fifoReturnsInOrder: messages of a group that become visible again
//     keep their order (fauxqs: each went back to the group's head);
//   - fifoReceiptHandlesExpire: a FIFO receipt handle is refused once its
//     visibility timeout has lapsed (fauxqs took it until a receive put
//     the message back);
//   - visibilityAtMostTwelveHoursFromReceive: a message's visibility
//     cannot be extended past 12 hours from the receive that took it
//     (fauxqs took 43,200 s at any time).
//
// A refusal of one of these answers DeleteMessage or
// ChangeMessageVisibility with an error and fails the entry alone in
// their batch forms (see refuse).

import { AsyncLocalStorage } from "node:async_hooks";
import { buildApp } from "fauxqs";
import { SqsError } from "./node_modules/fauxqs/dist/common/errors.js";
import { SqsRouter } from "./node_modules/fauxqs/dist/sqs/sqsRouter.js";
import { SqsQueue } from "./node_modules/fauxqs/dist/sqs/sqsStore.js";
import { VALID_BATCH_ENTRY_ID } from "./node_modules/fauxqs/dist/sqs/sqsTypes.js";
import { HOST, intFromEnv, serve } from "../lib/server.mjs";

// fifoReceiveUpToFirstInFlight makes a FIFO receive (dequeueFifo) take
// messages as AWS does:
//
//   - group by group: "When receiving messages from a FIFO queue with
//     multiple message group IDs, Amazon SQS first attempts to return as
//     many messages with the same message group ID as possible" (SQS
//     Developer Guide, FIFO queue delivery logic);
//   - a group's visible messages in order, up to its first message still
//     in flight: recorded, foo, bar and baz received together and only bar
//     extended, a receive returns [foo]; only baz extended, [foo, bar]; the
//     head given back while the second is in flight, the head again
//     (test_fifo_group_visibility_extends_with_change_message_visibility,
//     test_fifo_message_group_visibility_after_terminate_visibility_timeout);
//   - a head moved to the dead-letter queue by the redrive policy leaves
//     the group held at its first message in flight all the same;
//   - each message once, also with a VisibilityTimeout of 0, after which
//     the messages are visible to the next receive
//     (test_fifo_receive_message_with_zero_visibility_timeout).
//
// fauxqs' dequeueFifo takes at most one message of each group not in
// fifoLockedGroups (its count of a group's messages in flight) per call.
// The receive calls it for one message at a time with every group but one
// locked. The messages it took stay in flight while it runs (each call
// first puts back what has become visible: with a VisibilityTimeout of 0,
// the message just taken); their visibility is set once it is done, and
// fifoLockedGroups from the messages in flight. A group's messages after
// one in flight are also what hasAvailableFifoMessages, which wakes long
// polls, does not count.
function fifoReceiveUpToFirstInFlight(Queue) {
  const dequeueOne = Queue.prototype.dequeueFifo;
  if (typeof dequeueOne !== "function" || typeof Queue.prototype.hasAvailableFifoMessages !== "function") {
    throw new Error("fauxqs has no SqsQueue.dequeueFifo or hasAvailableFifoMessages: the FIFO receive patch does not fit this version");
  }
  Queue.prototype.dequeueFifo = function (maxCount, visibilityTimeoutOverride, dlqResolver) {
    const want = Math.min(maxCount, 10);
    const seconds = visibilityTimeoutOverride ?? parseInt(this.attributes.VisibilityTimeout);
    this.processTimers();
    const start = Date.now();
    const firstInFlight = firstInFlightOfGroups(this);
    const out = [];
    try {
      for (const group of [...this.fifoMessages.keys()]) {
        while (out.length < want && headIsFree(this, group, firstInFlight)) {
          const others = [...this.fifoMessages.keys()].filter((g) => g !== group);
          this.fifoLockedGroups = new Map(others.map((g) => [g, 1]));
          const head = this.fifoMessages.get(group)[0];
          const got = headOnly(this, group, () => dequeueOne.call(this, 1, RECEIVE_HOLD_SECONDS, dlqResolver));
          out.push(...got);
          if (got.length === 0 && this.fifoMessages.get(group)?.[0] === head) {
            break; // nothing taken, nothing moved
          }
        }
      }
    } finally {
      for (const m of out) {
        const entry = this.inflightMessages.get(m.ReceiptHandle);
        if (entry !== undefined) {
          entry.visibilityDeadline = start + seconds * 1000;
        }
      }
      this.fifoLockedGroups = countInFlight(this);
    }
    return out;
  };
  Queue.prototype.hasAvailableFifoMessages = function () {
    const firstInFlight = firstInFlightOfGroups(this);
    return [...this.fifoMessages.keys()].some((group) => headIsFree(this, group, firstInFlight));
  };
}

// headOnly runs take with only the head of a FIFO group visible to it:
// fauxqs' dequeueFifo, having moved a message to the dead-letter queue,
// takes the next one of its group, which may come after a message in
// flight. The rest of the group is put back behind what is left, in the
// order of arrival, and the group keeps its place among the groups.
function headOnly(queue, group, take) {
  const groups = [...queue.fifoMessages.keys()];
  const rest = queue.fifoMessages.get(group).splice(1);
  try {
    return take();
  } finally {
    const msgs = [...(queue.fifoMessages.get(group) ?? []), ...rest].sort((a, b) => arrivalOf(a) - arrivalOf(b));
    const next = new Map();
    for (const g of [...groups, ...queue.fifoMessages.keys()]) {
      const m = g === group ? msgs : queue.fifoMessages.get(g);
      if (m !== undefined && m.length > 0 && !next.has(g)) {
        next.set(g, m);
      }
    }
    queue.fifoMessages = next;
  }
}

// RECEIVE_HOLD_SECONDS is the visibility timeout of a message while the
// receive that took it runs: long enough to outlast it.
const RECEIVE_HOLD_SECONDS = 3600;

// firstInFlightOfGroups returns the arrival (see arrivalOf) of the first
// message in flight of each FIFO group that has one.
function firstInFlightOfGroups(queue) {
  const first = new Map();
  for (const entry of queue.inflightMessages.values()) {
    const group = entry.message.messageGroupId ?? "__default";
    const a = arrivalOf(entry.message);
    if (!(first.get(group) < a)) {
      first.set(group, a);
    }
  }
  return first;
}

// headIsFree reports whether the first visible message of a group may be
// received: it arrived before the group's first message in flight, if any.
function headIsFree(queue, group, firstInFlight) {
  const head = queue.fifoMessages.get(group)?.[0];
  return head !== undefined && !(firstInFlight.get(group) < arrivalOf(head));
}

// countInFlight returns, as fauxqs' fifoLockedGroups, the number of
// messages in flight of each FIFO group.
function countInFlight(queue) {
  const counts = new Map();
  for (const entry of queue.inflightMessages.values()) {
    const group = entry.message.messageGroupId ?? "__default";
    counts.set(group, (counts.get(group) ?? 0) + 1);
  }
  return counts;
}

// arrivals numbers every message as a queue takes it (enqueue: a send, or
// a move to a dead-letter queue); see fifoReturnsInOrder.
const arrivals = new WeakMap();
let arrived = 0;

// arrivalOf returns the number of a message's arrival in its queue.
function arrivalOf(msg) {
  return arrivals.get(msg) ?? 0;
}

// fifoReturnsInOrder keeps a FIFO group's messages in the order they
// arrived when they become visible again (a visibility timeout that runs
// out, or ChangeMessageVisibility to 0): fauxqs puts each such message back
// at the front of its group, one at a time, which turns several of them,
// in flight together, round (a receiver killed with G1, G2, G3 in hand
// would see G3, G2, G1 next). It numbers every message as the queue takes
// it (enqueue) and, after each of the two calls that put in-flight
// messages back (changeVisibility and processTimers), sorts a FIFO
// queue's groups by that number where they are out of order.
function fifoReturnsInOrder(Queue) {
  for (const name of ["enqueue", "changeVisibility", "processTimers"]) {
    if (typeof Queue.prototype[name] !== "function") {
      throw new Error(`fauxqs has no SqsQueue.${name}: the FIFO return patch does not fit this version`);
    }
  }
  const order = (a, b) => arrivalOf(a) - arrivalOf(b);
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
    arrivals.set(msg, ++arrived);
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

// fifoReceiptHandlesExpire refuses a FIFO queue's receipt handle once its
// message's visibility timeout has lapsed, whether or not the message was
// received again: recorded, a FIFO message received with a 1 s visibility
// timeout and deleted a second later, "Value <receipt-handle:1> for
// parameter ReceiptHandle is invalid. Reason: The receipt handle has
// expired." (Code InvalidParameterValue;
// test_fifo_delete_after_visibility_timeout); "any attempt to change the
// visibility timeout or to delete that message ... after you initially
// change the visibility timeout ... might result in an error" (API
// Reference, ChangeMessageVisibility). A handle given back with visibility
// 0 has lapsed too. Standard queues take a lapsed handle (recorded:
// test_change_message_visibility_after_visibility_timeout_expiration).
//
// A FIFO handle has lapsed while its deadline has passed and fauxqs has
// not put its message back yet, and once it has (processTimers, or
// changeVisibility to 0): those handles are remembered for the life of the
// queue.
function fifoReceiptHandlesExpire(Queue) {
  for (const name of ["changeVisibility", "processTimers"]) {
    if (typeof Queue.prototype[name] !== "function") {
      throw new Error(`fauxqs has no SqsQueue.${name}: the receipt handle patch does not fit this version`);
    }
  }
  const lapsed = new WeakMap(); // queue → Set of handles put back
  for (const name of ["changeVisibility", "processTimers"]) {
    const putBack = Queue.prototype[name];
    Queue.prototype[name] = function (...args) {
      if (!this.isFifo()) {
        return putBack.apply(this, args);
      }
      const before = [...this.inflightMessages.keys()];
      const result = putBack.apply(this, args);
      for (const handle of before) {
        if (!this.inflightMessages.has(handle)) {
          if (!lapsed.has(this)) {
            lapsed.set(this, new Set());
          }
          lapsed.get(this).add(handle);
        }
      }
      return result;
    };
  }
  const expired = (queue, handle) => {
    if (!queue.isFifo()) {
      return false;
    }
    const entry = queue.inflightMessages.get(handle);
    return entry !== undefined ? entry.visibilityDeadline <= Date.now() : lapsed.get(queue)?.has(handle) === true;
  };
  const refusal = (queue, { ReceiptHandle: handle }) =>
    expired(queue, handle) ? invalidParameter(`Value ${handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.`) : undefined;
  refuse("DeleteMessage", refusal);
  refuse("ChangeMessageVisibility", refusal);
}

// visibilityAtMostTwelveHoursFromReceive refuses to extend a message's
// visibility past 12 hours from the ReceiveMessage request that took it:
// "The maximum visibility timeout is 12 hours from the time that Amazon SQS
// receives the ReceiveMessage request. Extending the visibility timeout
// does not reset the 12 hour maximum. ... if you receive a message and
// immediately set the 12 hour maximum by sending a ChangeMessageVisibility
// call with VisibilityTimeout equal to 43,200 seconds, it will likely
// fail" (SQS Developer Guide, "Processing messages in a timely manner").
// The refusal is AWS's, as reported in localstack/localstack#3956:
// InvalidParameterValue, "Value 43200 for parameter VisibilityTimeout is
// invalid. Reason: Total VisibilityTimeout for the message is beyond the
// limit [43200 seconds]". A value outside 0 to 43,200 is left to fauxqs,
// which refuses it.
//
// Each message in flight (its inflightMessages entry) is stamped with the
// time its ReceiveMessage request arrived, carried from the action's
// handler to dequeue through an AsyncLocalStorage: a long poll takes its
// messages after it arrived.
function visibilityAtMostTwelveHoursFromReceive(Queue) {
  const dequeue = Queue.prototype.dequeue;
  if (typeof dequeue !== "function") {
    throw new Error("fauxqs has no SqsQueue.dequeue: the visibility limit patch does not fit this version");
  }
  const requested = new AsyncLocalStorage();
  const receivedAt = new WeakMap(); // inflightMessages entry → ms
  Queue.prototype.dequeue = function (...args) {
    const at = requested.getStore() ?? Date.now();
    const out = dequeue.apply(this, args);
    for (const m of out) {
      const entry = this.inflightMessages.get(m.ReceiptHandle);
      if (entry !== undefined) {
        receivedAt.set(entry, at);
      }
    }
    return out;
  };
  wrapAction("ReceiveMessage", (handler) => (body, store, request) => requested.run(Date.now(), () => handler(body, store, request)));
  const max = 43200;
  refuse("ChangeMessageVisibility", (queue, { ReceiptHandle: handle, VisibilityTimeout: seconds }) => {
    const entry = queue.inflightMessages.get(handle);
    const at = entry === undefined ? undefined : receivedAt.get(entry);
    if (at === undefined || !(seconds >= 0 && seconds <= max) || Date.now() + seconds * 1000 <= at + max * 1000) {
      return undefined;
    }
    return invalidParameter(`Value ${seconds} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [${max} seconds]`);
  });
}

// invalidParameter returns SQS's InvalidParameterValue error with message:
// recorded, Code InvalidParameterValue (x-amzn-query-error) and
// QueryErrorCode InvalidParameterValueException (__type).
function invalidParameter(message) {
  const err = new SqsError("InvalidParameterValueException", message, 400, true, "InvalidParameterValue");
  // fauxqs prefixes every query code with AWS.SimpleQueueService.; SQS
  // does not for this one.
  Object.defineProperty(err, "queryErrorHeader", { value: "InvalidParameterValue;Sender" });
  return err;
}

// refusals holds, by action, the checks that refuse a request of it (see
// refuse), and wrappers the functions that wrap its handler (see
// wrapAction); patchActions applies them.
const refusals = new Map();
const wrappers = new Map();

// wrapAction makes fauxqs register wrap(handler) as the handler of action.
function wrapAction(action, wrap) {
  wrappers.set(action, [...(wrappers.get(action) ?? []), wrap]);
}

// refuse makes fauxqs refuse a request of action (DeleteMessage or
// ChangeMessageVisibility) for which refusal(queue, request) returns an
// error, with that error; and an entry of its batch form for which
// refusal(queue, entry) does, failing that entry alone with the error's
// code and message (SenderFault true), as SQS answers a batch per entry.
// The other entries go to fauxqs; a batch that fauxqs refuses as a whole
// (no entries, more than ten, bad or repeated ids) goes to it unchanged.
function refuse(action, refusal) {
  for (const name of [action, action + "Batch"]) {
    if (!refusals.has(name)) {
      refusals.set(name, []);
    }
  }
  refusals.get(action).push(refusal);
  refusals.get(action + "Batch").push(refusal);
}

// patchActions makes fauxqs' SQS router register each action's handler
// behind the refusals and the wrappers of that action.
function patchActions(Router) {
  const register = Router.prototype.register;
  if (typeof register !== "function") {
    throw new Error("fauxqs has no SqsRouter.register: the action patches do not fit this version");
  }
  Router.prototype.register = function (action, handler) {
    for (const wrap of wrappers.get(action) ?? []) {
      handler = wrap(handler);
    }
    const checks = refusals.get(action);
    if (checks === undefined) {
      return register.call(this, action, handler);
    }
    const refusalOf = (queue, req) => {
      for (const check of checks) {
        const err = check(queue, req);
        if (err !== undefined) {
          return err;
        }
      }
      return undefined;
    };
    const patched = action.endsWith("Batch")
      ? async (body, store, request) => {
          const queue = store.getQueue(body.QueueUrl);
          const entries = Array.isArray(body.Entries) ? body.Entries : [];
          const ids = entries.map((e) => e.Id);
          if (queue === undefined || entries.length === 0 || entries.length > 10 ||
              new Set(ids).size !== ids.length || !ids.every((id) => VALID_BATCH_ENTRY_ID.test(id))) {
            return handler(body, store, request);
          }
          const refused = entries.map((e) => refusalOf(queue, e));
          const rest = entries.filter((_, i) => refused[i] === undefined);
          const out = rest.length > 0 ? await handler({ ...body, Entries: rest }, store, request) : { Successful: [], Failed: [] };
          entries.forEach((e, i) => {
            if (refused[i] !== undefined) {
              out.Failed.push({ Id: e.Id, SenderFault: true, Code: refused[i].queryCode, Message: refused[i].message });
            }
          });
          return out;
        }
      : async (body, store, request) => {
          const queue = store.getQueue(body.QueueUrl);
          const err = queue !== undefined && body.ReceiptHandle ? refusalOf(queue, body) : undefined;
          if (err !== undefined) {
            throw err;
          }
          return handler(body, store, request);
        };
    return register.call(this, action, patched);
  };
}

fifoReceiveUpToFirstInFlight(SqsQueue);
fifoReturnsInOrder(SqsQueue);
fifoReceiptHandlesExpire(SqsQueue);
visibilityAtMostTwelveHoursFromReceive(SqsQueue);
patchActions(SqsRouter);

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
