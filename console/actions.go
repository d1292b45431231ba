package console

import (
	"net/http"
	"sync"
	"time"
)

// maxActions is how many changes the action log keeps.
const maxActions = 200

// logEntry is one change made from the console, as the action log keeps it:
// who, what, on what filter, how many it touched, and how it ended.
type logEntry struct {
	At     time.Time
	Actor  string
	What   string // "replay", "replay dry run", "forget", "pause", …
	Filter string // the filter or the target, as the operator gave it
	Count  int    // how many it touched (or would, for a dry run); -1: not known yet
	Done   bool   // ended; Outcome says how
	// Outcome is how it ended ("done", "refused: …", "failed: …").
	Outcome string
	Link    string // the page of its job, if it has one
}

// actionLog is the console's log of changes, in memory: a restart starts
// it anew (each change is logged too, with its actor). It is safe for
// concurrent use.
type actionLog struct {
	mu      sync.Mutex
	entries []*logEntry // oldest first
}

// add appends a and returns it, for its end to be recorded (end).
func (l *actionLog) add(a logEntry) *logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := &a
	l.entries = append(l.entries, e)
	if len(l.entries) > maxActions {
		l.entries = l.entries[len(l.entries)-maxActions:]
	}
	return e
}

// end records how a ended and how many it touched.
func (l *actionLog) end(a *logEntry, count int, outcome string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a.Count, a.Outcome, a.Done = count, outcome, true
}

// list returns copies of the entries, newest first.
func (l *actionLog) list() []logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]logEntry, 0, len(l.entries))
	for i := len(l.entries) - 1; i >= 0; i-- {
		out = append(out, *l.entries[i])
	}
	return out
}

// record logs a change that ended at once.
func (h *Handler) record(r *http.Request, what, filter string, count int, outcome string) {
	h.changes.add(logEntry{At: h.cfg.now(), Actor: actor(r), What: what, Filter: filter, Count: count, Outcome: outcome, Done: true})
}

func (h *Handler) actionsPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, "actions", "Actions", h.changes.list())
}
