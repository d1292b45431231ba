package dynamodb

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// An operation's story on DynamoDB: its attempt history is a list
// attribute of its item (hist), one map per attempt, to which a completion
// or a failure appends with list_append in its one conditional write; its
// kept payload is a binary attribute (payload, ledger.EncodePayload). An
// older sqsonce neither reads nor writes them, and its updates leave them
// in place. The counts per minute are items of their own, one per hour
// (minPrefix and the Unix hour), an attribute per minute of it, added to
// with ADD.
const (
	attrHistory = "hist"    // L of M: s, e (N: Unix nanoseconds), o, r, x (S)
	attrPayload = "payload" // B

	minPrefix = flowPrefix + "min#"
)

// attemptAV is a as an element of hist. A start that is not known (zero)
// is left out: a write cannot read the claim's time from the item.
func attemptAV(a ledger.Attempt) types.AttributeValue {
	m := map[string]types.AttributeValue{
		"e": timeAV(a.End), "o": strAV(a.Owner), "r": strAV(string(a.Outcome)),
	}
	if !a.Start.IsZero() {
		m["s"] = timeAV(a.Start)
	}
	if a.Error != "" {
		m["x"] = strAV(textcut.Cut(a.Error, ledger.MaxAttemptError))
	}
	return &types.AttributeValueMemberM{Value: m}
}

// historyAV is h as hist.
func historyAV(h []ledger.Attempt) types.AttributeValue {
	l := make([]types.AttributeValue, len(h))
	for i, a := range h {
		l[i] = attemptAV(a)
	}
	return &types.AttributeValueMemberL{Value: l}
}

// storyOf fills rec's history and payload from item; what it cannot read
// counts as none.
func storyOf(item map[string]types.AttributeValue, rec *ledger.Record) {
	if l, ok := item[attrHistory].(*types.AttributeValueMemberL); ok {
		rec.History = nil
		for _, v := range l.Value[max(len(l.Value)-ledger.MaxHistory, 0):] {
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				continue
			}
			d := decoder{item: m.Value}
			a := ledger.Attempt{Start: d.time("s", false), End: d.time("e", false), Owner: d.str("o", false, ledger.MaxOwnerLen),
				Outcome: ledger.AttemptOutcome(d.str("r", false, 32)), Error: d.str("x", false, ledger.MaxAttemptError)}
			if d.err == "" {
				rec.History = append(rec.History, a)
			}
		}
	}
	if b, ok := item[attrPayload].(*types.AttributeValueMemberB); ok {
		rec.Payload = ledger.DecodePayload(b.Value)
	}
}

// history is the part of a completion's or a failure's write that ends its
// attempt: the attempt appended to hist, and the payload kept. full, once
// a write found hist full, is the history read then: the write sets hist
// whole, the oldest attempts left out.
type history struct {
	started time.Time
	outcome ledger.AttemptOutcome
	errText string
	payload *ledger.Payload
	full    []ledger.Attempt
	owner   string
}

// claimTime fills h's start, when the caller did not say it, with the
// time of the claim of h's owner on key: a write cannot read it from the
// item, so it is read first (the worker always says when an attempt
// started; this read is for the callers that do not).
func (h *history) claimTime(ctx context.Context, l *Ledger, key string) {
	if !h.started.IsZero() {
		return
	}
	if cur, err := l.read(ctx, key); err == nil && cur != nil && cur.Owner == h.owner && cur.State == ledger.StateInProgress {
		h.started = cur.Claimed
	}
}

// set adds the clauses of h to w, for an attempt that ends at now, and
// the condition that hist has room for it (unless it is set whole).
func (h *history) set(w *write, now time.Time) {
	e := w.e
	a := ledger.Attempt{Start: h.started, End: now, Owner: h.owner, Outcome: h.outcome, Error: h.errText}
	if a.Start.After(now) {
		a.Start = time.Time{}
	}
	if h.full != nil {
		r := ledger.Record{History: h.full, Attempts: 1, Owner: h.owner}
		ledger.EndAttempt(&r, a.Start, now, h.outcome, h.errText)
		w.u.set = append(w.u.set, e.n(attrHistory)+" = "+e.v("hist", historyAV(r.History)))
	} else {
		w.u.set = append(w.u.set, e.n(attrHistory)+" = list_append(if_not_exists("+e.n(attrHistory)+", "+
			e.v("nohist", &types.AttributeValueMemberL{Value: []types.AttributeValue{}})+"), "+
			e.v("attempt", &types.AttributeValueMemberL{Value: []types.AttributeValue{attemptAV(a)}})+")")
		w.cond += " AND (attribute_not_exists(" + e.n(attrHistory) + ") OR size(" + e.n(attrHistory) + ") < " +
			e.v("maxhist", intAV(ledger.MaxHistory)) + ")"
	}
	if h.payload != nil {
		w.u.set = append(w.u.set, e.n(attrPayload)+" = "+e.v("payload", binAV(ledger.EncodePayload(h.payload.Bounded()))))
	}
}

