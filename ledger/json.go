package ledger

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"
	"unicode/utf8"
)

// RecordJSON is a record as sqsonce prints and exports it (JSON Lines of
// `sqsonce ledger export` and of the console's export), and as the
// worker's socket carries it. Times are RFC 3339 in UTC; absent times are
// omitted.
type RecordJSON struct {
	Key          string     `json:"key"`
	State        string     `json:"state"`
	Permanent    bool       `json:"permanent,omitempty"`
	Fingerprint  string     `json:"fingerprint,omitempty"` // hex
	Attempts     int        `json:"attempts"`
	Owner        string     `json:"owner,omitempty"`
	LeaseExpiry  *time.Time `json:"lease_expiry,omitempty"`
	FirstSeen    *time.Time `json:"first_seen,omitempty"`
	Claimed      *time.Time `json:"claimed,omitempty"`
	Updated      *time.Time `json:"updated,omitempty"`
	Completed    *time.Time `json:"completed,omitempty"`
	Expires      *time.Time `json:"expires,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	MessageID    string     `json:"message_id,omitempty"`
	Result       string     `json:"result,omitempty"`        // when valid UTF-8
	ResultBase64 string     `json:"result_base64,omitempty"` // otherwise

	OwnFailures      int        `json:"own_failures,omitempty"`
	OutageFailures   int        `json:"outage_failures,omitempty"`
	DeadLettered     *time.Time `json:"dead_lettered,omitempty"`
	DeadLetterReason string     `json:"dead_letter_reason,omitempty"`
	DeadLetterCopyID string     `json:"dead_letter_copy_id,omitempty"`

	History []AttemptJSON `json:"history,omitempty"`
	Payload *PayloadJSON  `json:"payload,omitempty"`
}

// AttemptJSON is an attempt of a record's history in its JSON form.
type AttemptJSON struct {
	Start   *time.Time `json:"start,omitempty"`
	End     *time.Time `json:"end,omitempty"`
	Owner   string     `json:"owner,omitempty"`
	Outcome string     `json:"outcome"`
	Error   string     `json:"error,omitempty"`
	Derived bool       `json:"derived,omitempty"`
}

// PayloadJSON is a kept payload in its JSON form: the body as text when it
// is valid UTF-8, else in base64.
type PayloadJSON struct {
	Body       string            `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
	Cut        bool              `json:"cut,omitempty"`
}

// ToJSON is r in its JSON form.
func ToJSON(r Record) RecordJSON {
	t := func(v time.Time) *time.Time {
		if v.IsZero() {
			return nil
		}
		u := v.UTC()
		return &u
	}
	j := RecordJSON{
		Key: r.Key, State: r.State.String(), Permanent: r.Permanent, Attempts: r.Attempts, Owner: r.Owner,
		LeaseExpiry: t(r.LeaseExpiry), FirstSeen: t(r.FirstSeen), Claimed: t(r.Claimed), Updated: t(r.Updated),
		Completed: t(r.Completed), Expires: t(r.Expires), LastError: r.LastError, MessageID: r.MessageID,
		OwnFailures: r.OwnFailures, OutageFailures: r.OutageFailures, DeadLettered: t(r.DeadLettered),
		DeadLetterReason: r.DeadLetterReason, DeadLetterCopyID: r.DeadLetterCopyID,
	}
	if len(r.Fingerprint) > 0 {
		j.Fingerprint = hex.EncodeToString(r.Fingerprint)
	}
	if utf8.Valid(r.Result) {
		j.Result = string(r.Result)
	} else {
		j.ResultBase64 = base64.StdEncoding.EncodeToString(r.Result)
	}
	for _, a := range r.History {
		j.History = append(j.History, AttemptJSON{Start: t(a.Start), End: t(a.End), Owner: a.Owner, Outcome: string(a.Outcome),
			Error: a.Error, Derived: a.Derived})
	}
	if p := r.Payload; p != nil {
		j.Payload = &PayloadJSON{Attributes: p.Attributes, Cut: p.Cut}
		if utf8.Valid(p.Body) {
			j.Payload.Body = string(p.Body)
		} else {
			j.Payload.BodyBase64 = base64.StdEncoding.EncodeToString(p.Body)
		}
	}
	return j
}

// FromJSON reads a record back from its JSON form.
func FromJSON(j RecordJSON) (Record, error) {
	state, err := ParseState(j.State)
	if err != nil {
		return Record{}, err
	}
	t := func(p *time.Time) time.Time {
		if p == nil {
			return time.Time{}
		}
		return *p
	}
	r := Record{
		Key: j.Key, State: state, Permanent: j.Permanent, Attempts: j.Attempts, Owner: j.Owner,
		LeaseExpiry: t(j.LeaseExpiry), FirstSeen: t(j.FirstSeen), Claimed: t(j.Claimed), Updated: t(j.Updated),
		Completed: t(j.Completed), Expires: t(j.Expires), LastError: j.LastError, MessageID: j.MessageID,
		OwnFailures: j.OwnFailures, OutageFailures: j.OutageFailures, DeadLettered: t(j.DeadLettered),
		DeadLetterReason: j.DeadLetterReason, DeadLetterCopyID: j.DeadLetterCopyID,
	}
	if r.Fingerprint, err = hex.DecodeString(j.Fingerprint); err != nil {
		return Record{}, fmt.Errorf("fingerprint: %w", err)
	}
	if j.ResultBase64 != "" {
		if r.Result, err = base64.StdEncoding.DecodeString(j.ResultBase64); err != nil {
			return Record{}, fmt.Errorf("result: %w", err)
		}
	} else if j.Result != "" {
		r.Result = []byte(j.Result)
	}
	for _, a := range j.History {
		r.History = append(r.History, Attempt{Start: t(a.Start), End: t(a.End), Owner: a.Owner, Outcome: AttemptOutcome(a.Outcome),
			Error: a.Error, Derived: a.Derived})
	}
	if p := j.Payload; p != nil {
		r.Payload = &Payload{Attributes: p.Attributes, Cut: p.Cut, Body: []byte(p.Body)}
		if p.BodyBase64 != "" {
			if r.Payload.Body, err = base64.StdEncoding.DecodeString(p.BodyBase64); err != nil {
				return Record{}, fmt.Errorf("payload: %w", err)
			}
		}
		if len(r.Payload.Body) == 0 {
			r.Payload.Body = nil
		}
	}
	return r, nil
}
