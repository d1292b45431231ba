package console

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/ledger"
)

// readTimeout bounds the reads of one page view.
const readTimeout = 20 * time.Second

// activityWindow is how far back the overview's chart goes.
const activityWindow = time.Hour

// overviewData is what the overview page shows.
type overviewData struct {
	Ledger      ledger.Overview
	LedgerErr   string
	Lapsed      []ledger.Record
	Live        []ledger.Record
	Queue, DLQ  queueDepth
	DeadLetters *deadLetters
	Chart       chart
	ReadAt      time.Time
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	d := overviewData{}
	o, at, err := h.cache.overview(ctx, h.cfg.Refresh, func(ctx context.Context) (ledger.Overview, error) {
		return h.cfg.Ledger.Overview(ctx, h.cfg.now().Add(-activityWindow))
	})
	d.ReadAt = at
	if err != nil {
		d.LedgerErr = err.Error()
	} else {
		d.Ledger = o
		// When the ledger read it: a worker's socket may give an
		// overview it read a while ago.
		if !o.Now.IsZero() && o.Now.Before(at) {
			d.ReadAt = o.Now
		}
		for _, rec := range o.OldestClaims {
			if rec.LeaseExpiry.After(o.Now) {
				d.Live = append(d.Live, rec)
			} else {
				d.Lapsed = append(d.Lapsed, rec)
			}
		}
		d.Chart = newChart(o.Activity, o.Now, activityWindow)
	}
	d.Queue = h.cache.depth(ctx, h.cfg.Refresh, h.cfg.SQS, h.cfg.QueueURL)
	if h.cfg.DLQURL != "" {
		d.DLQ = h.cache.depth(ctx, h.cfg.Refresh, h.cfg.SQS, h.cfg.DLQURL)
		d.DeadLetters = h.cache.deadLetters(ctx, h.cfg.Refresh, h)
	}
	h.render(w, r, http.StatusOK, "overview", "Overview", d)
}

// listQuery is the filter of the operations list as its URL gives it.
type listQuery struct {
	State, Prefix, Reason, Since, Until, After string
	Limit                                      int
}

// values is q as query parameters, without the empty ones.
func (q listQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"state": q.State, "prefix": q.Prefix, "reason": q.Reason, "since": q.Since, "until": q.Until, "after": q.After} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit != 0 && q.Limit != ledger.DefaultListLimit {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// Encode is q as a query string.
func (q listQuery) Encode() string { return q.values().Encode() }

// readListQuery reads the filter from the URL and turns it into a
// ledger.Filter, or says what is wrong.
func readListQuery(v url.Values, now time.Time) (listQuery, ledger.Filter, error) {
	q := listQuery{State: v.Get("state"), Prefix: v.Get("prefix"), Reason: v.Get("reason"),
		Since: strings.TrimSpace(v.Get("since")), Until: strings.TrimSpace(v.Get("until")), After: v.Get("after")}
	var f ledger.Filter
	var errs []string
	if q.State != "" {
		st, err := ledger.ParseState(q.State)
		if err != nil {
			errs = append(errs, "state: want in_progress, complete or failed")
		}
		f.State = st
	}
	f.Prefix, f.Reason = q.Prefix, q.Reason
	var err error
	if f.Since, err = parseWhen(q.Since, now); err != nil {
		errs = append(errs, "since: "+err.Error())
	}
	if f.Until, err = parseWhen(q.Until, now); err != nil {
		errs = append(errs, "until: "+err.Error())
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > ledger.MaxListLimit {
			errs = append(errs, fmt.Sprintf("limit: want 1 to %d", ledger.MaxListLimit))
		}
		q.Limit = n
	}
	if len(errs) == 0 {
		if err := f.Validate(); err != nil {
			errs = append(errs, strings.TrimSuffix(strings.TrimPrefix(err.Error(), "filter: "), ": "+ledger.ErrInvalidArgument.Error()))
		}
	}
	if len(errs) > 0 {
		return q, f, errors.New(strings.Join(errs, "; "))
	}
	return q, f, nil
}

// The times a filter may name: those a ledger can hold (Unix nanoseconds
// in an int64). Outside them a bound is a mistake, and the zero time
// 0001-01-01 would read as no bound at all.
var (
	minWhen = time.Unix(0, 0).UTC()
	maxWhen = time.Unix(0, math.MaxInt64).UTC()
)

// parseWhen reads a time of a filter: empty (no bound, the zero time), an
// RFC 3339 time, a date and time in UTC as a form's datetime-local field
// gives it, a date, or a duration before now such as 90m or 36h. A time
// before minWhen or after maxWhen is refused.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, ok := time.Time{}, false
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		var err error
		if t, err = time.ParseInLocation(layout, s, time.UTC); err == nil {
			ok = true
			break
		}
	}
	if !ok {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("%q: want a time such as 2026-01-02T15:04 (UTC) or a duration ago such as 90m or 36h", s)
		}
		t = now.Add(-d)
	}
	switch {
	case t.Before(minWhen):
		return time.Time{}, fmt.Errorf("%q is before %s: no ledger holds a time that early; leave it empty for no bound", s, minWhen.Format(time.DateOnly))
	case t.After(maxWhen):
		return time.Time{}, fmt.Errorf("%q is after %s: no ledger holds a time that late; leave it empty for no bound", s, maxWhen.Format(time.DateOnly))
	}
	return t, nil
}

