// Command downstream is the system that the chaos campaign's workers write
// to, through sqsonce's http handler. It behaves like a careful downstream:
// it applies an operation's effect only the first time its Idempotency-Key
// succeeds, and answers a repeat with the original answer. It records every
// execution (every POST) in an append-only file (O_APPEND, fsynced before
// the answer is sent), so that the campaign can count both how often work
// ran and how often an effect was applied.
//
// The body drives the answer: {"id":"op-1","fail":2} is answered 503 for
// the first two executions of its key (with Retry-After when the body has
// "retry_after"), {"id":"op-9","permanent":true} is answered 422 (a
// permanent failure), anything else 200. {"id":"op-5","slow_ms":6000} takes
// that long before it is done (a repeat of a settled key is answered at
// once); if the client goes away meanwhile, the work is abandoned undone
// (recorded with status 499). {"id":"f-3","broken":true} is answered 422,
// without storing the answer, until the campaign says the bug is fixed
// (POST /fix); from then on it is handled like any other body.
//
// The campaign can arm a kill for a worker run (POST /arm?run=N): the next
// execution of that run that applies an effect is recorded, then the
// downstream asks the campaign (POST {control}/kill?run=N&key=K) to kill
// the worker with SIGKILL, and only then answers: the worker dies while its
// handler's request is in flight, after the work was done.
//
// It listens on 127.0.0.1 and prints "listening http://127.0.0.1:PORT" once
// ready. SIGTERM stops it.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

func main() {
	dir := flag.String("dir", "", "directory for executions.log")
	control := flag.String("control", "", "campaign's control URL, for kills in a handler")
	flag.Parse()
	if err := run(*dir, *control); err != nil {
		fmt.Fprintln(os.Stderr, "downstream:", err)
		os.Exit(1)
	}
}

func run(dir, control string) error {
	if dir == "" {
		return errors.New("-dir is required")
	}
	glog, err := openGroupLog(filepath.Join(dir, "executions.log"))
	if err != nil {
		return err
	}
	s := &server{
		log:     glog,
		control: control,
		execs:   map[string]int{},
		stored:  map[string]answer{},
		armed:   map[int]bool{},
		client:  &http.Client{Timeout: 15 * time.Second},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /op", s.op)
	mux.HandleFunc("POST /arm", s.arm)
	mux.HandleFunc("POST /disarm", s.arm)
	mux.HandleFunc("POST /fix", s.fix)
	mux.HandleFunc("GET /applied", s.applied)
	mux.HandleFunc("GET /stats", s.stats)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening http://%s\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// A request still running may yet log: leave the log open. Every
		// line logged so far is durable already.
		return fmt.Errorf("shutdown: %w", err)
	}
	return glog.close()
}

// answer is what an execution was told.
type answer struct {
	status     int
	body       []byte
	retryAfter string
}

type appliedOp struct {
	ID string `json:"id"`
	T  int64  `json:"t"`
}

type server struct {
	log     *groupLog
	control string
	client  *http.Client

	mu         sync.Mutex
	seq        int64
	execs      map[string]int    // executions per key
	stored     map[string]answer // the answer that settled a key
	appliedOps []appliedOp
	armed      map[int]bool
	fixed      bool // POST /fix came: broken bodies are handled
	effects    int64
	executions int64
}

