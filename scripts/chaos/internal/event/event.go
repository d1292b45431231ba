// Package event holds the records that the chaos programs write (the
// worker's events and crash log, the downstream's executions, the worker's
// counters) and the helpers to write and read them. Every record is one
// line of JSON, written with a single write(2) on a file opened with
// O_APPEND, so a line either reaches the page cache whole or not at all: a
// process killed with SIGKILL loses none of the lines it wrote. Files that
// must also survive the machine (the crash log, the downstream's log) are
// fsynced as well.
package event

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/worker"
)

// WorkerConfig is a chaos worker run's configuration, which the campaigns
// hand it as JSON (chaosworker -config).
type WorkerConfig struct {
	Run      int    // this run's number: names its files, sent as X-Chaos-Run
	Endpoint string // the SQS endpoint (loopback)
	Queue    string // the queue's URL
	// Ledger is a bbolt file; else Postgres is the connection string of a
	// shared ledger in Table, each call bounded by LedgerTimeout.
	Ledger, Postgres, Table string
	LedgerTimeout           time.Duration
	LockTimeout             time.Duration // how long to wait for the bbolt file's lock (0: the default)
	// Downstream is the URL the http handler POSTs to; with Tx the
	// handler is a transactional one instead (on Postgres).
	Downstream string
	Tx         *TxConfig
	Dir        string // for the run's event log and counters
	CrashLog   string // shared by all runs
	Seed       uint64 // of the fault injection and of the handler's draws
	Rates      sqstest.Rates
	// The worker's settings.
	Concurrency                       int
	Visibility, HandlerTimeout, Grace time.Duration
	// Broken makes a worker that breaks the promise on purpose (see
	// chaosworker): "delete-first" or "skip-claim".
	Broken string
	// Flow, when set, is the worker's flow control, on the ledger's flow
	// state (fleet-wide on a shared ledger); nil leaves the defaults, in
	// the process alone.
	Flow *worker.FlowConfig
}

// TxConfig is what a chaos worker's transactional handlers do (see
// chaosworker).
type TxConfig struct {
	Effects string // the effects table
	Control string // the campaign's control URL, asked from inside a held transaction
	// HoldShare of the attempts hold their transaction open for Hold after
	// the insert; PanicShare panic after it; WritesShare are made in the
	// Writes form (pgtx.NewWrites), which neither hold nor panic.
	HoldShare, PanicShare, WritesShare float64
	Hold                               time.Duration
}

// Crash windows, as written in the crash log and counted by the campaign.
const (
	// WindowA: the handler succeeded, the completion is not durable yet.
	// The documented duplicate window.
	WindowA = "a"
	// WindowB: the completion is durable, the message not deleted yet.
	WindowB = "b"
)

// Crash is a line of the crash log, written (and fsynced) by a worker just
// before it kills itself with SIGKILL.
type Crash struct {
	Run    int    `json:"run"`
	Window string `json:"window"`
	Key    string `json:"key"`
}

// AttrSend is the message attribute with which the campaigns' sender names
// each message it sends. The worker's dead-letter copies and replay keep
// message attributes, so every copy of a message carries it.
const AttrSend = "ChaosSend"

// Worker event kinds.
const (
	EvReceive  = "receive"  // a receive (Seq) handed out MessageID of operation Key, in Group, tagged Send
	EvClaim    = "claim"    // Ledger.ClaimBatch claimed the operation for Owner (Takeover: over a lapsed lease)
	EvDone     = "done"     // Ledger.ClaimBatch answered that Key's operation is complete
	EvRelease  = "release"  // Ledger.ReleaseBatch released Owner's claim
	EvLost     = "lost"     // Ledger.ExtendBatch said Owner's claim is no longer its own (Err: why)
	EvStart    = "start"    // the handler was called, for the attempt of Owner
	EvHandled  = "handled"  // the handler returned (Err empty: success)
	EvComplete = "complete" // Ledger.Complete returned (Err empty: durable)
	EvFail     = "fail"     // Ledger.Fail returned
	EvSent     = "sent"     // SQS accepted a copy that the worker sent (to the dead-letter queue)
	EvDelete   = "delete"   // a DeleteMessageBatch entry of MessageID (of operation Key) is on its way to SQS
	EvWait     = "wait"     // a wait for a ledger that could not record claims ended (Since: when it began; Err: WaitCutShort or empty)
	// A transactional handler (chaosworker -pgtx) inserted the effect row
	// of an attempt in its transaction, not committed yet (Owner, Seq,
	// Hash, Client).
	EvInsert = "insert"
	// A transactional handler holds its transaction open after the
	// insert, and asks the campaign whether to be killed there; a second
	// one with Err says it went on without the campaign's answer.
	EvInTx = "in-tx"
	// A transactional handler panics after its insert, on purpose, as a
	// handler with a bug would (Owner); its transaction must be rolled
	// back and its connection given back.
	EvPanic = "panic"
)

