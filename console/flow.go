package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// pause pauses the intake of a scope by hand until a time, as `sqsonce
// flow pause` does (worker.PauseByHand): it writes the scope's flow
// document (paused, manual, by the operator, with the reason) over
// whatever the scope held, keeping an automatic pause's start, with a
// compare-and-set, to expire at the end of the pause. The whole pause must
// end below the queue's message retention, read from SQS, so that nothing
// expires while it holds. The workers of the scope see it within their
// next read of it (about a second) and receive nothing until it ends or a
// resume deletes it.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	scope := strings.TrimSpace(r.FormValue("scope"))
	reason := strings.Join(strings.Fields(r.FormValue("reason")), " ") // one line, as the CLI keeps it
	untilText := strings.TrimSpace(r.FormValue("until"))
	refuse := func(status int, msg string) {
		h.count("pause", "refused")
		h.record(r, "pause", scope, 0, "refused: "+msg)
		h.fail(w, r, status, msg)
	}
	failed := func(msg string, err error) {
		h.count("pause", "failed")
		h.record(r, "pause", scope, 0, "failed: "+err.Error())
		h.fail(w, r, http.StatusBadGateway, msg+err.Error())
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
	until, err := parseUntil(untilText, time.Now())
	if err != nil {
		refuse(http.StatusBadRequest, "Until: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	retention, err := h.retention(ctx)
	if err != nil {
		failed("Could not read the queue's message retention, which bounds a pause: ", err)
		return
	}
	p, err := worker.PauseByHand(ctx, h.cfg.Ledger, scope, until, reason, actor(r)+" (console)", retention)
	switch {
	case errors.Is(err, worker.ErrPauseTooLong):
		refuse(http.StatusBadRequest, "Until: "+err.Error()+": pause for less, or raise the queue's MessageRetentionPeriod.")
		return
	case errors.Is(err, ledger.ErrInvalidArgument):
		refuse(http.StatusBadRequest, "Until: "+err.Error())
		return
	case errors.Is(err, ledger.ErrConflict):
		refuse(http.StatusConflict, "The scope's state kept changing (workers' probes, another operator): look at it again, then pause again.")
		return
	case err != nil:
		failed("Could not pause: ", err)
		return
	}
	h.cache.forget()
	h.count("pause", "done")
	h.record(r, "pause", fmt.Sprintf("%s until %s: %s", scope, until.UTC().Format(time.RFC3339), reason), 1, "done")
	h.log.Info("console: paused the intake of a scope", "actor", actor(r), "scope", scope, "until", until, "reason", reason,
		"since", p.Doc.Since, "was_paused", p.Was.State == worker.PausePaused)
	http.Redirect(w, r, h.link("/"), http.StatusSeeOther)
}

// retention is the queue's message retention, which bounds a pause.
func (h *Handler) retention(ctx context.Context) (time.Duration, error) {
	out, err := h.cfg.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       &h.cfg.QueueURL,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMessageRetentionPeriod},
	})
	if err != nil {
		return 0, err
	}
	s, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)])
	if err != nil || s <= 0 {
		return 0, fmt.Errorf("the queue's MessageRetentionPeriod reads %q", out.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)])
	}
	return time.Duration(s) * time.Second, nil
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
// time (RFC 3339, or a date and time in UTC), in the future (the queue's
// retention bounds it further, in worker.PauseByHand).
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
	if !t.After(now) {
		return time.Time{}, fmt.Errorf("%q is not in the future", s)
	}
	return t, nil
}
