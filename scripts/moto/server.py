"""Local AWS server for the sqsonce test suite: moto, a second implementation.

Runs moto's server (Python moto 5.x, `pip install "moto[server]"`), which
serves SQS, SNS, S3 and DynamoDB on one port, on 127.0.0.1 only, with
request logging off. The port comes from SQSONCE_MOTO_PORT (default 0: the
kernel picks a free port, so two servers never race for one).

When the server is ready, exactly one line is written to stdout:

  listening http://127.0.0.1:PORT

SIGTERM and SIGINT stop the server and exit with status 0.

SQSONCE_MOTO_PARENT_PID (set by scripts/with-moto.sh) names the process
that manages the server: the server then shuts down once that process is
gone, so a killed test runner cannot leave it behind, and it ignores
SIGINT, so that it outlives the clean-up of tests interrupted with Ctrl-C
(the parent stops it with SIGTERM). This is what scripts/lib/server.mjs
does for the Node servers.

It serves the application the moto_server command serves, through the
same werkzeug server; unlike moto_server it binds port 0 and reports the
port it got.

DynamoDB requests are handled one at a time. moto checks a conditional
write's condition and then writes, and two requests in two threads can
interleave between the two: both conditions hold, both writes happen.
DynamoDB documents single writes as atomic ("Individual write operations
such as UpdateItem are atomic and always operate on the most recent
version of the item, regardless of concurrency", Developer Guide, "Best
practices for handling concurrent updates"), and the shared ledger's
claims rely on exactly that; serialising the requests gives moto
that property, so that the tests neither rely on the difference nor are
weakened for it. SQS, SNS and S3 requests run concurrently as before (an
SQS long poll would otherwise hold up every other request).

A FIFO receive takes messages as AWS does (fifo_receive_up_to_first_in_flight):
group by group ("When receiving messages from a FIFO queue with multiple
message group IDs, Amazon SQS first attempts to return as many messages
with the same message group ID as possible", SQS Developer Guide, FIFO
queue delivery logic), each group's visible messages in order up to its
first message still in flight (recorded by localstack's AWS-validated
tests: foo, bar and baz received together and only bar extended, a
receive returns [foo]; only baz extended, [foo, bar]; the head given back
while the second is in flight, the head again). moto walks the visible
messages in the order sent, skipping every group with a message pending
(received and not yet seen visible again by a receive), which holds a
whole group while any of its messages is in flight, and also while one
whose visibility timeout has passed has not been received again.

A message in flight holds its group's later messages for every receive.
moto decides what a ReceiveMessage may take once, when it begins, and
runs receives side by side with nothing between them: a long poll that
began while a group was free takes the group's next message although
another receive took the one before it in the meantime, and two receives
can take one group's messages at the same moment; SQS delivers no
message of a group behind one in flight (same page).
receive_passes_one_at_a_time makes a receive a loop
of single passes over the queue (moto's own receive without waiting), each
pass deciding afresh and none running beside another, and waits between
passes, woken by a send, for at most 100 ms (a visibility timeout that
ends wakes nothing).

A FIFO queue drops a send whose deduplication id it accepted in the last
five minutes, also when that message has been received and deleted since
(SQS: "Amazon SQS continues tracking the deduplication ID even after the
message has been received and deleted"); moto compares only with the
messages the queue still holds. fifo_dedup_outlives_delete keeps every
accepted id for the five minutes. (The answer to a dropped send keeps
moto's new MessageId: SQS documents none.)

A FIFO queue's receipt handle expires when its message's visibility
timeout lapses, whether or not the message was received again: deleting
with it, or changing the visibility with it, is refused with
InvalidParameterValue, "Value <receipt-handle:1> for parameter
ReceiptHandle is invalid. Reason: The receipt handle has expired."
(recorded by localstack's AWS-validated
test_fifo_delete_after_visibility_timeout); moto honours every handle a
message ever had. fifo_receipt_handles_expire refuses them. A standard
queue takes a lapsed handle (recorded).

On a standard queue a receipt handle from an earlier receive of a
message received again since deletes nothing and succeeds ("If you use an
old ReceiptHandle, the request will succeed, but the message might not be
deleted", API Reference, DeleteMessage); moto deletes the message.
stale_handle_deletes_nothing keeps it, as fauxqs does: the case a consumer
must survive.

A message's visibility can be extended to at most 12 hours from the
receive that took it ("The maximum visibility timeout is 12 hours from the
time that Amazon SQS receives the ReceiveMessage request. Extending the
visibility timeout does not reset the 12 hour maximum", SQS Developer
Guide, "Processing messages in a timely manner"); moto counts the 12 hours
from the send. visibility_at_most_twelve_hours_from_receive counts them
from the latest receive.

A batch call fails per entry: SQS answers an entry refused for its
parameters in the entry's result, as moto does for an invalid receipt
handle, but moto fails the whole DeleteMessageBatch or
ChangeMessageVisibilityBatch call for any other refusal (such as the
expired handle above). batches_fail_per_entry makes every refusal of an
entry fail that entry alone.

moto's Queue.delete_message builds a new list of the queue's messages
without the one deleted and then puts it in place of the old, holding no
lock, while a send appends to the list under the queue's lock: a message
sent between the two is lost (three of 6,000 messages sent by two threads
while four received and deleted), and a message a receive moves to the
dead-letter queue in between stays in the queue too. SQS loses no
message it accepted. queue_changes_hold_the_lock makes a delete, and a
receive's pass, hold the queue's lock.

moto's SQS reads the clock through datetime arithmetic, twice for every
message of a queue each time it counts the queue's messages, which it does
for every message sent and every message delivered: seconds per
ReceiveMessage on a queue of a thousand messages. sqs_clock_from_time
makes its clock reads time.time(), the same wall clock without the
arithmetic; no behaviour changes.
"""

