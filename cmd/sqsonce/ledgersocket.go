package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// filterQuery is a filter as the socket's query parameters; parseFilter
// reads it back.
func filterQuery(f ledger.Filter) url.Values {
	q := url.Values{"prefix": {f.Prefix}}
	if f.State != 0 {
		q.Set("state", f.State.String())
	}
	if f.Reason != "" {
		q.Set("reason", f.Reason)
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.ReasonGroup != "" {
		q.Set("reason_group", f.ReasonGroup)
	}
	for name, v := range map[string]ledger.Flag{"permanent": f.Permanent, "dead_lettered": f.DeadLettered} {
		if v != ledger.FlagAny {
			q.Set(name, strconv.Itoa(int(v)))
		}
	}
	if f.Newest {
		q.Set("newest", "1")
	}
	return q
}

func parseFilter(q url.Values) (ledger.Filter, error) {
	f := ledger.Filter{Prefix: q.Get("prefix"), Reason: q.Get("reason"), ReasonGroup: q.Get("reason_group"), Newest: q.Get("newest") == "1"}
	for name, v := range map[string]*ledger.Flag{"permanent": &f.Permanent, "dead_lettered": &f.DeadLettered} {
		if s := q.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return ledger.Filter{}, fmt.Errorf("%s %q: %w", name, s, ledger.ErrInvalidArgument)
			}
			*v = ledger.Flag(n)
		}
	}
	if s := q.Get("state"); s != "" {
		st, err := ledger.ParseState(s)
		if err != nil {
			return ledger.Filter{}, err
		}
		f.State = st
	}
	for name, t := range map[string]*time.Time{"since": &f.Since, "until": &f.Until} {
		if s := q.Get(name); s != "" {
			v, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return ledger.Filter{}, fmt.Errorf("%s: %v: %w", name, err, ledger.ErrInvalidArgument)
			}
			*t = v
		}
	}
	return f, f.Validate()
}

// pageJSON is a page of List as the socket carries it.
type pageJSON struct {
	Records    []ledger.RecordJSON `json:"records"`
	Newest     bool                `json:"newest,omitempty"`
	Next       string              `json:"next,omitempty"`
	Scanned    int                 `json:"scanned"`
	Unreadable int                 `json:"unreadable,omitempty"`
}

// overviewJSON is an Overview as the socket carries it.
type overviewJSON struct {
	Stats              statsJSON                `json:"stats"`
	FailedDeadLettered int                      `json:"failed_dead_lettered,omitempty"`
	Estimate           string                   `json:"estimate,omitempty"`
	OldestClaims       []ledger.RecordJSON      `json:"oldest_claims"`
	Owners             []ledger.OwnerClaims     `json:"owners"`
	Failures           []ledger.FailureGroup    `json:"failures"`
	FailureGroups      int                      `json:"failure_groups,omitempty"`
	DeadLetters        []ledger.DeadLetterGroup `json:"dead_letters,omitempty"`
	DeadLetterGroups   int                      `json:"dead_letter_groups,omitempty"`
	DeadLettered       int                      `json:"dead_lettered,omitempty"`
	Activity           []ledger.Minute          `json:"activity"`
	Now                time.Time                `json:"now"`
	Partial            bool                     `json:"partial,omitempty"`
	Scanned            int                      `json:"scanned"`
}

func toOverviewJSON(o ledger.Overview) overviewJSON {
	j := overviewJSON{Stats: toStatsJSON(o.Stats), Estimate: o.Estimate, Owners: o.Owners, Failures: o.Failures,
		Activity: o.Activity, Now: o.Now, Partial: o.Partial, Scanned: o.Scanned, FailedDeadLettered: o.FailedDeadLettered,
		FailureGroups: o.FailureGroups, DeadLetters: o.DeadLetters, DeadLetterGroups: o.DeadLetterGroups, DeadLettered: o.DeadLettered}
	for _, r := range o.OldestClaims {
		j.OldestClaims = append(j.OldestClaims, ledger.ToJSON(r))
	}
	return j
}

func (j overviewJSON) overview() (ledger.Overview, error) {
	o := ledger.Overview{Stats: j.Stats.stats(), Estimate: j.Estimate, Owners: j.Owners, Failures: j.Failures,
		Activity: j.Activity, Now: j.Now, Partial: j.Partial, Scanned: j.Scanned, FailedDeadLettered: j.FailedDeadLettered,
		FailureGroups: j.FailureGroups, DeadLetters: j.DeadLetters, DeadLetterGroups: j.DeadLetterGroups, DeadLettered: j.DeadLettered}
	for _, rj := range j.OldestClaims {
		rec, err := ledger.FromJSON(rj)
		if err != nil {
			return ledger.Overview{}, fmt.Errorf("worker socket: %w", err)
		}
		o.OldestClaims = append(o.OldestClaims, rec)
	}
	return o, nil
}