type operationsData struct {
	Query     listQuery
	Error     string
	Page      ledger.Page
	NextLink  string
	FirstLink string
	Filtered  bool
	States    []string
}

func (h *Handler) operations(w http.ResponseWriter, r *http.Request) {
	q, f, err := readListQuery(r.URL.Query(), h.cfg.now())
	d := operationsData{Query: q, States: []string{"in_progress", "complete", "failed"}}
	d.Filtered = q.State != "" || q.Prefix != "" || q.Reason != "" || q.Since != "" || q.Until != ""
	if err != nil {
		d.Error = err.Error()
		h.render(w, r, http.StatusBadRequest, "operations", "Operations", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	page, err := h.cfg.Ledger.List(ctx, f, q.After, q.Limit)
	if err != nil {
		d.Error = err.Error()
		h.render(w, r, http.StatusBadGateway, "operations", "Operations", d)
		return
	}
	d.Page = page
	first := q
	first.After = ""
	d.FirstLink = h.link("/operations?" + first.Encode())
	if page.Next != "" {
		next := q
		next.After = page.Next
		d.NextLink = h.link("/operations?" + next.Encode())
	}
	h.render(w, r, http.StatusOK, "operations", "Operations", d)
}

type operationData struct {
	Key       string
	Record    *ledger.Record
	Error     string
	Result    string // the stored result as text, or base64 when it is not text
	ResultB64 bool
	Commands  []command
	Forgotten bool
	// NothingForgotten says a forget found no record of Key.
	NothingForgotten bool
	Mistyped         bool
	Now              time.Time
}

// command is a shell command line shown on an operation's page.
type command struct{ What, Line string }

func (h *Handler) operation(w http.ResponseWriter, r *http.Request) {
	h.showOperation(w, r, r.URL.Query().Get("key"), http.StatusOK, false)
}

// showOperation shows the record of key. Its page says the key was
// forgotten (after the redirect of a forget) only while the ledger has
// no record of it; a forget of a key without a record (a POST) says
// nothing was forgotten.
func (h *Handler) showOperation(w http.ResponseWriter, r *http.Request, key string, status int, mistyped bool) {
	d := operationData{Key: key, Forgotten: r.Method == http.MethodGet && r.URL.Query().Get("forgotten") == "1",
		NothingForgotten: r.Method == http.MethodPost && !mistyped, Mistyped: mistyped, Now: h.cfg.now()}
	if key == "" {
		d.Error = "No key given: type one in the box."
		h.render(w, r, http.StatusBadRequest, "operation", "Operation", d)
		return
	}
	if err := ledger.ValidateKey(key); err != nil {
		h.fail(w, r, http.StatusBadRequest, "Not an operation key: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	rec, err := h.cfg.Ledger.Get(ctx, key)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		if status == http.StatusOK && !d.Forgotten {
			status = http.StatusNotFound
		}
	case err != nil:
		d.Error = err.Error()
		status = http.StatusBadGateway
		if errors.Is(err, ledger.ErrInvalidKey) {
			status = http.StatusBadRequest
		}
	default:
		d.Record = &rec
		d.Forgotten, d.NothingForgotten = false, false
		if utf8.Valid(rec.Result) {
			d.Result = string(rec.Result)
		} else {
			d.Result, d.ResultB64 = base64.StdEncoding.EncodeToString(rec.Result), true
		}
	}
	k := shellQuote(key)
	d.Commands = []command{{"Show this record", h.cfg.Shell + " ledger get " + k}}
	if d.Record != nil && d.Record.State == ledger.StateFailed {
		d.Commands = append(d.Commands, command{"Run it again on its next delivery", h.cfg.Shell + " ledger reset " + k})
	}
	if d.Record != nil {
		d.Commands = append(d.Commands, command{"Forget it, so that its next delivery runs the work again", h.cfg.Shell + " ledger forget --yes " + k})
	}
	if h.cfg.DLQURL != "" {
		d.Commands = append(d.Commands,
			command{"Replay its dead letters: see first", h.cfg.Shell + " replay --dry-run --key " + shellQuote(globEscape(key))},
			command{"Then replay them", h.cfg.Shell + " replay --key " + shellQuote(globEscape(key))})
	}
	h.render(w, r, status, "operation", "Operation "+key, d)
}

// shellQuote quotes s for a POSIX shell, unless it needs no quotes. A
// string with controls (a line break, a bidirectional control) is written
// $'...' with those bytes as \xHH escapes, so that the command line shows
// them and, copied, still names s (bash, zsh, ksh, POSIX.1-2024 sh).
func shellQuote(s string) string {
	if strings.ContainsFunc(s, func(c rune) bool { return c < ' ' || c == 0x7f || isBidiControl(c) }) {
		var b strings.Builder
		b.WriteString("$'")
		for _, c := range s {
			switch {
			case c < ' ' || c == 0x7f || isBidiControl(c):
				for _, x := range []byte(string(c)) {
					fmt.Fprintf(&b, `\x%02x`, x)
				}
			case c == '\'' || c == '\\':
				b.WriteByte('\\')
				b.WriteRune(c)
			default:
				b.WriteRune(c)
			}
		}
		b.WriteByte('\'')
		return b.String()
	}
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:@%+=,", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// globEscape escapes the characters path.Match gives a meaning, so that
// the pattern matches s alone.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (h *Handler) forget(w http.ResponseWriter, r *http.Request) {
	key, typed := r.FormValue("key"), r.FormValue("typed")
	// The key as typed, or as the page shows it (its bidirectional
	// controls written as their code points).
	if key == "" || typed != key && typed != visibleText(key) {
		h.count("forget", "refused")
		h.showOperation(w, r, key, http.StatusUnprocessableEntity, true)
		return
	}
	if err := ledger.ValidateKey(key); err != nil {
		h.count("forget", "refused")
		h.fail(w, r, http.StatusBadRequest, "Not an operation key: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	// Forget takes an absent key as done: ask first, to say what
	// happened. A record that cannot be read is forgotten (the way out
	// for a damaged record).
	if _, err := h.cfg.Ledger.Get(ctx, key); errors.Is(err, ledger.ErrNotFound) {
		h.count("forget", "refused")
		h.log.Info("console: no record to forget: nothing forgotten", "actor", actor(r), "key", key)
		h.showOperation(w, r, key, http.StatusNotFound, false)
		return
	} else if err != nil && !errors.Is(err, ledger.ErrCorrupt) {
		h.count("forget", "failed")
		h.log.Error("console: forget failed", "actor", actor(r), "key", key, "error", err)
		h.fail(w, r, http.StatusBadGateway, fmt.Sprintf("Could not read %q to forget it: %v", key, err))
		return
	}
	if err := h.cfg.Ledger.Forget(ctx, key); err != nil {
		h.count("forget", "failed")
		h.log.Error("console: forget failed", "actor", actor(r), "key", key, "error", err)
		h.fail(w, r, http.StatusBadGateway, fmt.Sprintf("Could not forget %q: %v", key, err))
		return
	}
	h.cache.forget()
	h.count("forget", "done")
	h.log.Info("console: forgot an operation: its next delivery runs the work again", "actor", actor(r), "key", key)
	http.Redirect(w, r, h.link("/operation?"+url.Values{"key": {key}, "forgotten": {"1"}}.Encode()), http.StatusSeeOther)
}

// exportWriteTimeout is how long the export waits for its client to take
// each page.
const exportWriteTimeout = time.Minute

// export streams the records of the list's filter as JSON Lines, a
// bounded page at a time: no read is held while the client reads.
func (h *Handler) export(w http.ResponseWriter, r *http.Request) {
	_, f, err := readListQuery(r.URL.Query(), h.cfg.now())
	if err != nil {
		h.count("export", "refused")
		h.fail(w, r, http.StatusBadRequest, "Bad filter: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/jsonl; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="sqsonce-operations.jsonl"`)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	after, n := "", 0
	for {
		ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
		page, err := h.cfg.Ledger.List(ctx, f, after, ledger.MaxListLimit)
		cancel()
		if err == nil {
			rc.SetWriteDeadline(time.Now().Add(exportWriteTimeout))
			for _, rec := range page.Records {
				if err = enc.Encode(ledger.ToJSON(rec)); err != nil {
					break
				}
				n++
			}
			rc.Flush()
		}
		if err != nil {
			h.count("export", "failed")
			h.log.Error("console: export broke off", "actor", actor(r), "records", n, "error", err)
			// The client sees a last line that is not a record.
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	h.count("export", "done")
	h.log.Info("console: exported operations", "actor", actor(r), "records", n, "filter", r.URL.RawQuery)
}

// recordFields are the rows of an operation's page.
func recordFields(rec ledger.Record) [][2]string {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000 MST")
	}
	state := rec.State.String()
	if rec.Permanent {
		state += " (permanent: replays and redeliveries are not run until it is reset)"
	}
	attempts := strconv.Itoa(rec.Attempts)
	if rec.State == ledger.StateInProgress {
		attempts += " before the current claim's" // counted when it ends
	}
	return [][2]string{
		{"Key", rec.Key},
		{"State", state},
		{"Attempts", attempts},
		{"Owner of the last claim", cmpOr(rec.Owner, "—")},
		{"Lease expires", ts(rec.LeaseExpiry)},
		{"First seen", ts(rec.FirstSeen)},
		{"Last attempt started", ts(rec.Claimed)},
		{"Completed", ts(rec.Completed)},
		{"Last written", ts(rec.Updated)},
		{"Expires", ts(rec.Expires)},
		{"Last SQS message id", cmpOr(rec.MessageID, "—")},
		{"Payload fingerprint", cmpOr(hex.EncodeToString(rec.Fingerprint), "—")},
	}
}

func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