import logging
import os
import signal
import sys
import threading
import time

HOST = "127.0.0.1"
NAME = "moto"


def int_from_env(name, fallback, maximum):
    raw = os.environ.get(name, "")
    if raw == "":
        return fallback
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0 or n > maximum:
        raise SystemExit(f"{NAME}: {name} must be an integer in [0, {maximum}], got {raw!r}")
    return n


def one_dynamodb_request_at_a_time(app):
    """Wraps the WSGI application app so that DynamoDB requests (those with
    an X-Amz-Target of DynamoDB_*) run one at a time, their response
    included; other requests pass through."""
    lock = threading.Lock()

    def serve(environ, start_response):
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            return app(environ, start_response)
        with lock:
            body = app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()

    return serve


def sqs_clock_from_time(models):
    """Makes unix_time() and unix_time_millis() of moto's SQS models module
    (called without a datetime) read time.time(); with a datetime they do
    as before."""
    for name, scale in (("unix_time", 1.0), ("unix_time_millis", 1000.0)):
        original = getattr(models, name, None)
        if not callable(original):
            raise SystemExit(f"{NAME}: moto.sqs.models has no {name}: the clock patch does not fit this version")

        def read(dt=None, original=original, scale=scale):
            return time.time() * scale if dt is None else original(dt)

        setattr(models, name, read)


def fifo_receive_up_to_first_in_flight(queue_class):
    """Makes what moto's receive walks for a FIFO queue (Queue.messages,
    otherwise the messages visible now, in the order sent) its messages
    group by group, in the order of each group's first message, each
    group's visible messages in order up to its first message in flight;
    and leaves no group for the receive to skip as a whole
    (pending_message_groups). ApproximateNumberOfMessages still counts
    every visible message."""
    for name in ("messages", "pending_message_groups", "approximate_number_of_messages"):
        if not isinstance(getattr(queue_class, name, None), property):
            raise SystemExit(f"{NAME}: moto's SQS Queue has no property {name}: the FIFO patch does not fit this version")
    visible_now = queue_class.messages.fget

    def receivable(self):
        if not self.fifo_queue:
            return visible_now(self)
        groups = {}  # a group's receivable messages; dicts keep the order of insertion
        held = set()
        # list() copies the list at once: another request may change it.
        for m in list(self._messages):
            if not m.visible:
                held.add(m.group_id)
            elif not m.delayed and m.group_id not in held:
                groups.setdefault(m.group_id, []).append(m)
        return [m for msgs in groups.values() for m in msgs]

    def visible_count(self):
        return sum(1 for m in list(self._messages) if m.visible and not m.delayed)

    setattr(queue_class, "messages", property(receivable))
    setattr(queue_class, "pending_message_groups", property(lambda self: set()))
    setattr(queue_class, "approximate_number_of_messages", property(visible_count))