func toStatsJSON(st ledger.Stats) statsJSON {
	out := statsJSON{InProgress: st.InProgress, Complete: st.Complete, Failed: st.Failed,
		FailedPermanently: st.FailedPermanently, FileSize: st.FileSize, Commits: st.Commits}
	if !st.OldestInProgress.IsZero() {
		out.OldestInProgress = &st.OldestInProgress
	}
	return out
}

func (j statsJSON) stats() ledger.Stats {
	st := ledger.Stats{InProgress: j.InProgress, Complete: j.Complete, Failed: j.Failed,
		FailedPermanently: j.FailedPermanently, FileSize: j.FileSize, Commits: j.Commits}
	if j.OldestInProgress != nil {
		st.OldestInProgress = *j.OldestInProgress
	}
	return st
}

type statsJSON struct {
	InProgress        int        `json:"in_progress"`
	Complete          int        `json:"complete"`
	Failed            int        `json:"failed"`
	FailedPermanently int        `json:"failed_permanently"`
	OldestInProgress  *time.Time `json:"oldest_in_progress,omitempty"`
	FileSize          int64      `json:"file_size"`
	Commits           uint64     `json:"commits"`
}

// errorJSON carries a ledger error across the socket with its kind, so the
// client can wrap the same sentinel.
type errorJSON struct {
	Error string `json:"error"`
	Kind  string `json:"kind,omitempty"`
}

var errorKinds = map[string]error{
	"not_found": ledger.ErrNotFound, "state": ledger.ErrState, "invalid_key": ledger.ErrInvalidKey,
	"invalid_argument": ledger.ErrInvalidArgument, "corrupt": ledger.ErrCorrupt, "closed": ledger.ErrClosed,
	"conflict": ledger.ErrConflict,
}

func errorKind(err error) string {
	for kind, target := range errorKinds {
		if errors.Is(err, target) {
			return kind
		}
	}
	return ""
}

// ledgerSocket serves a worker's ledger to sqsonce admin commands over a
// unix socket beside the ledger file, mode 0600: only the worker's own user
// can connect. The file itself cannot be opened while the worker runs.
type ledgerSocket struct {
	srv  *http.Server
	path string
	done chan struct{}
}

// socketWriteTimeout is how long the worker waits for a client of its ledger
// socket to take the next part of an answer. A client that stops reading for
// longer (a listing piped into a pager left open, say) is cut off, so that it
// holds no goroutine or connection of the worker's for good.
const socketWriteTimeout = time.Minute

// socketOptions are the settings of a ledger socket; tests change them.
type socketOptions struct {
	// writeTimeout bounds each write to a client (socketWriteTimeout).
	writeTimeout time.Duration
	// overviewKeep is how long the socket keeps an overview that took
	// took to read (overviewKeep); nil: none is kept.
	overviewKeep func(took time.Duration) time.Duration
	// listening, when set, is called as soon as the socket listens, before
	// it has its final mode and path.
	listening func()
}

// maxSocketPath is the longest path a unix socket can be bound to or
// reached at on Linux: 108 bytes with the terminating NUL.
const maxSocketPath = 107

// serveLedgerSocket serves db on a unix socket at path until Close.
func serveLedgerSocket(db *ledger.DB, path string, log *slog.Logger) (*ledgerSocket, error) {
	return listenLedgerSocket(db, path, log, socketOptions{writeTimeout: socketWriteTimeout, overviewKeep: overviewKeep})
}