// full reports whether cur, in progress under h's owner, has a full
// history: the write that failed its condition is made again setting the
// history whole.
func (h *history) fullIn(cur *ledger.Record) bool {
	if h.full == nil && cur != nil && cur.Owner == h.owner && cur.State == ledger.StateInProgress && len(cur.History) >= ledger.MaxHistory {
		h.full = cur.History
		return true
	}
	return false
}

// endTakenOver appends to the history of key, which a claim by owner took
// over from old (in progress), the attempt it ended, with a second write
// conditioned on the claim: a claim is one conditional write that cannot
// read the item first. It is the record's history at most a moment late,
// and missing when this write fails (it is not tried again).
func (l *Ledger) endTakenOver(ctx context.Context, key, owner string, old *ledger.Record, now time.Time) {
	outcome := ledger.AttemptLapsed
	if old.LeaseExpiry.After(now) {
		outcome = ledger.AttemptSuperseded
	}
	r := ledger.Record{History: old.History, Attempts: 1, Owner: old.Owner, Claimed: old.Claimed}
	ledger.EndAttempt(&r, old.Claimed, now, outcome, "")
	e := newExpr()
	_ = l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName:        l.table,
			Key:              keyAttrs(key),
			UpdateExpression: aws.String("SET " + e.n(attrHistory) + " = " + e.v("hist", historyAV(r.History))),
			ConditionExpression: aws.String(e.n(attrOwner) + " = " + e.v("owner", strAV(owner)) + " AND " +
				e.n(attrState) + " = " + e.v("inprog", strAV(stateInProgress))),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
		})
		return err
	})
}

// tallyMinutes counts the transitions of a batch that took effect as
// completions or failures of this minute, and writes the counts gathered
// when they are due.
func (l *Ledger) tallyMinutes(ctx context.Context, errs []error, failed bool) {
	n := 0
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	if failed {
		l.minutes.Add(l.now(), 0, n)
	} else {
		l.minutes.Add(l.now(), n, 0)
	}
	if l.minutes.Due(ledger.MinuteFlush) {
		l.flushMinutes(ctx)
	}
}

// minuteAttrs are the names of a minute's counts in its hour's item.
func minuteAttrs(minute int64) (completed, failed string) {
	m := strconv.FormatInt(minute%60, 10)
	return "c" + m, "f" + m
}

// flushMinutes adds the counts gathered to the hours' items, one update
// per hour, which expire MinuteKeep after their hour. Counts that cannot
// be written are kept for the next time.
func (l *Ledger) flushMinutes(ctx context.Context) {
	c := l.minutes.Take()
	hours := map[int64]map[int64][2]int{}
	for m, n := range c {
		if hours[m/60] == nil {
			hours[m/60] = map[int64][2]int{}
		}
		hours[m/60][m] = n
	}
	for hour, ms := range hours {
		e := newExpr()
		var adds []string
		for m, n := range ms {
			cn, fn := minuteAttrs(m)
			adds = append(adds, e.n(cn)+" "+e.v(cn, intAV(int64(n[0]))), e.n(fn)+" "+e.v(fn, intAV(int64(n[1]))))
		}
		exp := time.Unix((hour+1)*3600, 0).Add(ledger.MinuteKeep)
		err := l.call(ctx, func(ctx context.Context) error {
			_, err := l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
				TableName: l.table,
				Key:       map[string]types.AttributeValue{attrPK: strAV(minPrefix + strconv.FormatInt(hour, 10))},
				UpdateExpression: aws.String("SET " + e.n(attrExpires) + " = " + e.v("exp", timeAV(exp)) + ", " +
					e.n(attrTTL) + " = " + e.v("ttl", intAV(ttlSeconds(exp))) + " ADD " + joinComma(adds)),
				ExpressionAttributeNames:  e.nameMap(),
				ExpressionAttributeValues: e.vals(),
			})
			return err
		})
		if err != nil {
			l.minutes.Return(ms)
		}
	}
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

// activity reads the counts per minute since since (at most MinuteKeep
// ago), one strongly consistent read per hour.
func (l *Ledger) activity(ctx context.Context, since time.Time) ([]ledger.Minute, error) {
	now := l.now()
	if since.Before(now.Add(-ledger.MinuteKeep)) {
		since = now.Add(-ledger.MinuteKeep)
	}
	var out []ledger.Minute
	for hour := since.Unix() / 3600; hour <= now.Unix()/3600; hour++ {
		item, err := l.getItem(ctx, minPrefix+strconv.FormatInt(hour, 10))
		if err != nil {
			return nil, fmt.Errorf("activity: %w", err)
		}
		d := decoder{item: item}
		for m := hour * 60; m < (hour+1)*60; m++ {
			cn, fn := minuteAttrs(m)
			c, f := d.int(cn, false, 1<<62), d.int(fn, false, 1<<62)
			if c > 0 || f > 0 {
				out = append(out, ledger.Minute{Start: time.Unix(m*60, 0), Completed: int(c), Failed: int(f)})
			}
		}
	}
	return out, nil
}