def receive_passes_one_at_a_time(backend_class):
    """Replaces moto's SQSBackend.receive_message by a loop of passes of the
    original with no wait, one pass at a time across all receives, waiting
    between passes (without holding the lock) until a message arrives, 100 ms
    pass, or the receive's WaitTimeSeconds ends."""
    original = getattr(backend_class, "receive_message", None)
    if not callable(original):
        raise SystemExit(f"{NAME}: moto's SQSBackend has no receive_message: the receive patch does not fit this version")
    one_pass = threading.Lock()

    def receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None):
        queue = self.get_queue(queue_name)
        arrived = getattr(queue, "_messages_lock", None)
        if arrived is None:
            raise RuntimeError("moto's SQS Queue has no _messages_lock: the receive patch does not fit this version")
        deadline = time.monotonic() + float(wait_seconds_timeout or 0)
        while True:
            with one_pass:
                got = original(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            left = deadline - time.monotonic()
            if got or left <= 0:
                return got
            with arrived:
                arrived.wait(timeout=min(left, 0.1))

    setattr(backend_class, "receive_message", receive_message)


def queue_changes_hold_the_lock(models):
    """Makes moto's Queue.delete_message hold the queue's lock (the one
    add_message appends under) while it replaces the queue's list of
    messages, and a pass of SQSBackend.receive_message hold it while it may
    move messages to the dead-letter queue."""
    queue_class, backend_class = models.Queue, models.SQSBackend
    for cls, name in ((queue_class, "delete_message"), (backend_class, "receive_message")):
        if not callable(getattr(cls, name, None)):
            raise SystemExit(f"{NAME}: moto's SQS has no {cls.__name__}.{name}: the queue lock patch does not fit this version")
    delete, receive = queue_class.delete_message, backend_class.receive_message

    def locked(queue):
        lock = getattr(queue, "_messages_lock", None)
        if lock is None:
            raise RuntimeError("moto's SQS Queue has no _messages_lock: the queue lock patch does not fit this version")
        return lock

    def delete_message(self, receipt_handle):
        with locked(self):
            return delete(self, receipt_handle)

    def receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None):
        if wait_seconds_timeout:
            raise RuntimeError("the queue lock patch holds the lock for one pass without waiting: apply it before receive_passes_one_at_a_time")
        with locked(self.get_queue(queue_name)):
            return receive(self, queue_name, count, 0, visibility_timeout, message_attribute_names)

    setattr(queue_class, "delete_message", delete_message)
    setattr(backend_class, "receive_message", receive_message)


def visibility_at_most_twelve_hours_from_receive(models):
    """Replaces SQSBackend.change_message_visibility by moto's own with the
    12-hour limit counted from the message's latest receive (which
    Message.mark_received now records) instead of its send."""
    from moto.sqs.exceptions import InvalidParameterValue, ReceiptHandleIsInvalid

    backend_class, message_class = models.SQSBackend, models.Message
    for cls, name in ((backend_class, "change_message_visibility"), (message_class, "mark_received"), (message_class, "change_visibility")):
        if not callable(getattr(cls, name, None)):
            raise SystemExit(f"{NAME}: moto's SQS has no {cls.__name__}.{name}: the visibility limit patch does not fit this version")
    mark_received = message_class.mark_received
    limit_ms = models.MAXIMUM_VISIBILITY_TIMEOUT * 1000

    def received(self, *args, **kwargs):
        self.sqsonce_received_at = models.unix_time_millis()
        return mark_received(self, *args, **kwargs)

    def change_message_visibility(self, queue_name, receipt_handle, visibility_timeout):
        queue = self.get_queue(queue_name)
        # list() copies the list at once: another request may change it.
        for message in list(queue._messages):
            if not message.had_receipt_handle(receipt_handle):
                continue
            received_at = getattr(message, "sqsonce_received_at", message.sent_timestamp)
            if models.unix_time_millis() + int(visibility_timeout) * 1000 - received_at > limit_ms:
                raise InvalidParameterValue(
                    f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
                    f"VisibilityTimeout for the message is beyond the limit [{models.MAXIMUM_VISIBILITY_TIMEOUT} seconds]"
                )
            message.change_visibility(visibility_timeout)
            if message.visible and message in queue.pending_messages:
                queue.pending_messages.discard(message)
            return
        raise ReceiptHandleIsInvalid()

    setattr(message_class, "mark_received", received)
    setattr(backend_class, "change_message_visibility", change_message_visibility)