func listenLedgerSocket(db *ledger.DB, path string, log *slog.Logger, opts socketOptions) (*ledgerSocket, error) {
	ln, err := listenPrivate(path, opts.listening)
	if err != nil {
		return nil, fmt.Errorf("ledger socket %s: %w", path, err)
	}
	mux := http.NewServeMux()
	fail := func(w http.ResponseWriter, err error) {
		code := http.StatusInternalServerError
		switch errorKind(err) {
		case "not_found":
			code = http.StatusNotFound
		case "state", "invalid_key", "invalid_argument":
			code = http.StatusBadRequest
		case "conflict":
			code = http.StatusConflict
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(errorJSON{Error: err.Error(), Kind: errorKind(err)})
	}
	mux.HandleFunc("GET /v1/get", func(w http.ResponseWriter, r *http.Request) {
		rec, err := db.Get(r.Context(), r.URL.Query().Get("key"))
		if err != nil {
			fail(w, err)
			return
		}
		json.NewEncoder(w).Encode(ledger.ToJSON(rec))
	})
	mux.HandleFunc("GET /v1/list", func(w http.ResponseWriter, r *http.Request) {
		f, err := parseFilter(r.URL.Query())
		if err != nil {
			fail(w, err)
			return
		}
		// ForEach holds no read transaction while a record is written, so
		// a slow client delays no ledger write; the deadline, renewed for
		// each record, ends the listing of a client that stopped reading.
		rc := http.NewResponseController(w)
		enc := json.NewEncoder(w)
		var werr error
		written := 0
		err = db.ForEach(r.Context(), f, func(rec ledger.Record) error {
			if werr = rc.SetWriteDeadline(time.Now().Add(opts.writeTimeout)); werr == nil {
				werr = enc.Encode(ledger.ToJSON(rec))
			}
			if werr == nil {
				written++
			}
			return werr
		})
		switch {
		case werr != nil:
			// The connection is broken; net/http closes it when we return.
			// A client that stopped listening early (--limit) is normal.
			if errors.Is(werr, os.ErrDeadlineExceeded) {
				log.Warn("ledger socket: a listing's client stopped reading; closed its connection",
					"records_written", written, "write_timeout", opts.writeTimeout)
			}
		case err != nil:
			// Mid-stream: the client sees a line it cannot decode as a record.
			enc.Encode(errorJSON{Error: err.Error(), Kind: errorKind(err)})
		}
	})
	// A page of List: one bounded read, one JSON answer.
	mux.HandleFunc("GET /v1/page", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f, err := parseFilter(q)
		if err != nil {
			fail(w, err)
			return
		}
		limit, err := strconv.Atoi(cmp.Or(q.Get("limit"), "0"))
		if err != nil {
			fail(w, fmt.Errorf("limit %q: %w", q.Get("limit"), ledger.ErrInvalidArgument))
			return
		}
		p, err := db.List(r.Context(), f, q.Get("after"), limit)
		if err != nil {
			fail(w, err)
			return
		}
		out := pageJSON{Records: make([]ledger.RecordJSON, len(p.Records)), Next: p.Next, Scanned: p.Scanned, Unreadable: p.Unreadable, Newest: p.Newest}
		for i, rec := range p.Records {
			out.Records[i] = ledger.ToJSON(rec)
		}
		json.NewEncoder(w).Encode(out)
	})
	overviews := &overviewCache{keepFor: opts.overviewKeep}
	mux.HandleFunc("GET /v1/overview", func(w http.ResponseWriter, r *http.Request) {
		since, err := time.Parse(time.RFC3339Nano, r.URL.Query().Get("since"))
		if err != nil {
			fail(w, fmt.Errorf("since: %v: %w", err, ledger.ErrInvalidArgument))
			return
		}
		o, err := overviews.get(r.Context(), db, since)
		if err != nil {
			fail(w, err)
			return
		}
		json.NewEncoder(w).Encode(toOverviewJSON(o))
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		st, err := db.Stats(r.Context())
		if err != nil {
			fail(w, err)
			return
		}
		json.NewEncoder(w).Encode(toStatsJSON(st))
	})
	for name, op := range map[string]func(context.Context, string) error{"forget": db.Forget, "reset": db.Reset} {
		mux.HandleFunc("POST /v1/"+name, func(w http.ResponseWriter, r *http.Request) {
			key := r.URL.Query().Get("key")
			err := op(r.Context(), key)
			overviews.drop()
			if err != nil {
				fail(w, err)
				return
			}
			log.Info("ledger "+name+" through the worker socket", "key", key)
			w.WriteHeader(http.StatusNoContent)
		})
	}
	serveFlow(mux, db, fail, log)
	// Every answer gets a write deadline; a listing renews it per record.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(opts.writeTimeout))
		mux.ServeHTTP(w, r)
	})
	s := &ledgerSocket{srv: &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}, path: path, done: make(chan struct{})}
	go func() { s.srv.Serve(ln); close(s.done) }()
	return s, nil
}

