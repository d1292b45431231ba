package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// world is what a campaign's workers talk to besides SQS and their ledger,
// served on 127.0.0.1 by the campaign's own process, which no fault stops:
//
//   - the downstream (POST /op), the system the http handler writes to.
//     It behaves like a careful downstream: it applies an operation's
//     effect only the first time its Idempotency-Key succeeds, and answers
//     a repeat with the original answer. It records every execution (every
//     POST), so that the audit can count both how often work ran and how
//     often an effect was applied. The body drives the answer:
//     {"id":"op-1","fail":2} is answered 503 for the first two executions
//     of its key (with Retry-After when it has "retry_after"),
//     {"permanent":true} 422 (a permanent failure), anything else 200.
//     {"slow_ms":6000} takes that long before it is done (a repeat of a
//     settled key is answered at once); if the client goes away meanwhile,
//     the work is abandoned undone (recorded with status 499).
//     {"broken":true} is answered 422, without storing the answer, until
//     the campaign fixes the downstream (fix); then it is handled like any
//     other body. A run armed for endInHandler is killed (SIGKILL) by its
//     next execution that applies an effect, once it is recorded and
//     before it is answered: the worker dies while its handler's request
//     is in flight, after the work was done.
//     While it is down (setDown) it answers every POST 503, or 429 with
//     Retry-After, or hangs until the worker gives up, or refuses
//     connections (its listener closed), and records each with its
//     arrival (At), as every other.
//   - the control (POST /intx?run=N&key=K&owner=O), which a transactional
//     handler asks from inside its transaction, after its insert: a run
//     armed for endInTx is killed there before the answer.
type world struct {
	e         *env
	srv       *http.Server
	mux       *http.ServeMux
	url, addr string
	log       *event.Appender // executions.log

	mu      sync.Mutex
	seq     int64
	count   map[string]int // executions per key
	stored  map[string]int // the status that settled a key
	applied map[string]time.Time
	armed   map[int]string // run -> the end it is armed for
	fixed   bool
	down    string // the outage now (down503, down429, downHang, downRefuse), "" when up
	execs   []event.Execution
}

// Outages of the downstream (setDown).
const (
	down503    = "503 Service Unavailable"
	down429    = "429 Too Many Requests, Retry-After: 2"
	downHang   = "hanging past the handler timeout"
	downRefuse = "refused connections (its listener closed)"
)

func startWorld(e *env) (*world, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	log, err := event.OpenAppender(filepath.Join(e.dir, "executions.log"), false)
	if err != nil {
		ln.Close()
		return nil, err
	}
	w := &world{e: e, addr: ln.Addr().String(), url: "http://" + ln.Addr().String(), log: log, count: map[string]int{}, stored: map[string]int{},
		applied: map[string]time.Time{}, armed: map[int]string{}, mux: http.NewServeMux()}
	w.mux.HandleFunc("POST /op", w.op)
	w.mux.HandleFunc("POST /intx", w.intx)
	w.serve(ln)
	return w, nil
}

func (w *world) serve(ln net.Listener) {
	w.srv = &http.Server{Handler: w.mux, ReadHeaderTimeout: 10 * time.Second}
	go func(srv *http.Server) { _ = srv.Serve(ln) }(w.srv)
}

// setDown takes the downstream down the way kind says, or ("") up again:
// downRefuse closes its listener and every connection, and listens again
// on the same address when it ends.
func (w *world) setDown(kind string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.down
	w.down = kind
	if kind == downRefuse {
		return w.srv.Close()
	}
	if prev == downRefuse {
		ln, err := net.Listen("tcp", w.addr)
		if err != nil {
			return fmt.Errorf("the downstream listens again: %w", err)
		}
		w.serve(ln)
	}
	return nil
}

func (w *world) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.mu.Lock()
	srv := w.srv
	w.mu.Unlock()
	_ = srv.Shutdown(ctx)
	w.log.Close()
}

// arm arms (on) or disarms run for a kill in its handler (endInHandler) or
// inside its held transaction (endInTx).
func (w *world) arm(run int, end string, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on && (end == endInHandler || end == endInTx) {
		w.armed[run] = end
	} else {
		delete(w.armed, run)
	}
}

// fix fixes the downstream's bug: broken bodies are handled from now on.
func (w *world) fix() {
	w.mu.Lock()
	w.fixed = true
	w.mu.Unlock()
}

// appliedOps returns when each operation (by its body's id) was applied.
func (w *world) appliedOps() map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.applied)
}

// executions returns every execution, in the order recorded.
func (w *world) executions() []event.Execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]event.Execution(nil), w.execs...)
}

func (w *world) record(e event.Execution) event.Execution {
	w.seq++
	e.Seq = w.seq
	w.execs = append(w.execs, e)
	_ = w.log.Append(e)
	return e
}