def fifo_receipt_handles_expire(models):
    """Makes SQSBackend.delete_message and change_message_visibility (which
    their batch forms call) refuse a FIFO queue's receipt handle that is
    not its message's newest, or whose visibility timeout has ended."""
    from moto.sqs.exceptions import InvalidParameterValue

    backend_class = models.SQSBackend
    for name in ("delete_message", "change_message_visibility"):
        if not callable(getattr(backend_class, name, None)):
            raise SystemExit(f"{NAME}: moto's SQSBackend has no {name}: the receipt handle patch does not fit this version")

    def expired(queue, receipt_handle):
        if not queue.fifo_queue:
            return False
        # list() copies the list at once: another request may change it.
        for m in list(queue._messages):
            if m.had_receipt_handle(receipt_handle):
                return receipt_handle != m.receipt_handle or models.unix_time_millis() >= m.visible_at
        return False

    for name in ("delete_message", "change_message_visibility"):
        original = getattr(backend_class, name)

        def checked(self, queue_name, receipt_handle, *args, original=original, **kwargs):
            if expired(self.get_queue(queue_name), receipt_handle):
                raise InvalidParameterValue(
                    f"Value {receipt_handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
                )
            return original(self, queue_name, receipt_handle, *args, **kwargs)

        setattr(backend_class, name, checked)


def stale_handle_deletes_nothing(models):
    """Makes SQSBackend.delete_message (which DeleteMessageBatch calls)
    answer a standard queue's receipt handle that is not its message's
    newest with success, deleting nothing."""
    backend_class = models.SQSBackend
    original = getattr(backend_class, "delete_message", None)
    if not callable(original):
        raise SystemExit(f"{NAME}: moto's SQSBackend has no delete_message: the stale handle patch does not fit this version")

    def delete_message(self, queue_name, receipt_handle):
        queue = self.get_queue(queue_name)
        if not queue.fifo_queue:
            # list() copies the list at once: another request may change it.
            for m in list(queue._messages):
                if m.had_receipt_handle(receipt_handle) and receipt_handle != m.receipt_handle:
                    return None
        return original(self, queue_name, receipt_handle)

    setattr(backend_class, "delete_message", delete_message)


def batches_fail_per_entry(models):
    """Makes SQSBackend.delete_message_batch and
    change_message_visibility_batch answer an entry that moto refuses with
    an SQS error (other than the queue's absence) by failing that entry
    alone, with the error's code and message, SenderFault true."""
    from moto.sqs.exceptions import SQSException

    backend_class = models.SQSBackend
    for name in ("delete_message_batch", "change_message_visibility_batch"):
        original = getattr(backend_class, name, None)
        if not callable(original):
            raise SystemExit(f"{NAME}: moto's SQSBackend has no {name}: the batch patch does not fit this version")

        def per_entry(self, queue_name, entries, original=original):
            self.get_queue(queue_name)  # a missing queue fails the call
            successful, failed = [], []
            for entry in entries:
                try:
                    done, refused = original(self, queue_name, [entry])
                except SQSException as err:
                    failed.append({"Id": entry["Id"], "SenderFault": True, "Code": err.code, "Message": err.message})
                    continue
                successful += done
                failed += refused
            return successful, failed

        setattr(backend_class, name, per_entry)


