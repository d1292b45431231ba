package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// maxPause bounds a pause by hand: it ends by itself at the latest then.
const maxPause = 14 * 24 * time.Hour

// pause pauses the intake of a scope by hand until a time, as `sqsonce
// flow pause` does: it writes the scope's flow document (worker.PauseDoc,
// paused, manual, by the operator, with the reason) over whatever the
// scope held, with a compare-and-set, to expire at the end of the pause.
// The workers of the scope see it within their next read of it (about a
// second) and receive nothing until it ends or a resume deletes it.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	scope := strings.TrimSpace(r.FormValue("scope"))
	reason := strings.Join(strings.Fields(r.FormValue("reason")), " ") // one line, as the CLI keeps it
	untilText := strings.TrimSpace(r.FormValue("until"))
	refuse := func(status int, msg string) {
		h.count("pause", "refused")
		h.record(r, "pause", scope, 0, "refused: "+msg)
		h.fail(w, r, status, msg)
	}
	if err := ledger.ValidateScope(scope); err != nil {
		refuse(http.StatusBadRequest, "Scope: "+err.Error())
		return
	}
	if reason == "" || len(reason) > ledger.MaxErrorLen {
		refuse(http.StatusBadRequest, fmt.Sprintf("Reason: say why, in at most %d bytes: the workers' operators read it.", ledger.MaxErrorLen))
		return
	}
	if !utf8.ValidString(reason) || strings.ContainsFunc(reason, func(r rune) bool { return !strconv.IsPrint(r) }) {
		refuse(http.StatusBadRequest, "Reason: printable text only (no control or format characters): operators read it on their terminals too.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	cur, err := h.cfg.Ledger.GetFlow(ctx, scope)
	if err != nil {
		h.count("pause", "failed")
		h.record(r, "pause", scope, 0, "failed: "+err.Error())
		h.fail(w, r, http.StatusBadGateway, "Could not read the scope's state: "+err.Error())
		return
	}
	until, err := parseUntil(untilText, cur.Now)
	if err != nil {
		refuse(http.StatusBadRequest, "Until: "+err.Error())
		return
	}
	doc := worker.PauseDoc{State: worker.PausePaused, Since: cur.Now, Reason: reason, By: actor(r) + " (console)", Manual: true}
	data, err := json.Marshal(doc)
	if err != nil {
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	_, err = h.cfg.Ledger.PutFlow(ctx, ledger.FlowDoc{Scope: scope, Data: data, TTL: until.Sub(cur.Now)}, cur.Doc.Version)
	if errors.Is(err, ledger.ErrConflict) {
		refuse(http.StatusConflict, "The scope's state changed while it was paused (a worker's probe, another operator): look at it again, then pause again.")
		return
	}
	if err != nil {
		h.count("pause", "failed")
		h.record(r, "pause", scope, 0, "failed: "+err.Error())
		h.fail(w, r, http.StatusBadGateway, "Could not pause: "+err.Error())
		return
	}
	h.cache.forget()
	h.count("pause", "done")
	h.record(r, "pause", fmt.Sprintf("%s until %s: %s", scope, until.UTC().Format(time.RFC3339), reason), 1, "done")
	h.log.Info("console: paused the intake of a scope", "actor", actor(r), "scope", scope, "until", until, "reason", reason)
	http.Redirect(w, r, h.link("/"), http.StatusSeeOther)
}

// resume ends a scope's pause, by hand or automatic, as `sqsonce flow
// resume` does: it deletes the scope's flow document, with a
// compare-and-set on the version the page showed.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	scope := r.FormValue("scope")
	refuse := func(status int, msg string) {
		h.count("resume", "refused")
		h.record(r, "resume", scope, 0, "refused: "+msg)
		h.fail(w, r, status, msg)
	}
	if err := ledger.ValidateScope(scope); err != nil {
		refuse(http.StatusBadRequest, "Scope: "+err.Error())
		return
	}
	var version int64
	if _, err := fmt.Sscan(r.FormValue("version"), &version); err != nil || version < 1 {
		refuse(http.StatusBadRequest, "No version of the scope's state: resume from the overview's button.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	err := h.cfg.Ledger.DeleteFlow(ctx, scope, version)
	switch {
	case errors.Is(err, ledger.ErrConflict):
		refuse(http.StatusConflict, "The scope's state changed since the page was drawn (a probe, another operator): look at it again.")
		return
	case errors.Is(err, ledger.ErrNotFound):
		refuse(http.StatusConflict, "The scope is not paused any more.")
		return
	case err != nil:
		h.count("resume", "failed")
		h.record(r, "resume", scope, 0, "failed: "+err.Error())
		h.fail(w, r, http.StatusBadGateway, "Could not resume: "+err.Error())
		return
	}
	h.cache.forget()
	h.count("resume", "done")
	h.record(r, "resume", scope, 1, "done")
	h.log.Info("console: resumed the intake of a scope", "actor", actor(r), "scope", scope)
	http.Redirect(w, r, h.link("/"), http.StatusSeeOther)
}

// parseUntil reads the end of a pause: a duration from now (30m, 4h) or a
// time (RFC 3339, or a date and time in UTC), in the future and at most
// maxPause away.
func parseUntil(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("say until when: a duration such as 30m or 4h, or a time in UTC")
	}
	var t time.Time
	if d, err := time.ParseDuration(s); err == nil {
		t = now.Add(d)
	} else {
		ok := false
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04"} {
			if t, err = time.ParseInLocation(layout, s, time.UTC); err == nil {
				ok = true
				break
			}
		}
		if !ok {
			return time.Time{}, fmt.Errorf("%q: want a duration such as 30m or 4h, or a time such as 2026-01-02T15:04 (UTC)", s)
		}
	}
	switch {
	case !t.After(now):
		return time.Time{}, fmt.Errorf("%q is not in the future", s)
	case t.Sub(now) > maxPause:
		return time.Time{}, fmt.Errorf("%q is more than %v away: the queue's messages would expire while they wait", s, maxPause)
	}
	return t, nil
}