// WaitCutShort is the Err of an EvWait that ended with the run, not with
// the ledger answering again.
const WaitCutShort = "the run ended while it waited"

// WorkerEvent is a line of a worker run's event log.
type WorkerEvent struct {
	Ev        string `json:"ev"`
	Key       string `json:"key"`
	Attempt   int    `json:"attempt,omitempty"`
	MessageID string `json:"msg,omitempty"`
	Err       string `json:"err,omitempty"`
	// Cause: EvHandled with Err, when the worker stopped the handler: why
	// (its timeout, the end of the grace, a lease taken over).
	Cause string `json:"cause,omitempty"`
	T     int64  `json:"t"` // Unix nanoseconds
	// Since: EvWait, when the wait began (Unix nanoseconds); T is when it
	// ended. EvClaim, when the claim's call was sent: the claim took
	// effect between then and T.
	Since int64 `json:"since,omitempty"`
	// EvSent: the id SQS gave the copy, and the queue it went to.
	// MessageID is then the message copied.
	Copy  string `json:"copy,omitempty"`
	Queue string `json:"queue,omitempty"`
	// Owner: the attempt's claim in the ledger (worker.Message.Owner, the
	// owner token of a claim request), on EvClaim, EvRelease, EvLost, EvStart,
	// EvHandled, EvComplete, EvFail, EvInsert, EvInTx and EvPanic.
	Owner string `json:"owner,omitempty"`
	// Takeover: EvClaim, the claim took the operation over from another
	// whose lease had lapsed.
	Takeover bool `json:"takeover,omitempty"`
	// EvReceive: the message's group and its AttrSend.
	Group string `json:"group,omitempty"`
	Send  string `json:"send,omitempty"`
	// EvInsert: the row's sequence number in its run, the Hash of the
	// payload, and the local address of the
	// transaction's connection (what the campaign's proxy sees as its
	// client).
	Seq    int64  `json:"seq,omitempty"`
	Hash   string `json:"hash,omitempty"`
	Client string `json:"client,omitempty"`
	// Session: EvHandled of a transactional handler that panicked, the
	// state of its transaction's session once the handler had returned
	// (pg_stat_activity.state: "idle" after a rollback, SessionGone when
	// the session had ended, "idle in transaction" when nothing ended
	// the transaction; SessionUnknown and why when it could not be read).
	Session string `json:"session,omitempty"`
}

// BatchClient is the Client of the EvInsert of an attempt in the Writes
// form, which does not see its connection.
const BatchClient = "batch"

// HandlerPanicked begins the Err of an EvHandled whose handler panicked.
const HandlerPanicked = "panicked"

// Session states of an EvHandled besides pg_stat_activity's own.
const (
	SessionGone    = "gone"
	SessionUnknown = "unknown"
)

