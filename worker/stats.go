package worker

import (
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Stats counts what a Worker did since it was created.
type Stats struct {
	Received            int64 // messages received (deliveries)
	Claimed             int64 // operations claimed to run (attempts started)
	Completed           int64 // operations recorded complete
	Duplicates          int64 // deliveries of completed operations, deleted unrun
	RedeliveredFailed   int64 // deliveries of permanently failed operations, dead-lettered unrun
	InProgressElsewhere int64 // deliveries left because another claim held the operation
	Retried             int64 // attempts that failed and were left for a retry
	FailedPermanently   int64 // attempts that failed permanently
	DeadLettered        int64 // messages moved to the dead-letter queue
	Keyless             int64 // messages without a usable operation key
	Conflicts           int64 // keys seen again with a different payload
	Unreadable          int64 // messages whose operation's ledger record could not be read, dead-lettered
	GivenBack           int64 // messages given back unstarted (FIFO order, shutdown): their claims released, visible at once
	Takeovers           int64 // claims taken over after a lapsed lease
	LeaseLost           int64 // attempts cut off because another claim took over
	CompleteFailed      int64 // work done but the completion could not be recorded
	Deleted             int64 // messages deleted
	DeleteFailed        int64 // deletes that failed (the message will come back as a duplicate)
	Heartbeats          int64 // visibility and lease extensions, one per message kept by a beat
	GroupWaited         int64 // FIFO messages received behind another of their group, that waited for it to settle
	GroupWaitBeats      int64 // beats that kept FIFO messages waiting behind another of their group
	StaleReclaimed      int64 // claims of this process that it was not working on (their failure or release unrecorded), released and claimed again
	ReceiptLost         int64 // FIFO messages not started because SQS no longer took their receipt handle (their visibility lapsed while they waited)
	ClaimFailures       int64 // batches whose claims the ledger could not record (given back)
	PayloadsRead        int64 // payloads read from S3 (pointer messages)
	PayloadsRetried     int64 // pointer messages whose payload could not be read for now (a timeout, throttling, S3's 5xx): left for a retry
	PayloadsRejected    int64 // pointer messages whose payload cannot be read (malformed pointer, object gone, access denied, too large): dead-lettered
	ObjectsDeleted      int64 // payload objects deleted after their message (Config.DeleteObjects)
	ObjectDeleteFailed  int64 // payload objects whose delete failed: left in S3
	FlowPauses          int64 // pauses of the intake this worker found (an outage of the handlers' downstream)
	Probes              int64 // probes run while paused
	ProbesFailed        int64 // probes that found the downstream still down
	Throttled           int64 // messages held for a rate or concurrency limit, each once per attempt (no attempt counted)
	Deferred            int64 // messages sent again with a delay, the original deleted, rather than held or dead-lettered
	FlowWouldPause      int64 // pauses that observe mode found and did not make
	FlowWouldHold       int64 // messages that observe mode would have held
}

// counters are the atomics behind Stats: one for each field of Stats, in
// the same order, named as the field with a lower-case first letter.
type counters struct {
	received, claimed, completed, duplicates, redeliveredFailed, inProgressElsewhere, retried,
	failedPermanently, deadLettered, keyless, conflicts, unreadable, givenBack, takeovers,
	leaseLost, completeFailed, deleted, deleteFailed, heartbeats, groupWaited, groupWaitBeats, staleReclaimed, receiptLost,
	claimFailures, payloadsRead, payloadsRetried, payloadsRejected, objectsDeleted, objectDeleteFailed,
	flowPauses, probes, probesFailed, throttled, deferred, flowWouldPause, flowWouldHold atomic.Int64
}

// Stats returns the worker's counters. Safe to call at any time.
func (w *Worker) Stats() Stats {
	var s Stats
	out, c := reflect.ValueOf(&s).Elem(), reflect.ValueOf(&w.stats).Elem()
	for i := range out.NumField() {
		out.Field(i).SetInt((*atomic.Int64)(unsafe.Pointer(c.Field(i).UnsafeAddr())).Load())
	}
	return s
}

// wordStart finds the upper-case letters that start a word of a field
// name but the first.
var wordStart = regexp.MustCompile(`\B[A-Z]`)

// logAttrs returns s as log attributes in the order of its fields, each
// named as its field in snake case: "in_progress_elsewhere".
func (s Stats) logAttrs() []any {
	v := reflect.ValueOf(s)
	attrs := make([]any, 0, 2*v.NumField())
	for i := range v.NumField() {
		attrs = append(attrs, strings.ToLower(wordStart.ReplaceAllString(v.Type().Field(i).Name, "_$0")), v.Field(i).Int())
	}
	return attrs
}