func (w *world) op(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(rw, "read body", http.StatusBadRequest)
		return
	}
	var b struct {
		Fail       int  `json:"fail"`
		Permanent  bool `json:"permanent"`
		RetryAfter int  `json:"retry_after"`
		SlowMS     int  `json:"slow_ms"`
		Broken     bool `json:"broken"`
	}
	_ = json.Unmarshal(body, &b)
	h := r.Header.Get
	e := event.Execution{Key: h("Idempotency-Key"), BodyID: idOf(string(body)), BodyHash: event.Hash(body),
		Attempt: h("X-Sqsonce-Attempt"), MessageID: h("X-Sqsonce-Message-Id"), Group: h("X-Sqsonce-Group-Id"), Send: h("X-Chaos-Send"), Owner: h("X-Chaos-Owner")}
	e.Run, _ = strconv.Atoi(h("X-Chaos-Run"))
	e.At = time.Now().UnixNano()
	e.SentAt, _ = strconv.ParseInt(h("X-Chaos-Sent-At"), 10, 64)
	e.Replays, _ = strconv.Atoi(h("X-Chaos-Replays"))

	w.mu.Lock()
	_, settled := w.stored[e.Key]
	down := w.down
	w.mu.Unlock()
	if down == downHang {
		b.SlowMS, settled = math.MaxInt32, false // until the worker gives up
	}
	if b.SlowMS > 0 && !settled { // a repeat is answered from the store at once
		t := time.NewTimer(time.Duration(b.SlowMS) * time.Millisecond)
		select {
		case <-t.C:
		case <-r.Context().Done():
			// The worker gave up (timeout, shutdown, death): the work is
			// abandoned, not done.
			t.Stop()
			e.Status, e.T = 499, time.Now().UnixNano()
			w.mu.Lock()
			w.record(e)
			w.mu.Unlock()
			return
		}
	}
	w.mu.Lock()
	e.T = time.Now().UnixNano() // when it is done (a slow one's work took its time)
	var status int
	switch st, ok := w.stored[e.Key]; {
	case e.Key == "":
		// Work without a key could never be made idempotent: sqsonce must
		// not send it. Recorded, and refused.
		status = http.StatusBadRequest
	case down == down429:
		status = http.StatusTooManyRequests
		rw.Header().Set("Retry-After", "2")
	case down != "":
		status = http.StatusServiceUnavailable
	case ok:
		status = st
	case b.Permanent:
		status, w.stored[e.Key] = http.StatusUnprocessableEntity, http.StatusUnprocessableEntity
	case b.Broken && !w.fixed:
		status = http.StatusUnprocessableEntity
	case w.count[e.Key] < b.Fail:
		status = http.StatusServiceUnavailable
		if b.RetryAfter > 0 {
			rw.Header().Set("Retry-After", strconv.Itoa(b.RetryAfter))
		}
	default:
		status, e.Effect, w.stored[e.Key], w.applied[e.BodyID] = http.StatusOK, true, http.StatusOK, time.Unix(0, e.T)
	}
	if down == "" {
		w.count[e.Key]++
	}
	e.Status = status
	kill := e.Effect && w.armed[e.Run] == endInHandler
	if kill {
		delete(w.armed, e.Run)
	}
	e = w.record(e)
	w.mu.Unlock()
	if kill {
		w.e.killIn(r.Context(), e.Run, endInHandler, e.Key, "")
	}
	rw.WriteHeader(status)
}

func (w *world) intx(rw http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	run, _ := strconv.Atoi(q.Get("run"))
	w.mu.Lock()
	armed := w.armed[run] == endInTx
	if armed {
		delete(w.armed, run)
	}
	w.mu.Unlock()
	if armed {
		w.e.killIn(r.Context(), run, endInTx, q.Get("key"), q.Get("owner"))
	}
	rw.WriteHeader(http.StatusNoContent)
}

// inTxKill is a worker run that the campaign killed inside a transaction,
// after its insert and before its commit.
type inTxKill struct {
	run        int
	key, owner string
}

// killIn kills run with SIGKILL while it waits for the world's answer (in
// its handler, or inside its transaction), records the kill and waits for
// the run to end.
func (e *env) killIn(ctx context.Context, run int, end, key, owner string) {
	var p *proc
	e.mu.Lock()
	for _, q := range e.procs {
		if q.id == run {
			p = q
		}
	}
	e.mu.Unlock()
	if p == nil || !p.kill(end) {
		return
	}
	e.mu.Lock()
	if end == endInHandler {
		e.inHand[key] = run
	} else {
		e.inTx = append(e.inTx, inTxKill{run: run, key: key, owner: owner})
	}
	e.mu.Unlock()
	p.wait(ctx, 10*time.Second)
}