// How long the socket keeps the ledger's overview. An overview walks every
// record of the ledger (its failures by reason and its activity), which
// takes the worker's CPU in proportion to the ledger's size: some 0.3 s for
// a million records. So the socket reads it again only once the last one is
// overviewMinAge old and a hundred times as old as it took to read: however
// many consoles ask, and however often, the worker spends at most about 1 %
// of its time on overviews. overviewMaxAge bounds how old an overview it
// gives can be. The overview says when it was read (Overview.Now).
const (
	overviewMinAge     = 5 * time.Second
	overviewMaxAge     = 2 * time.Minute
	overviewCostFactor = 100
)

// overviewKeep is how long an overview that took took to read is kept.
func overviewKeep(took time.Duration) time.Duration {
	return min(max(overviewMinAge, overviewCostFactor*took), overviewMaxAge)
}

// overviewCache is the socket's last overview. One read runs at a time:
// clients that ask meanwhile wait for it and get it. A change made through
// the socket (forget, reset) drops it.
type overviewCache struct {
	keepFor func(took time.Duration) time.Duration // nil: none kept

	mu     sync.Mutex
	o      ledger.Overview
	window time.Duration // the activity window it was read for
	readAt time.Time
	keep   time.Duration
}

// get returns the overview with activity since since: the one kept, when
// it is young enough and was read for the same window, or a new one.
func (c *overviewCache) get(ctx context.Context, db *ledger.DB, since time.Time) (ledger.Overview, error) {
	window := time.Since(since).Round(time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.readAt.IsZero() && time.Since(c.readAt) < c.keep && window == c.window {
		return c.o, nil
	}
	t0 := time.Now()
	o, err := db.Overview(ctx, since)
	if err != nil {
		return ledger.Overview{}, err
	}
	if c.keepFor != nil {
		c.o, c.window, c.readAt, c.keep = o, window, time.Now(), c.keepFor(time.Since(t0))
	}
	return o, nil
}

// drop forgets the overview kept.
func (c *overviewCache) drop() {
	c.mu.Lock()
	c.readAt = time.Time{}
	c.mu.Unlock()
}

// listenPrivate listens on a unix socket at path that only this user can
// reach from the moment it has that name. A socket is created with the
// mode the umask leaves, and changing the process-wide umask would race
// with every other file the process creates; so the socket is made in a
// fresh directory of mode 0700 beside path, where no one else can reach it,
// set to mode 0600 there and then renamed to path (replacing a socket left
// by a worker that died: the caller holds the ledger's lock, so no live
// worker serves there). The listener does not remove the socket when it
// closes; its owner removes path.
func listenPrivate(path string, listening func()) (*net.UnixListener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("path of %d bytes, over the %d a unix socket allows: use a shorter ledger path", len(path), maxSocketPath)
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".")
	if err != nil {
		return nil, err
	}
	defer os.Remove(dir) // empty once the socket has moved out
	tmp := filepath.Join(dir, "s")
	if len(tmp) > maxSocketPath {
		return nil, fmt.Errorf("the socket is made at %s first, %d bytes, over the %d a unix socket allows: use a shorter ledger path",
			tmp, len(tmp), maxSocketPath)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if listening != nil {
		listening()
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	return ln, nil
}

// Close stops serving and removes the socket file.
func (s *ledgerSocket) Close() error {
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	os.Remove(s.path)
	return err
}

// socketLedger reaches a running worker's ledger through its socket.
type socketLedger struct {
	client *http.Client
}

func dialLedgerSocket(ctx context.Context, path string) (*socketLedger, error) {
	c := &socketLedger{client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "unix", path)
		},
		// A worker that accepts but never answers must not hang the
		// command; a long listing streams after its headers.
		ResponseHeaderTimeout: 10 * time.Second,
	}}}
	if _, err := c.Stats(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *socketLedger) Via() string { return "worker socket" }

func (c *socketLedger) Close() error {
	c.client.CloseIdleConnections()
	return nil
}

func (c *socketLedger) do(ctx context.Context, method, op string, q url.Values) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://ledger/v1/"+op+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	if by, ok := ctx.Value(actorKey{}).(string); ok {
		req.Header.Set(actorHeader, by)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, socketError(resp)
	}
	return resp, nil
}

// socketError is the error of an answer that is not a success, wrapping the
// ledger's sentinel of its kind.
func socketError(resp *http.Response) error {
	var e errorJSON
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&e) != nil {
		return fmt.Errorf("worker socket: %s", resp.Status)
	}
	if target, ok := errorKinds[e.Kind]; ok {
		return fmt.Errorf("%s: %w", e.Error, target)
	}
	return errors.New(e.Error)
}