func (s *server) op(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	run, _ := strconv.Atoi(r.Header.Get("X-Chaos-Run"))
	key := r.Header.Get("Idempotency-Key")
	var b struct {
		ID         json.RawMessage `json:"id"`
		Fail       int             `json:"fail"`
		Permanent  bool            `json:"permanent"`
		RetryAfter int             `json:"retry_after"`
		SlowMS     int             `json:"slow_ms"`
		Broken     bool            `json:"broken"`
	}
	_ = json.Unmarshal(body, &b)
	bodyID := ""
	var sid string
	if json.Unmarshal(b.ID, &sid) == nil {
		bodyID = sid
	}
	sum := sha256.Sum256(body)
	e := event.Execution{
		T:         time.Now().UnixNano(),
		Run:       run,
		Key:       key,
		BodyID:    bodyID,
		BodyHash:  hex.EncodeToString(sum[:8]),
		Attempt:   r.Header.Get("X-Sqsonce-Attempt"),
		MessageID: r.Header.Get("X-Sqsonce-Message-Id"),
		Group:     r.Header.Get("X-Sqsonce-Group-Id"),
		Send:      r.Header.Get("X-Chaos-Send"),
		Owner:     r.Header.Get("X-Chaos-Owner"),
	}
	e.SentAt, _ = strconv.ParseInt(r.Header.Get("X-Chaos-Sent-At"), 10, 64)
	e.Replays, _ = strconv.Atoi(r.Header.Get("X-Chaos-Replays"))

	s.mu.Lock()
	_, settled := s.stored[key]
	s.mu.Unlock()
	if b.SlowMS > 0 && !settled { // a repeat is answered from the store at once
		t := time.NewTimer(time.Duration(b.SlowMS) * time.Millisecond)
		select {
		case <-t.C:
		case <-r.Context().Done():
			// The worker gave up (timeout, shutdown, death): the work is
			// abandoned, not done.
			t.Stop()
			s.mu.Lock()
			s.seq++
			e.Seq, e.Status = s.seq, 499
			s.executions++
			done := s.log.add(e)
			s.mu.Unlock()
			<-done
			return
		}
	}

	s.mu.Lock()
	s.seq++
	e.Seq = s.seq
	s.executions++
	var a answer
	switch {
	case key == "":
		// Work without a key could never be made idempotent: sqsonce must
		// not send it. Recorded, and refused.
		a = answer{status: http.StatusBadRequest, body: []byte(`{"error":"no Idempotency-Key"}`)}
	default:
		s.execs[key]++
		n := s.execs[key]
		if st, ok := s.stored[key]; ok {
			a = st
			e.Repeat = true
			break
		}
		switch {
		case b.Permanent:
			a = answer{status: http.StatusUnprocessableEntity, body: []byte(`{"error":"permanent"}`)}
			s.stored[key] = a
		case b.Broken && !s.fixed:
			a = answer{status: http.StatusUnprocessableEntity, body: []byte(`{"error":"broken until fixed"}`)}
		case n <= b.Fail:
			a = answer{status: http.StatusServiceUnavailable, body: fmt.Appendf(nil, `{"error":"transient","n":%d}`, n)}
			if b.RetryAfter > 0 {
				a.retryAfter = strconv.Itoa(b.RetryAfter)
			}
		default:
			a = answer{status: http.StatusOK, body: fmt.Appendf(nil, `{"applied":%q,"seq":%d}`, key, e.Seq)}
			s.stored[key] = a
			e.Effect = true
			s.effects++
			s.appliedOps = append(s.appliedOps, appliedOp{ID: bodyID, T: e.T})
		}
	}
	e.Status = a.status
	kill := e.Effect && s.armed[run]
	if kill {
		delete(s.armed, run)
	}
	done := s.log.add(e)
	s.mu.Unlock()

	if err := <-done; err != nil {
		// Not durable: do not claim the work done.
		fmt.Fprintln(os.Stderr, "downstream: log:", err)
		http.Error(w, "log", http.StatusInternalServerError)
		return
	}
	if kill {
		s.killWorker(run, key)
	}
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// killWorker asks the campaign to kill the worker run serving this request
// and waits for its answer.
func (s *server) killWorker(run int, key string) {
	if s.control == "" {
		return
	}
	u := fmt.Sprintf("%s/kill?run=%d&key=%s", s.control, run, url.QueryEscape(key))
	resp, err := s.client.Post(u, "text/plain", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "downstream: kill request:", err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func (s *server) arm(w http.ResponseWriter, r *http.Request) {
	run, err := strconv.Atoi(r.URL.Query().Get("run"))
	if err != nil {
		http.Error(w, "run", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if r.URL.Path == "/arm" {
		s.armed[run] = true
	} else {
		delete(s.armed, run)
	}
	s.mu.Unlock()
}

func (s *server) fix(http.ResponseWriter, *http.Request) {
	s.mu.Lock()
	s.fixed = true
	s.mu.Unlock()
}

func (s *server) applied(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := append([]appliedOp(nil), s.appliedOps...)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *server) stats(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := map[string]int64{"executions": s.executions, "effects": s.effects}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// groupLog appends lines to a file opened with O_APPEND and fsyncs them,
// many lines per fsync: every line waiting when a write starts goes into
// it. Lines are written in the order add was called.
type groupLog struct {
	f    *os.File
	ch   chan pending
	done chan struct{}
}

type pending struct {
	line []byte
	done chan error
}

func openGroupLog(path string) (*groupLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	g := &groupLog{f: f, ch: make(chan pending, 4096), done: make(chan struct{})}
	go g.loop()
	return g, nil
}

// add queues v; the channel returned gets nil once it is durable.
func (g *groupLog) add(v any) <-chan error {
	done := make(chan error, 1)
	b, err := json.Marshal(v)
	if err != nil {
		done <- err
		return done
	}
	g.ch <- pending{line: append(b, '\n'), done: done}
	return done
}

func (g *groupLog) loop() {
	defer close(g.done)
	var buf []byte
	var waiting []chan error
	for p := range g.ch {
		buf = append(buf[:0], p.line...)
		waiting = append(waiting[:0], p.done)
	gather:
		for len(waiting) < 1024 {
			select {
			case p, ok := <-g.ch:
				if !ok {
					break gather
				}
				buf = append(buf, p.line...)
				waiting = append(waiting, p.done)
			default:
				break gather
			}
		}
		_, err := g.f.Write(buf)
		if err == nil {
			err = g.f.Sync()
		}
		for _, d := range waiting {
			d <- err
		}
	}
}

func (g *groupLog) close() error {
	close(g.ch)
	<-g.done
	return g.f.Close()
}