def fifo_dedup_outlives_delete(backend_class, queue_class, window):
    """Makes a FIFO queue drop a message sent (SQSBackend.send_message, which
    SendMessageBatch and SNS call too) with a deduplication id that the queue
    accepted less than window seconds before, whatever became of that
    message. Moves to a dead-letter queue, which are not sends, pass as
    before."""
    for cls, name in ((backend_class, "send_message"), (queue_class, "add_message")):
        if not callable(getattr(cls, name, None)):
            raise SystemExit(f"{NAME}: moto's SQS has no {cls.__name__}.{name}: the deduplication patch does not fit this version")
    send = backend_class.send_message
    add = queue_class.add_message
    sending = threading.local()
    lock = threading.Lock()

    def send_message(self, *args, **kwargs):
        sending.active = True
        try:
            return send(self, *args, **kwargs)
        finally:
            sending.active = False

    def add_message(self, message):
        dedup = getattr(message, "deduplication_id", None)
        if not (self.fifo_queue and dedup and getattr(sending, "active", False)):
            return add(self, message)
        with lock:
            accepted = self.__dict__.setdefault("_sqsonce_accepted_dedup_ids", {})
            now = time.monotonic()
            if len(accepted) > 10000:
                for old in [d for d, t in accepted.items() if now - t >= window]:
                    del accepted[old]
            t = accepted.get(dedup)
            if t is not None and now - t < window:
                return None
            accepted[dedup] = now
            return add(self, message)

    setattr(backend_class, "send_message", send_message)
    setattr(queue_class, "add_message", add_message)


def main():
    port = int_from_env("SQSONCE_MOTO_PORT", 0, 65535)
    parent = int_from_env("SQSONCE_MOTO_PARENT_PID", 0, 2**31 - 1)
    managed = parent > 1

    install = f'install it with: {sys.executable} -m pip install "moto[server]>=5,<6"'
    try:
        import moto
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        import moto.sqs.models
        from werkzeug.serving import make_server
    except ImportError as err:
        raise SystemExit(f"{NAME}: cannot import moto's server ({err}); {install}")
    if not moto.__version__.startswith("5."):
        raise SystemExit(f"{NAME}: moto {moto.__version__} is installed, the tests know moto 5.x; {install}")

    # One line per request would fill the log with thousands of lines.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    sqs_clock_from_time(moto.sqs.models)
    fifo_receive_up_to_first_in_flight(moto.sqs.models.Queue)
    # Before receive_passes_one_at_a_time, whose passes (without waiting) it locks.
    queue_changes_hold_the_lock(moto.sqs.models)
    receive_passes_one_at_a_time(moto.sqs.models.SQSBackend)
    fifo_dedup_outlives_delete(moto.sqs.models.SQSBackend, moto.sqs.models.Queue, moto.sqs.models.DEDUPLICATION_TIME_IN_SECONDS)
    # Before the patches that wrap change_message_visibility, which it replaces.
    visibility_at_most_twelve_hours_from_receive(moto.sqs.models)
    fifo_receipt_handles_expire(moto.sqs.models)
    stale_handle_deletes_nothing(moto.sqs.models)
    batches_fail_per_entry(moto.sqs.models)
    app = one_dynamodb_request_at_a_time(DomainDispatcherApplication(create_backend_app))
    server = make_server(HOST, port, app, threaded=True)
    bound = server.server_address[1]
    # moto builds some URLs from MOTO_PORT; make it the port in use.
    os.environ["MOTO_PORT"] = str(bound)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if managed:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGINT, lambda *_: stop.set())

    print(f"listening http://{HOST}:{bound}", flush=True)

    while not stop.wait(1.0):
        if managed:
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                sys.stderr.write(f"{NAME}: parent {parent} exited\n")
                break
            except PermissionError:
                pass

    # Never hang on shutdown: the serving thread is a daemon, so exiting
    # ends it even if the server does not stop in time.
    done = threading.Thread(target=server.shutdown, daemon=True)
    done.start()
    done.join(5.0)
    if done.is_alive():
        sys.stderr.write(f"{NAME}: forced exit after the stop took more than 5 s\n")
        sys.stderr.flush()
        os._exit(1)
    # The state is in memory and nothing is left to write: skip the
    # interpreter's clean-up of moto's many modules, which takes seconds.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