// actorKey marks a context whose socket calls name who makes them (a
// string), for the worker's log.
type actorKey struct{}

// actorHeader carries who makes a call through the socket.
const actorHeader = "X-Sqsonce-By"

// withActor names who makes the socket calls of ctx.
func withActor(ctx context.Context, by string) context.Context {
	return context.WithValue(ctx, actorKey{}, by)
}

func (c *socketLedger) Get(ctx context.Context, key string) (ledger.Record, error) {
	resp, err := c.do(ctx, http.MethodGet, "get", url.Values{"key": {key}})
	if err != nil {
		return ledger.Record{}, err
	}
	defer resp.Body.Close()
	var j ledger.RecordJSON
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return ledger.Record{}, fmt.Errorf("worker socket: %w", err)
	}
	return ledger.FromJSON(j)
}

func (c *socketLedger) ForEach(ctx context.Context, f ledger.Filter, fn func(ledger.Record) error) error {
	if err := f.Validate(); err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodGet, "list", filterQuery(f))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	n := 0
	brokeOff := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("worker socket: listing stopped after %d records: %w", n, ctx.Err())
		}
		return fmt.Errorf("worker socket: the listing broke off after %d records (the worker closes a listing that is not read for %v): %w",
			n, socketWriteTimeout, err)
	}
	for ; sc.Scan(); n++ {
		var j ledger.RecordJSON
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil || j.State == "" {
			if err := sc.Err(); err != nil {
				return brokeOff(err) // the last line, cut short
			}
			var e errorJSON
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Error != "" {
				return fmt.Errorf("worker socket: %s", e.Error)
			}
			return fmt.Errorf("worker socket: bad line %q", sc.Text())
		}
		rec, err := ledger.FromJSON(j)
		if err != nil {
			return err
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return brokeOff(err)
	}
	return nil
}

// List reads one page through the worker, which reads it as its own List
// does: a bounded read.
func (c *socketLedger) List(ctx context.Context, f ledger.Filter, after string, limit int) (ledger.Page, error) {
	if _, err := ledger.CheckListLimit(limit); err != nil {
		return ledger.Page{}, err
	}
	if err := f.Validate(); err != nil {
		return ledger.Page{}, err
	}
	q := filterQuery(f)
	q.Set("after", after)
	q.Set("limit", strconv.Itoa(limit))
	resp, err := c.do(ctx, http.MethodGet, "page", q)
	if err != nil {
		return ledger.Page{}, err
	}
	defer resp.Body.Close()
	var j pageJSON
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return ledger.Page{}, fmt.Errorf("worker socket: %w", err)
	}
	p := ledger.Page{Next: j.Next, Scanned: j.Scanned, Unreadable: j.Unreadable, Newest: j.Newest}
	for _, rj := range j.Records {
		rec, err := ledger.FromJSON(rj)
		if err != nil {
			return ledger.Page{}, fmt.Errorf("worker socket: %w", err)
		}
		p.Records = append(p.Records, rec)
	}
	return p, nil
}

// Overview reads the worker's ledger's overview through the worker.
func (c *socketLedger) Overview(ctx context.Context, since time.Time) (ledger.Overview, error) {
	resp, err := c.do(ctx, http.MethodGet, "overview", url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}})
	if err != nil {
		return ledger.Overview{}, err
	}
	defer resp.Body.Close()
	var j overviewJSON
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return ledger.Overview{}, fmt.Errorf("worker socket: %w", err)
	}
	return j.overview()
}

func (c *socketLedger) Stats(ctx context.Context) (ledger.Stats, error) {
	resp, err := c.do(ctx, http.MethodGet, "stats", nil)
	if err != nil {
		return ledger.Stats{}, err
	}
	defer resp.Body.Close()
	var j statsJSON
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return ledger.Stats{}, fmt.Errorf("worker socket: %w", err)
	}
	return j.stats(), nil
}

func (c *socketLedger) Forget(ctx context.Context, key string) error {
	return c.post(ctx, "forget", key)
}
func (c *socketLedger) Reset(ctx context.Context, key string) error { return c.post(ctx, "reset", key) }

func (c *socketLedger) post(ctx context.Context, op, key string) error {
	resp, err := c.do(ctx, http.MethodPost, op, url.Values{"key": {key}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