// Execution is a line of the downstream's log: one POST it served.
type Execution struct {
	Seq       int64  `json:"seq"`
	T         int64  `json:"t"`  // when it was done or abandoned, Unix nanoseconds
	At        int64  `json:"at"` // when it arrived, Unix nanoseconds
	Run       int    `json:"run"`
	Key       string `json:"key"`     // the Idempotency-Key header
	BodyID    string `json:"body_id"` // the body's "id" field, "" when it has none
	BodyHash  string `json:"body_hash"`
	Attempt   string `json:"attempt"`
	MessageID string `json:"msg"`
	Status    int    `json:"status"`
	// Effect is true for the one execution of a key that applied the
	// operation's effect.
	Effect bool `json:"effect"`
	// Owner is the attempt's owner token (X-Chaos-Owner, from
	// worker.Message.Owner): the claim under which it ran.
	Owner string `json:"owner,omitempty"`
	// Group is the delivery's message group (X-Sqsonce-Group-Id), SentAt
	// when it entered its queue (Unix milliseconds), Send its AttrSend
	// attribute and Replays how often sqsonce replay moved it: set on FIFO
	// queues only.
	Group   string `json:"group,omitempty"`
	SentAt  int64  `json:"sent_at,omitempty"`
	Send    string `json:"send,omitempty"`
	Replays int    `json:"replays,omitempty"`
}

// Counts is a worker run's counters, written every 250 ms and at exit.
type Counts struct {
	Faults       map[string]map[sqstest.Kind]int `json:"faults"` // by SQS operation, then kind
	Stats        worker.Stats                    `json:"stats"`
	CommitErrors int64                           `json:"commit_errors"` // bbolt commits that failed
	CompletesOK  int64                           `json:"completes_ok"`
	SQSRequests  int64                           `json:"sqs_requests"`
	// LedgerErrors counts the ledger calls that failed with
	// ledger.ErrUnavailable (a shared ledger that did not answer).
	LedgerErrors int64 `json:"ledger_errors"`
	// Down is true while the worker waits for a ledger that could not
	// record claims.
	Down bool `json:"down"`
	// LeakChecked is true when the run, once its worker had stopped (a
	// drain), asked the database how many sessions of its ledger's pool
	// were still inside a transaction: LeakedSessions. No handler runs
	// then, so each of them is a transaction that nothing will end.
	LeakChecked    bool  `json:"leak_checked,omitempty"`
	LeakedSessions int64 `json:"leaked_sessions,omitempty"`
	// ReserveMax is the longest call that took rate tokens (with Flow).
	ReserveMax time.Duration `json:"reserve_max,omitempty"`
}

// Appender appends JSON lines to a file. It is safe for concurrent use.
type Appender struct {
	mu   sync.Mutex
	f    *os.File
	sync bool
}

// OpenAppender opens path for appending, creating it. With sync, every
// Append is fsynced before it returns.
func OpenAppender(path string, sync bool) (*Appender, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &Appender{f: f, sync: sync}, nil
}

// Append writes v as one line with one write(2), and fsyncs it when the
// Appender was opened with sync.
func (a *Appender) Append(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.f.Write(b); err != nil {
		return err
	}
	if a.sync {
		return a.f.Sync()
	}
	return nil
}

// Log appends e, stamped with the time now when it has none; it reports a
// failure on standard error: a lost line is a finding, not a stop.
func (a *Appender) Log(e WorkerEvent) {
	if e.T == 0 {
		e.T = time.Now().UnixNano()
	}
	if err := a.Append(e); err != nil {
		fmt.Fprintln(os.Stderr, "event log:", err)
	}
}

// Close closes the file.
func (a *Appender) Close() error { return a.f.Close() }

// WriteFileAtomic writes v as JSON to path through a temporary file and a
// rename, so that a reader never sees half a file.
func WriteFileAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err == nil {
		_, err = tmp.Write(b)
		if err = errors.Join(err, tmp.Close()); err == nil {
			return os.Rename(tmp.Name(), path)
		}
		os.Remove(tmp.Name())
	}
	return err
}

// ReadLines decodes every line of the JSON-lines file at path into a new T
// and calls fn. A missing file has no lines. A last line cut short is left
// out, as if its writer had stopped before it: Linux ends a write(2) at a
// page boundary when a SIGKILL arrives, and a full disk ends it anywhere.
func ReadLines[T any](path string, fn func(T)) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	defer f.Close()
	for r := bufio.NewReaderSize(f, 1<<16); ; {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fn(v)
	}
}

// Hash names a payload in the records: the first 16 hex digits of its
// SHA-256, which begin the hex of the ledger's fingerprint of it.
func Hash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:8])
}
