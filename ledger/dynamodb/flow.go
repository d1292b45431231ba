package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// Flow control on DynamoDB: items of the ledger's table under keys that
// start with flowPrefix, which the record scans of every sqsonce (older
// ones included) leave out. A flow document is one item, a rate bucket one,
// a slot one per pool and index, a process one; the index item lists the
// scopes of documents and the ids of processes, so that ListFlows and
// Processes read those items and not the whole table. Items that expire
// carry expires (Unix nanoseconds) and ttl like records: TTL deletion or
// Sweep removes them.
//
// The schema item's flow_schema records ledger.FlowSchemaVersion; Open
// refuses a table without it (ErrNoSchema: run `sqsonce ledger init`), so
// that a fleet is upgraded by one explicit step that `check` can see.
const (
	flowPrefix = "flow#"
	docPrefix  = flowPrefix + "doc#"
	ratePrefix = flowPrefix + "rate#"
	slotPrefix = flowPrefix + "slot#"
	procPrefix = flowPrefix + "proc#"
	indexKey   = flowPrefix + "index"
)

// Attributes of flow items.
const (
	attrFlowSchema = "flow_schema" // N, on the schema item

	attrDocVersion = "ver"         // N: FlowDoc.Version
	attrDocData    = "data"        // B; absent when empty
	attrDocExpires = "doc_expires" // N: Unix nanoseconds; absent: never

	attrTAT   = "tat"   // N: Unix nanoseconds
	attrRate  = "rate"  // N
	attrBurst = "burst" // N

	attrHost      = "host"         // S
	attrPID       = "pid"          // N
	attrSWVersion = "version"      // S: the sqsonce version
	attrQueue     = "queue"        // S
	attrStarted   = "started"      // N: Unix nanoseconds
	attrBeat      = "beat"         // N: Unix nanoseconds
	attrInHand    = "in_hand"      // N
	attrPaused    = "paused"       // BOOL
	attrPausedWhy = "paused_why"   // S
	attrProcUntil = "proc_expires" // N: Unix nanoseconds

	attrIndexDocs  = "docs"  // SS on the index item
	attrIndexProcs = "procs" // SS on the index item
)

// busyHint bounds how long TakeSlots skips a slot it found held without
// learning its lease, and any slot it found held: another holder may
// release it sooner.
const busyHint = time.Second

// flowState is what a Ledger remembers between flow calls.
type flowState struct {
	mu sync.Mutex
	// bucket is what this host last saw of each rate bucket: Reserve
	// writes conditioned on its TAT, so that a bucket costs one request
	// when no other host moved it since.
	bucket map[string]seenBucket
	// busy is when each slot this host found held may be free again, by
	// this host's clock: TakeSlots does not try it before.
	busy map[string]time.Time
	// listed are the processes this handle has put in the index item.
	listed map[string]bool
	// pruned is when bucket and busy were last rid of what no longer
	// helps: with a partition per tenant, a long-running host sees many
	// values once.
	pruned time.Time
}

// prune drops, at most once a minute, the buckets seen idle for a minute
// (a reservation reads or conditions on one it does not remember) and
// the slots whose busy hint has passed. Called with mu held.
func (f *flowState) prune(now time.Time) {
	if now.Sub(f.pruned) < time.Minute {
		return
	}
	f.pruned = now
	idle := now.Add(-time.Minute).UnixNano()
	maps.DeleteFunc(f.bucket, func(_ string, b seenBucket) bool { return b.tat < idle })
	maps.DeleteFunc(f.busy, func(_ string, until time.Time) bool { return !until.After(now) })
}

func (f *flowState) init() {
	if f.bucket == nil {
		f.bucket, f.busy, f.listed = map[string]seenBucket{}, map[string]time.Time{}, map[string]bool{}
	}
}

func nsAV(ns int64) types.AttributeValue { return intAV(ns) }

// expiryAttrs sets expires and ttl of an item that expires at t.
func expiryAttrs(item map[string]types.AttributeValue, t time.Time) {
	item[attrExpires] = timeAV(t)
	item[attrTTL] = intAV(ttlSeconds(t))
}

// writeFlowSchema records ledger.FlowSchemaVersion on the schema item,
// never lowering it.
func (l *Ledger) writeFlowSchema(ctx context.Context) error {
	e := newExpr()
	v := e.v("fv", intAV(ledger.FlowSchemaVersion))
	err := l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName:                 l.table,
			Key:                       map[string]types.AttributeValue{attrPK: strAV(schemaKey)},
			UpdateExpression:          aws.String("SET " + e.n(attrFlowSchema) + " = " + v),
			ConditionExpression:       aws.String("attribute_exists(" + e.n(attrPK) + ") AND (attribute_not_exists(" + e.n(attrFlowSchema) + ") OR " + e.n(attrFlowSchema) + " < " + v + ")"),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
		})
		return err
	})
	if isConditionFailed(err) {
		return nil // recorded already, by this version or a newer one
	}
	if err != nil {
		return fmt.Errorf("record the flow schema: %w", err)
	}
	return nil
}

// FlowSchema returns the flow schema version recorded on the schema item by
// the newest sqsonce whose Init ran on the table (0: none that knew flow
// control).
func (l *Ledger) FlowSchema(ctx context.Context) (int, error) {
	item, err := l.getItem(ctx, schemaKey)
	if err != nil {
		return 0, fmt.Errorf("flow schema: %w", err)
	}
	d := decoder{item: item}
	v := d.int(attrFlowSchema, false, 1<<31)
	if d.err != "" {
		return 0, fmt.Errorf("flow schema: %s: %w", d.err, ledger.ErrCorrupt)
	}
	return int(v), nil
}

// checkFlowSchema refuses a table that Init has not given flow control yet.
func (l *Ledger) checkFlowSchema(ctx context.Context) error {
	v, err := l.FlowSchema(ctx)
	if err != nil {
		return err
	}
	if v < ledger.FlowSchemaVersion {
		return fmt.Errorf("table %s was set up by an older sqsonce (flow schema %d, this one needs %d): run `sqsonce ledger init` with this version to upgrade it (older workers keep working on the upgraded table): %w",
			*l.table, v, ledger.FlowSchemaVersion, ledger.ErrNoSchema)
	}
	return nil
}

// countFailure is the SET clause of a failure that counts it by its class.
func countFailure(e *expr, f *ledger.Failure) string {
	name := attrOwnFailures
	if f.Outage {
		name = attrOutageFailures
	}
	return e.n(name) + " = if_not_exists(" + e.n(name) + ", " + e.v("fzero", intAV(0)) + ") + " + e.v("fone", intAV(1))
}

// MarkDeadLettered records dead-letter marks (see ledger.DeadLetter), one
// conditional write each, up to Options.Concurrency at once (the marks of
// one key in their order), one error per mark: nil once DynamoDB has it,
// ErrNotFound without a live record, ErrNotOwner when another owner's live
// lease holds the record. The mark does not change the record's state; it
// renews its retention.
func (l *Ledger) MarkDeadLettered(ctx context.Context, ds []ledger.DeadLetter) []error {
	errs := make([]error, len(ds))
	valid := make([]bool, len(ds))
	for i := range ds {
		errs[i] = ds[i].Validate()
		valid[i] = errs[i] == nil
	}
	out := l.batch("mark dead-lettered", len(ds), func(i int) string { return ds[i].Key }, func(i int) error {
		if !valid[i] {
			return nil
		}
		return l.markDeadLettered(ctx, &ds[i])
	})
	for i := range errs {
		if valid[i] {
			errs[i] = out[i]
		}
	}
	return errs
}

func (l *Ledger) markDeadLettered(ctx context.Context, d *ledger.DeadLetter) error {
	reason := textcut.Cut(d.Reason, ledger.MaxErrorLen)
	copyID := textcut.Cut(d.CopyID, ledger.MaxMessageIDLen)
	return l.transition(ctx, "mark dead-lettered", d.Key, func(now time.Time, writeID string) *write {
		e := newExpr()
		nowV := e.v("now", timeAV(now))
		w := &write{e: e, cond: e.n(attrExpires) + " > " + nowV + " AND NOT (" + e.n(attrState) + " = " + e.v("inprog", strAV(stateInProgress)) +
			" AND " + e.n(attrOwner) + " <> " + e.v("owner", strAV(d.Owner)) + " AND " + e.n(attrLease) + " > " + nowV + ")"}
		w.u.set = append(w.u.set, e.n(attrDeadLettered)+" = "+nowV)
		if reason != "" {
			w.u.set = append(w.u.set, e.n(attrDeadLetterReason)+" = "+e.v("reason", strAV(reason)))
		}
		if copyID != "" {
			w.u.set = append(w.u.set, e.n(attrDeadLetterCopyID)+" = "+e.v("copy", strAV(copyID)))
		}
		l.stampSet(e, &w.u, now, writeID)
		return w
	}, func(cur *ledger.Record, own bool) error {
		switch {
		case cur == nil:
			return fmt.Errorf("mark dead-lettered %q: %w", d.Key, ledger.ErrNotFound)
		case own:
			return errDone
		}
		rec := *cur
		return ledger.MarkDeadLetter(&rec, d, l.now()) // nil: it may be marked now; write again
	})
}

// DeadLetterCounts counts the live records marked dead-lettered by the
// group of their reason (ledger.ReasonGroup). DynamoDB has no index of
// them here: it scans the whole table, as Stats does (about half a read
// unit per 4 KiB of table); call it seldom on a large table.
func (l *Ledger) DeadLetterCounts(ctx context.Context) (map[string]int, error) {
	e := newExpr()
	filter := "begins_with(" + e.n(attrPK) + ", " + e.v("op", strAV(opPrefix)) + ") AND attribute_exists(" + e.n(attrDeadLettered) +
		") AND " + e.n(attrExpires) + " > " + e.v("now", timeAV(l.now()))
	var mu sync.Mutex
	counts := map[string]int{}
	err := l.scanPages(ctx, 0, ddb.ScanInput{
		FilterExpression:          aws.String(filter),
		ProjectionExpression:      aws.String(e.n(attrDeadLetterReason)),
		ExpressionAttributeNames:  e.nameMap(),
		ExpressionAttributeValues: e.vals(),
	}, func(_ context.Context, items []map[string]types.AttributeValue) error {
		mu.Lock()
		defer mu.Unlock()
		for _, item := range items {
			d := decoder{item: item}
			counts[ledger.ReasonGroup(d.str(attrDeadLetterReason, false, ledger.MaxErrorLen))]++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dead-letter counts: %w", err)
	}
	return counts, nil
}

// docItem is the item of doc, written by writeID.
func docItem(doc *ledger.FlowDoc, writeID string) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		attrPK:         strAV(docPrefix + doc.Scope),
		attrDocVersion: intAV(doc.Version),
		attrUpdated:    timeAV(doc.Updated),
		attrWriteID:    strAV(writeID),
	}
	if len(doc.Data) > 0 {
		item[attrDocData] = binAV(doc.Data)
	}
	if !doc.Expires.IsZero() {
		item[attrDocExpires] = timeAV(doc.Expires)
		expiryAttrs(item, doc.Expires.Add(ledger.FlowKeep))
	}
	return item
}

// docOf decodes a flow document's item (nil: none).
func docOf(scope string, item map[string]types.AttributeValue) (*ledger.FlowDoc, string, error) {
	if item == nil {
		return nil, "", nil
	}
	d := decoder{item: item}
	doc := ledger.FlowDoc{Scope: scope}
	doc.Version = d.int(attrDocVersion, true, 1<<62)
	doc.Data = d.bin(attrDocData, ledger.MaxFlowData)
	doc.Updated = d.time(attrUpdated, true)
	doc.Expires = d.time(attrDocExpires, false)
	wid := d.str(attrWriteID, false, 64)
	if d.err != "" {
		return nil, "", fmt.Errorf("flow %q: item unreadable: %s: %w", scope, d.err, ledger.ErrCorrupt)
	}
	return &doc, wid, nil
}

// readDoc reads the document of scope with a strongly consistent read.
func (l *Ledger) readDoc(ctx context.Context, scope string) (*ledger.FlowDoc, string, error) {
	item, err := l.getItem(ctx, docPrefix+scope)
	if err != nil {
		return nil, "", err
	}
	return docOf(scope, item)
}

// flowRead is the answer of a read of scope that found d (nil: none).
func flowRead(scope string, d *ledger.FlowDoc, now time.Time) ledger.FlowRead {
	switch {
	case d == nil:
		return ledger.FlowRead{Doc: ledger.FlowDoc{Scope: scope}, Now: now}
	case !d.Live(now):
		return ledger.FlowRead{Doc: ledger.FlowDoc{Scope: scope, Version: d.Version}, Now: now}
	}
	return ledger.FlowRead{Doc: *d, Found: true, Now: now}
}

// GetFlow reads the document of scope with a strongly consistent read,
// with this host's clock. A document that expired or was deleted is not
// Found; Doc.Version is then its last version.
func (l *Ledger) GetFlow(ctx context.Context, scope string) (ledger.FlowRead, error) {
	if err := ledger.ValidateScope(scope); err != nil {
		return ledger.FlowRead{}, fmt.Errorf("get flow: %w", err)
	}
	var r ledger.FlowRead
	err := l.guard("get flow", scope, func() error {
		d, _, err := l.readDoc(ctx, scope)
		r = flowRead(scope, d, l.now())
		return err
	})
	if err != nil {
		return ledger.FlowRead{}, fmt.Errorf("get flow %q: %w", scope, err)
	}
	return r, nil
}

// PutFlow writes doc as version ifVersion+1 if the scope's stored version
// is ifVersion (see ledger.DB.PutFlow): one conditional write, and a read
// when the condition fails. A document's first version also puts its scope
// in the index item, a second request after the write.
func (l *Ledger) PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error) {
	if err := doc.Validate(); err != nil {
		return ledger.FlowRead{}, fmt.Errorf("put flow: %w", err)
	}
	if ifVersion < 0 {
		return ledger.FlowRead{}, fmt.Errorf("put flow %q: negative version %d: %w", doc.Scope, ifVersion, ledger.ErrInvalidArgument)
	}
	var r ledger.FlowRead
	var conflict bool
	err := l.guard("put flow", doc.Scope, func() error {
		now := l.now()
		next := doc
		next.Version, next.Updated = ifVersion+1, now
		if next.TTL > 0 {
			next.Expires = now.Add(next.TTL)
		}
		next.TTL = 0
		if len(next.Data) == 0 {
			next.Data = nil
		}
		writeID := newWriteID()
		e := newExpr()
		var cond string
		if ifVersion > 0 {
			cond = e.n(attrDocVersion) + " = " + e.v("if", intAV(ifVersion))
		} else {
			cond = "attribute_not_exists(" + e.n(attrPK) + ")"
		}
		err := l.call(ctx, func(ctx context.Context) error {
			_, err := l.client.PutItem(ctx, &ddb.PutItemInput{
				TableName:                 l.table,
				Item:                      docItem(&next, writeID),
				ConditionExpression:       aws.String(cond),
				ExpressionAttributeNames:  e.nameMap(),
				ExpressionAttributeValues: e.vals(),
			})
			return err
		})
		if isConditionFailed(err) {
			cur, wid, err := l.readDoc(ctx, doc.Scope)
			if err != nil {
				return err
			}
			if wid != writeID {
				r, conflict = flowRead(doc.Scope, cur, l.now()), true
				return nil
			}
			// Our own write, whose answer was lost and whose retry
			// found it.
		} else if err != nil {
			return err
		}
		r = flowRead(doc.Scope, &next, now)
		if ifVersion == 0 {
			return l.addToIndex(ctx, attrIndexDocs, doc.Scope)
		}
		return nil
	})
	if err != nil {
		return ledger.FlowRead{}, fmt.Errorf("put flow %q: %w", doc.Scope, err)
	}
	if conflict {
		return r, fmt.Errorf("put flow %q: stored version %d, not %d: %w", doc.Scope, r.Doc.Version, ifVersion, ledger.ErrConflict)
	}
	return r, nil
}

// DeleteFlow deletes the live document of scope if its version is ifVersion
// (see ledger.DB.DeleteFlow): one conditional write, and a read when the
// condition fails.
func (l *Ledger) DeleteFlow(ctx context.Context, scope string, ifVersion int64) error {
	if err := ledger.ValidateScope(scope); err != nil {
		return fmt.Errorf("delete flow: %w", err)
	}
	return l.guard("delete flow", scope, func() error {
		writeID := newWriteID()
		for try := 0; try < maxTries; try++ {
			now := l.now()
			e := newExpr()
			nowV := e.v("now", timeAV(now))
			u := &update{set: []string{
				e.n(attrDocVersion) + " = " + e.v("next", intAV(ifVersion+1)),
				e.n(attrUpdated) + " = " + nowV,
				e.n(attrDocExpires) + " = " + nowV,
				e.n(attrExpires) + " = " + e.v("exp", timeAV(now.Add(ledger.FlowKeep))),
				e.n(attrTTL) + " = " + e.v("ttl", intAV(ttlSeconds(now.Add(ledger.FlowKeep)))),
				e.n(attrWriteID) + " = " + e.v("wid", strAV(writeID)),
			}, remove: []string{e.n(attrDocData)}}
			cond := e.n(attrDocVersion) + " = " + e.v("if", intAV(ifVersion)) + " AND (attribute_not_exists(" + e.n(attrDocExpires) + ") OR " +
				e.n(attrDocExpires) + " > " + nowV + ")"
			err := l.call(ctx, func(ctx context.Context) error {
				_, err := l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
					TableName:                 l.table,
					Key:                       map[string]types.AttributeValue{attrPK: strAV(docPrefix + scope)},
					UpdateExpression:          aws.String(u.String()),
					ConditionExpression:       aws.String(cond),
					ExpressionAttributeNames:  e.nameMap(),
					ExpressionAttributeValues: e.vals(),
				})
				return err
			})
			if err == nil {
				return nil
			}
			if !isConditionFailed(err) {
				return fmt.Errorf("delete flow %q: %w", scope, err)
			}
			cur, wid, err := l.readDoc(ctx, scope)
			if err != nil {
				return fmt.Errorf("delete flow %q: %w", scope, err)
			}
			if wid == writeID {
				return nil // our own write, found by the retry
			}
			now = l.now()
			switch {
			case cur == nil || !cur.Live(now):
				return fmt.Errorf("delete flow %q: %w", scope, ledger.ErrNotFound)
			case cur.Version != ifVersion:
				return fmt.Errorf("delete flow %q: stored version %d, not %d: %w", scope, cur.Version, ifVersion, ledger.ErrConflict)
			}
			// It changed between the write and the read: write again.
		}
		return errContended("delete flow", scope)
	})
}

// addToIndex puts name in the set attr of the index item.
func (l *Ledger) addToIndex(ctx context.Context, attr, name string) error {
	e := newExpr()
	return l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName:                 l.table,
			Key:                       map[string]types.AttributeValue{attrPK: strAV(indexKey)},
			UpdateExpression:          aws.String("ADD " + e.n(attr) + " " + e.v("name", &types.AttributeValueMemberSS{Value: []string{name}})),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
		})
		return err
	})
}

// dropFromIndex takes name out of the set attr of the index item.
func (l *Ledger) dropFromIndex(ctx context.Context, attr, name string) error {
	e := newExpr()
	return l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName:                 l.table,
			Key:                       map[string]types.AttributeValue{attrPK: strAV(indexKey)},
			UpdateExpression:          aws.String("DELETE " + e.n(attr) + " " + e.v("name", &types.AttributeValueMemberSS{Value: []string{name}})),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
		})
		return err
	})
}

// indexed reads the names in the set attr of the index item, and the item
// of each (nil where there is none), prefix+name, up to Options.Concurrency
// at once. A name whose item is gone (swept, or deleted by TTL) is taken
// out of the index, and put back when its item turns out to exist again
// (written meanwhile: a writer puts a name in after its item).
func (l *Ledger) indexed(ctx context.Context, attr, prefix string) ([]string, []map[string]types.AttributeValue, error) {
	idx, err := l.getItem(ctx, indexKey)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	if ss, ok := idx[attr].(*types.AttributeValueMemberSS); ok {
		names = slices.Clone(ss.Value)
	}
	slices.Sort(names)
	items := make([]map[string]types.AttributeValue, len(names))
	errs := make([]error, len(names))
	l.perKey(len(names), func(i int) string { return names[i] }, func(i int) {
		items[i], errs[i] = l.getItem(ctx, prefix+names[i])
		if errs[i] != nil || items[i] != nil {
			return
		}
		if errs[i] = l.dropFromIndex(ctx, attr, names[i]); errs[i] != nil {
			return
		}
		if items[i], errs[i] = l.getItem(ctx, prefix+names[i]); errs[i] == nil && items[i] != nil {
			errs[i] = l.addToIndex(ctx, attr, names[i])
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return names, items, nil
}

// ListFlows returns the live flow documents, by scope: a read of the index
// item and one of each document's item.
func (l *Ledger) ListFlows(ctx context.Context) ([]ledger.FlowDoc, error) {
	var docs []ledger.FlowDoc
	err := l.guard("list flows", indexKey, func() error {
		names, items, err := l.indexed(ctx, attrIndexDocs, docPrefix)
		if err != nil {
			return err
		}
		now := l.now()
		for i, name := range names {
			d, _, err := docOf(name, items[i])
			if err != nil {
				return err
			}
			if d != nil && d.Live(now) {
				docs = append(docs, *d)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	return docs, nil
}

// PutProcess registers p or renews its registration (see
// ledger.DB.PutProcess), with this host's clock: one write, and the first
// time this handle puts the process, a second that lists it in the index
// item.
func (l *Ledger) PutProcess(ctx context.Context, p ledger.Process) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("put process: %w", err)
	}
	return l.guard("put process", p.ID, func() error {
		q := ledger.StampProcess(p, l.now())
		item := map[string]types.AttributeValue{
			attrPK:        strAV(procPrefix + q.ID),
			attrPID:       intAV(int64(q.PID)),
			attrBeat:      timeAV(q.Beat),
			attrInHand:    intAV(int64(q.InHand)),
			attrPaused:    boolAV(q.Paused),
			attrProcUntil: timeAV(q.Expires),
		}
		for name, s := range map[string]string{attrHost: q.Host, attrSWVersion: q.Version, attrQueue: q.Queue, attrPausedWhy: q.PausedWhy} {
			if s != "" {
				item[name] = strAV(s)
			}
		}
		if !q.Started.IsZero() {
			item[attrStarted] = timeAV(q.Started)
		}
		expiryAttrs(item, q.Expires.Add(ledger.ProcessKeep))
		err := l.call(ctx, func(ctx context.Context) error {
			_, err := l.client.PutItem(ctx, &ddb.PutItemInput{TableName: l.table, Item: item})
			return err
		})
		if err != nil {
			return fmt.Errorf("put process %q: %w", p.ID, err)
		}
		l.flow.mu.Lock()
		l.flow.init()
		listed := l.flow.listed[p.ID]
		l.flow.mu.Unlock()
		if listed {
			return nil
		}
		if err := l.addToIndex(ctx, attrIndexProcs, p.ID); err != nil {
			return fmt.Errorf("put process %q: list it: %w", p.ID, err)
		}
		l.flow.mu.Lock()
		l.flow.listed[p.ID] = true
		l.flow.mu.Unlock()
		return nil
	})
}

// RemoveProcess removes the registration of id; an absent id is not an
// error.
func (l *Ledger) RemoveProcess(ctx context.Context, id string) error {
	if err := ledger.ValidateScope(id); err != nil {
		return fmt.Errorf("remove process: %w", err)
	}
	return l.guard("remove process", id, func() error {
		err := l.call(ctx, func(ctx context.Context) error {
			_, err := l.client.DeleteItem(ctx, &ddb.DeleteItemInput{TableName: l.table, Key: map[string]types.AttributeValue{attrPK: strAV(procPrefix + id)}})
			return err
		})
		if err == nil {
			err = l.dropFromIndex(ctx, attrIndexProcs, id)
		}
		if err != nil {
			return fmt.Errorf("remove process %q: %w", id, err)
		}
		l.flow.mu.Lock()
		l.flow.init()
		delete(l.flow.listed, id)
		l.flow.mu.Unlock()
		return nil
	})
}

// Processes returns the registered processes, by ID (see
// ledger.DB.Processes): a read of the index item and one of each process's
// item. BeatAge is measured with this host's clock.
func (l *Ledger) Processes(ctx context.Context) ([]ledger.Process, error) {
	var ps []ledger.Process
	err := l.guard("processes", indexKey, func() error {
		names, items, err := l.indexed(ctx, attrIndexProcs, procPrefix)
		if err != nil {
			return err
		}
		now := l.now()
		for i, id := range names {
			if items[i] == nil {
				continue
			}
			d := decoder{item: items[i]}
			p := ledger.Process{
				ID:        id,
				Host:      d.str(attrHost, false, ledger.MaxProcessText),
				PID:       int(d.int(attrPID, true, 1<<62)),
				Version:   d.str(attrSWVersion, false, ledger.MaxProcessText),
				Queue:     d.str(attrQueue, false, ledger.MaxProcessText),
				Started:   d.time(attrStarted, false),
				Beat:      d.time(attrBeat, true),
				InHand:    int(d.int(attrInHand, true, 1<<62)),
				Paused:    d.bool(attrPaused),
				PausedWhy: d.str(attrPausedWhy, false, ledger.MaxErrorLen),
				Expires:   d.time(attrProcUntil, true),
			}
			if d.err != "" {
				return fmt.Errorf("process %q: item unreadable: %s: %w", id, d.err, ledger.ErrCorrupt)
			}
			if !p.Expires.Add(ledger.ProcessKeep).After(now) {
				continue
			}
			p.BeatAge = now.Sub(p.Beat)
			ps = append(ps, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("processes: %w", err)
	}
	return ps, nil
}

// seenBucket is a rate bucket as this host last saw it.
type seenBucket struct {
	tat   int64
	rate  float64
	burst int
	found bool
}

// Reserve takes rate tokens (see ledger.Reservation) with this host's
// clock. It plans the reservation on the buckets as this host last saw
// them (reading those it never saw, strongly consistent), then writes each
// bucket whose TAT moved, all at once, each conditioned on the TAT it was
// planned from (an idle bucket: on being idle still). DynamoDB Local and
// dynalite have no transactions, so the writes are apart: when one's
// condition fails (another host moved that bucket), those that held are
// undone where nothing moved them since, the buckets are read again, and
// the reservation is planned and written again. A write that could not be
// undone leaves its tokens unused: the rate is undershot, never exceeded.
//
// The hosts' clocks decide: a host whose clock runs ahead of another's by
// s sees the bucket's tokens start s early, so that in any window the
// bucket may give about rate·s more starts than its rate (s = 10 ms at 40
// per second: less than one).
func (l *Ledger) Reserve(ctx context.Context, r ledger.Reservation) (ledger.Grant, error) {
	if err := r.Validate(); err != nil {
		return ledger.Grant{}, err
	}
	if len(r.Buckets) == 1 && !slices.ContainsFunc(r.Tokens, func(t ledger.Token) bool {
		return t.Within != r.Tokens[0].Within || t.NotBefore != r.Tokens[0].NotBefore
	}) {
		return l.reserveOne(ctx, &r)
	}
	n := len(r.Buckets)
	name := func(i int) string { return r.Buckets[i].Name }
	seen := make([]seenBucket, n)
	var stale []int
	l.flow.mu.Lock()
	l.flow.init()
	for i, b := range r.Buckets {
		var ok bool
		if seen[i], ok = l.flow.bucket[b.Name]; !ok {
			stale = append(stale, i)
		}
	}
	l.flow.mu.Unlock()
	remember := func(i int, b seenBucket) {
		l.flow.mu.Lock()
		defer l.flow.mu.Unlock()
		l.flow.bucket[r.Buckets[i].Name] = b
		l.flow.prune(l.now())
	}
	for try := 0; try < 2*maxTries; try++ {
		errs := l.batch("reserve: rate bucket", len(stale), func(k int) string { return name(stale[k]) }, func(k int) error {
			i := stale[k]
			tat, rate, burst, ok, err := l.readBucket(ctx, ratePrefix+name(i))
			if err != nil {
				return fmt.Errorf("reserve: rate bucket %q: %w", name(i), err)
			}
			seen[i] = seenBucket{tat: tat, rate: rate, burst: burst, found: ok}
			remember(i, seen[i])
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			return ledger.Grant{}, err
		}
		tats, rates, bursts := make([]int64, n), make([]float64, n), make([]int, n)
		for i, b := range seen {
			tats[i], rates[i], bursts[i] = b.tat, b.rate, b.burst
		}
		now := l.now().UnixNano()
		g := r.Plan(tats, rates, bursts, now)
		var moved []int
		for i := range tats {
			if tats[i] != seen[i].tat {
				moved = append(moved, i)
			}
		}
		done := make([]bool, len(moved))
		began := time.Now()
		errs = l.batch("reserve: rate bucket", len(moved), func(k int) string { return name(moved[k]) }, func(k int) error {
			i := moved[k]
			old, err := l.writeBucket(ctx, &r.Buckets[i], seen[i].tat, tats[i], now)
			if err == nil {
				done[k] = true
				if old.found {
					g.Rates[i], g.Bursts[i] = old.rate, old.burst
				}
				remember(i, seenBucket{tat: tats[i], rate: r.Buckets[i].Rate, burst: r.Buckets[i].Burst, found: true})
			}
			return err
		})
		var failed error
		for k, err := range errs {
			if err != nil && !isConditionFailed(err) {
				failed = fmt.Errorf("reserve: rate bucket %q: %w", name(moved[k]), err)
			}
		}
		if !slices.Contains(done, false) {
			return g, nil
		}
		// Undo what held, so that the tokens planned with the failed
		// buckets' are not taken in the others alone; then read them
		// all again.
		l.batch("reserve: undo rate bucket", len(moved), func(k int) string { return name(moved[k]) }, func(k int) error {
			if i := moved[k]; done[k] {
				l.writeBucket(ctx, &r.Buckets[i], tats[i], seen[i].tat, now)
			}
			return nil
		})
		if failed != nil {
			return ledger.Grant{}, failed
		}
		stale = moved
		// Another reserver was first. Its writes and this one's would
		// meet again at once: wait a random part of as many round trips
		// as tries so far (at least 5 ms each), then look, so that
		// reservers of a slow store spread out as those of a fast one do.
		rt := max(time.Since(began), 5*time.Millisecond)
		if err := pause(ctx, time.Duration(mrand.Int64N(int64(try+1)*int64(rt)))); err != nil {
			return ledger.Grant{}, fmt.Errorf("reserve: %w", err)
		}
	}
	return ledger.Grant{}, errContended("reserve", name(0))
}

// reserveOne is Reserve for tokens of one bucket that share a Within and a
// NotBefore: a bucket that this host saw busy takes them with a write that
// adds their intervals to its TAT, whatever it is, and holds while it is
// busy and no later than the last TAT from which the tokens can start
// within Within. Writes of several hosts to a busy bucket add up, in any
// order, without conflict: in the common case (a handler's rate, no
// partition) a reservation costs one request. Busy means a TAT later than
// the tokens' NotBefore: a bucket idle until then (idle, when they have
// none) takes them with a write that sets its TAT from their NotBefore and
// holds only while it is still so.
func (l *Ledger) reserveOne(ctx context.Context, r *ledger.Reservation) (ledger.Grant, error) {
	bk := &r.Buckets[0]
	pk := ratePrefix + bk.Name
	t := int64(bk.Interval())
	// plan plans r from a TAT raised to now: the grant, and how many
	// tokens it takes.
	plan := func(from, now int64, rate float64, burst int) (ledger.Grant, int) {
		g := r.Plan([]int64{from}, []float64{rate}, []int{burst}, now)
		k := 0
		for _, taken := range g.Taken {
			if taken {
				k++
			}
		}
		return g, k
	}
	l.flow.mu.Lock()
	l.flow.init()
	seen, known := l.flow.bucket[bk.Name]
	cached := seen.tat
	l.flow.mu.Unlock()
	remember := func(tat int64, ok bool) {
		l.flow.mu.Lock()
		defer l.flow.mu.Unlock()
		if ok {
			l.flow.bucket[bk.Name] = seenBucket{tat: tat, rate: bk.Rate, burst: bk.Burst, found: true}
		} else {
			delete(l.flow.bucket, bk.Name)
		}
		l.flow.prune(l.now())
	}
	nb := int64(r.Tokens[0].NotBefore)
	for try := 0; try < maxTries; try++ {
		now := l.now().UnixNano()
		idle := !known || cached <= now+nb
		from := now + nb
		if !idle {
			from = cached
		}
		_, k := plan(from, now, 0, 0)
		if k == 0 {
			// Nothing fits, if what was seen is still so: look.
			tat, rate, burst, ok, err := l.readBucket(ctx, pk)
			if err != nil {
				return ledger.Grant{}, fmt.Errorf("reserve: rate bucket %q: %w", bk.Name, err)
			}
			remember(tat, ok)
			cached, known = tat, ok
			g, k := plan(max(tat, now), now, rate, burst)
			if k > 0 {
				continue
			}
			return g, nil // nothing fits (in a missing bucket: the tokens' NotBefore is past their Within)
		}
		e := newExpr()
		nowV := e.v("now", nsAV(now+nb))
		var u, cond string
		set := func(parts ...string) string { return "SET " + strings.Join(parts, ", ") }
		if idle {
			tat := now + nb + int64(k)*t
			u = set(e.n(attrTAT)+" = "+e.v("tat", nsAV(tat)),
				e.n(attrRate)+" = "+e.v("rate", rateAV(bk.Rate)), e.n(attrBurst)+" = "+e.v("burst", intAV(int64(bk.Burst))),
				e.n(attrExpires)+" = "+e.v("exp", nsAV(tat+int64(ledger.BucketIdle))),
				e.n(attrTTL)+" = "+e.v("ttl", intAV(ttlSeconds(time.Unix(0, tat+int64(ledger.BucketIdle))))))
			cond = "attribute_not_exists(" + e.n(attrTAT) + ") OR " + e.n(attrTAT) + " <= " + nowV
		} else {
			// The latest TAT from which k tokens still fit: the last
			// starts within MaxRetention, and within Within if set.
			tau := int64(bk.Tolerance())
			limit := now + int64(ledger.MaxRetention) + tau - int64(k-1)*t
			if w := r.Tokens[0].Within; w > 0 {
				limit = min(limit, now+int64(w)+tau-int64(k-1)*t)
			}
			add := int64(k) * t
			// expires is exact (it is computed from TAT as stored); the
			// TTL cannot be, and is the latest the bucket can expire
			// after this write: its TAT is at most limit + add. TTL
			// deletion then never takes a bucket that is not idle; a
			// bucket reserved without Within waits for Sweep.
			u = set(e.n(attrTAT)+" = "+e.n(attrTAT)+" + "+e.v("add", nsAV(add)),
				e.n(attrRate)+" = "+e.v("rate", rateAV(bk.Rate)), e.n(attrBurst)+" = "+e.v("burst", intAV(int64(bk.Burst))),
				e.n(attrExpires)+" = "+e.n(attrTAT)+" + "+e.v("addexp", nsAV(add+int64(ledger.BucketIdle))),
				e.n(attrTTL)+" = "+e.v("ttl", intAV(ttlSeconds(time.Unix(0, limit+add+int64(ledger.BucketIdle))))))
			cond = e.n(attrTAT) + " > " + nowV + " AND " + e.n(attrTAT) + " <= " + e.v("limit", nsAV(limit))
		}
		var out *ddb.UpdateItemOutput
		err := l.call(ctx, func(ctx context.Context) (err error) {
			out, err = l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
				TableName:                 l.table,
				Key:                       map[string]types.AttributeValue{attrPK: strAV(pk)},
				UpdateExpression:          aws.String(u),
				ConditionExpression:       aws.String(cond),
				ExpressionAttributeNames:  e.nameMap(),
				ExpressionAttributeValues: e.vals(),
				ReturnValues:              types.ReturnValueAllOld,
			})
			return err
		})
		if isConditionFailed(err) {
			// Another reserver was first. Its writes and this one's
			// would meet again at once: wait a random part of a few
			// milliseconds per try first, then look.
			if err := pause(ctx, time.Duration(mrand.Int64N(int64(try+1)*int64(5*time.Millisecond)))); err != nil {
				return ledger.Grant{}, fmt.Errorf("reserve: rate bucket %q: %w", bk.Name, err)
			}
			tat, _, _, ok, err := l.readBucket(ctx, pk)
			if err != nil {
				return ledger.Grant{}, fmt.Errorf("reserve: rate bucket %q: %w", bk.Name, err)
			}
			remember(tat, ok)
			cached, known = tat, ok
			continue
		}
		if err != nil {
			return ledger.Grant{}, fmt.Errorf("reserve: rate bucket %q: %w", bk.Name, err)
		}
		oldTAT, rate, burst, _ := bucketOf(out.Attributes)
		if !idle {
			from = oldTAT
		}
		g, _ := plan(from, now, rate, burst)
		remember(from+int64(k)*t, true)
		return g, nil
	}
	return ledger.Grant{}, errContended("reserve", bk.Name)
}

// writeBucket sets a bucket's TAT from was to tat, with b's limits,
// conditioned on its TAT being was (or, was being idle at now, on its
// being idle still, or missing), and returns what the bucket held.
func (l *Ledger) writeBucket(ctx context.Context, b *ledger.Bucket, was, tat, now int64) (seenBucket, error) {
	e := newExpr()
	expires := tat + int64(ledger.BucketIdle)
	u := "SET " + strings.Join([]string{e.n(attrTAT) + " = " + e.v("tat", nsAV(tat)),
		e.n(attrRate) + " = " + e.v("rate", rateAV(b.Rate)), e.n(attrBurst) + " = " + e.v("burst", intAV(int64(b.Burst))),
		e.n(attrExpires) + " = " + e.v("exp", nsAV(expires)),
		e.n(attrTTL) + " = " + e.v("ttl", intAV(ttlSeconds(time.Unix(0, expires)))),
	}, ", ")
	var cond string
	if was <= now {
		cond = "attribute_not_exists(" + e.n(attrTAT) + ") OR " + e.n(attrTAT) + " <= " + e.v("now", nsAV(now))
	} else {
		cond = e.n(attrTAT) + " = " + e.v("was", nsAV(was))
	}
	var out *ddb.UpdateItemOutput
	err := l.call(ctx, func(ctx context.Context) (err error) {
		out, err = l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName:                 l.table,
			Key:                       map[string]types.AttributeValue{attrPK: strAV(ratePrefix + b.Name)},
			UpdateExpression:          aws.String(u),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
			ReturnValues:              types.ReturnValueAllOld,
		})
		return err
	})
	if err != nil {
		return seenBucket{}, err
	}
	var old seenBucket
	old.tat, old.rate, old.burst, old.found = bucketOf(out.Attributes)
	return old, nil
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func rateAV(r float64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatFloat(r, 'f', -1, 64)}
}

// bucketOf decodes a bucket's item; ok is false when there is none.
func bucketOf(item map[string]types.AttributeValue) (tat int64, rate float64, burst int, ok bool) {
	if len(item) == 0 {
		return 0, 0, 0, false
	}
	if n, isN := item[attrTAT].(*types.AttributeValueMemberN); isN {
		tat, _ = strconv.ParseInt(n.Value, 10, 64)
	}
	if n, isN := item[attrRate].(*types.AttributeValueMemberN); isN {
		rate, _ = strconv.ParseFloat(n.Value, 64)
	}
	if n, isN := item[attrBurst].(*types.AttributeValueMemberN); isN {
		b, _ := strconv.ParseInt(n.Value, 10, 32)
		burst = int(b)
	}
	return tat, rate, burst, true
}

// readBucket reads a bucket with a strongly consistent read.
func (l *Ledger) readBucket(ctx context.Context, pk string) (tat int64, rate float64, burst int, ok bool, err error) {
	item, err := l.getItem(ctx, pk)
	if err != nil {
		return 0, 0, 0, false, err
	}
	tat, rate, burst, ok = bucketOf(item)
	return tat, rate, burst, ok, nil
}

// BucketLimits returns the rate and burst that the rate bucket name holds
// (see ledger.DB.BucketLimits), with a strongly consistent read.
func (l *Ledger) BucketLimits(ctx context.Context, name string) (rate float64, burst int, found bool, err error) {
	_, rate, burst, found, err = l.readBucket(ctx, ratePrefix+name)
	if err != nil {
		return 0, 0, false, fmt.Errorf("bucket limits %q: %w", name, err)
	}
	return rate, burst, found, nil
}

func slotPK(pool string, idx int) string { return slotPrefix + strconv.Itoa(idx) + "#" + pool }

// TakeSlots takes free slots for each request (see ledger.SlotRequest), with
// this host's clock: a slot is an item, taken with a conditional PutItem
// (no item, or a lapsed lease). For each request, the slots not known to be
// held are tried first, as many as asked, at once: one round of requests
// when they are free. When some were held, the pool's other slots are read
// (strongly consistent, at once) and those found free tried: at most three
// rounds in all. Slots found held are not tried again for a while (until
// their lease lapses, at most a second). A pool held by others to its limit
// costs nothing for that while.
func (l *Ledger) TakeSlots(ctx context.Context, rs []ledger.SlotRequest) ([][]ledger.Slot, error) {
	if err := ledger.ValidateSlotRequests(rs); err != nil {
		return nil, err
	}
	out := make([][]ledger.Slot, len(rs))
	errs := l.batch("take slots", len(rs), func(i int) string { return rs[i].Pool }, func(i int) (err error) {
		out[i], err = l.takeSlots(ctx, &rs[i])
		return err
	})
	if err := errors.Join(errs...); err != nil {
		// Give back what the others took: the call failed as a whole.
		var taken []ledger.Slot
		for _, ss := range out {
			taken = append(taken, ss...)
		}
		l.ReleaseSlots(context.WithoutCancel(ctx), taken)
		return nil, fmt.Errorf("take slots: %w", err)
	}
	return out, nil
}

func (l *Ledger) takeSlots(ctx context.Context, r *ledger.SlotRequest) ([]ledger.Slot, error) {
	now := l.now()
	l.flow.mu.Lock()
	l.flow.init()
	var fresh []int
	for idx := range r.Limit {
		if until, ok := l.flow.busy[slotPK(r.Pool, idx)]; !ok || !until.After(now) {
			fresh = append(fresh, idx)
		}
	}
	l.flow.mu.Unlock()
	taken := []ledger.Slot{}
	tried := map[int]bool{}
	try := func(idxs []int) error {
		ok := make([]bool, len(idxs))
		errs := make([]error, len(idxs))
		for _, idx := range idxs {
			tried[idx] = true
		}
		l.perKey(len(idxs), func(i int) string { return strconv.Itoa(idxs[i]) }, func(i int) {
			ok[i], errs[i] = l.takeSlot(ctx, r, idxs[i])
		})
		for i, idx := range idxs {
			if ok[i] {
				taken = append(taken, ledger.Slot{Pool: r.Pool, Index: idx, Owner: r.Owner})
			}
		}
		return errors.Join(errs...)
	}
	if err := try(fresh[:min(r.N, len(fresh))]); err != nil {
		return taken, err
	}
	if len(taken) < r.N {
		var rest []int // neither tried nor known to be held
		for _, idx := range fresh {
			if !tried[idx] {
				rest = append(rest, idx)
			}
		}
		free := make([]bool, len(rest))
		errs := make([]error, len(rest))
		l.perKey(len(rest), func(i int) string { return strconv.Itoa(rest[i]) }, func(i int) {
			free[i], errs[i] = l.slotFree(ctx, r.Pool, rest[i])
		})
		if err := errors.Join(errs...); err != nil {
			return taken, err
		}
		var cand []int
		for i, idx := range rest {
			if free[i] && len(cand) < r.N-len(taken) {
				cand = append(cand, idx)
			}
		}
		if err := try(cand); err != nil {
			return taken, err
		}
	}
	slices.SortFunc(taken, func(a, b ledger.Slot) int { return a.Index - b.Index })
	return taken, nil
}

// takeSlot tries to take slot idx of r's pool, and remembers it as held when
// it is.
func (l *Ledger) takeSlot(ctx context.Context, r *ledger.SlotRequest, idx int) (bool, error) {
	now := l.now()
	pk := slotPK(r.Pool, idx)
	lease := now.Add(r.Lease)
	writeID := newWriteID()
	item := map[string]types.AttributeValue{attrPK: strAV(pk), attrOwner: strAV(r.Owner), attrLease: timeAV(lease), attrWriteID: strAV(writeID)}
	expiryAttrs(item, lease.Add(ledger.SlotIdle))
	e := newExpr()
	err := l.call(ctx, func(ctx context.Context) error {
		_, err := l.client.PutItem(ctx, &ddb.PutItemInput{
			TableName:                           l.table,
			Item:                                item,
			ConditionExpression:                 aws.String("attribute_not_exists(" + e.n(attrPK) + ") OR " + e.n(attrLease) + " <= " + e.v("now", timeAV(now))),
			ExpressionAttributeNames:            e.nameMap(),
			ExpressionAttributeValues:           e.vals(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		return err
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		until := now.Add(busyHint)
		if d := (decoder{item: ccf.Item}); ccf.Item != nil {
			if d.str(attrWriteID, false, 64) == writeID {
				// This put's own write, whose answer was lost and
				// whose retry found it (DynamoDB returns the item with
				// the failure; not every server of its API does).
				return true, nil
			}
			if t := d.time(attrLease, false); d.err == "" && !t.IsZero() && t.Before(until) {
				until = t
			}
		}
		l.hintBusy(pk, until)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("slot %s#%d: %w", r.Pool, idx, err)
	}
	l.hintBusy(pk, time.Time{})
	return true, nil
}

// slotFree reads slot idx of pool: free when it has no item or its lease
// lapsed. A held slot is remembered as held until its lease lapses, at most
// busyHint.
func (l *Ledger) slotFree(ctx context.Context, pool string, idx int) (bool, error) {
	pk := slotPK(pool, idx)
	item, err := l.getItem(ctx, pk)
	if err != nil {
		return false, fmt.Errorf("slot %s#%d: %w", pool, idx, err)
	}
	now := l.now()
	if item == nil {
		return true, nil
	}
	d := decoder{item: item}
	lease := d.time(attrLease, false)
	if !lease.After(now) {
		return true, nil
	}
	until := now.Add(busyHint)
	if lease.Before(until) {
		until = lease
	}
	l.hintBusy(pk, until)
	return false, nil
}

func (l *Ledger) hintBusy(pk string, until time.Time) {
	l.flow.mu.Lock()
	defer l.flow.mu.Unlock()
	l.flow.init()
	if until.IsZero() {
		delete(l.flow.busy, pk)
		return
	}
	l.flow.busy[pk] = until
	l.flow.prune(l.now())
}

// ExtendSlots renews the leases of slots to now+lease (this host's clock),
// one conditional write each, at once, one error per slot: ErrNotOwner for
// a slot its owner no longer holds.
func (l *Ledger) ExtendSlots(ctx context.Context, ss []ledger.Slot, lease time.Duration) []error {
	if err := ledger.ValidateSlotLease(lease); err != nil {
		errs := make([]error, len(ss))
		for i := range errs {
			errs[i] = fmt.Errorf("extend slots: %w", err)
		}
		return errs
	}
	return l.eachSlot(ctx, "extend slot", ss, func(ctx context.Context, s *ledger.Slot, e *expr, cond string) error {
		until := l.now().Add(lease)
		u := "SET " + e.n(attrLease) + " = " + e.v("lease", timeAV(until)) + ", " + e.n(attrExpires) + " = " + e.v("exp", timeAV(until.Add(ledger.SlotIdle))) +
			", " + e.n(attrTTL) + " = " + e.v("ttl", intAV(ttlSeconds(until.Add(ledger.SlotIdle))))
		_, err := l.client.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName:                 l.table,
			Key:                       map[string]types.AttributeValue{attrPK: strAV(slotPK(s.Pool, s.Index))},
			UpdateExpression:          aws.String(u),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
		})
		return err
	})
}

// ReleaseSlots gives slots back (their items are deleted), one conditional
// write each, at once, one error per slot: ErrNotOwner for a slot its owner
// no longer holds.
func (l *Ledger) ReleaseSlots(ctx context.Context, ss []ledger.Slot) []error {
	return l.eachSlot(ctx, "release slot", ss, func(ctx context.Context, s *ledger.Slot, e *expr, cond string) error {
		_, err := l.client.DeleteItem(ctx, &ddb.DeleteItemInput{
			TableName:                 l.table,
			Key:                       map[string]types.AttributeValue{attrPK: strAV(slotPK(s.Pool, s.Index))},
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  e.nameMap(),
			ExpressionAttributeValues: e.vals(),
		})
		if err == nil {
			l.hintBusy(slotPK(s.Pool, s.Index), time.Time{})
		}
		return err
	})
}

// eachSlot runs write for each valid slot, conditioned on its owner, and
// turns a failed condition into ErrNotOwner.
func (l *Ledger) eachSlot(ctx context.Context, op string, ss []ledger.Slot, write func(ctx context.Context, s *ledger.Slot, e *expr, cond string) error) []error {
	errs := make([]error, len(ss))
	valid := make([]bool, len(ss))
	for i := range ss {
		errs[i] = ledger.ValidateSlot(ss[i])
		if errs[i] != nil {
			errs[i] = fmt.Errorf("%s: %w", op, errs[i])
		}
		valid[i] = errs[i] == nil
	}
	out := l.batch(op, len(ss), func(i int) string { return slotPK(ss[i].Pool, ss[i].Index) }, func(i int) error {
		if !valid[i] {
			return nil
		}
		s := &ss[i]
		err := l.call(ctx, func(ctx context.Context) error {
			e := newExpr()
			return write(ctx, s, e, e.n(attrOwner)+" = "+e.v("owner", strAV(s.Owner)))
		})
		if isConditionFailed(err) {
			return fmt.Errorf("%s %s#%d: not held by %q: %w", op, s.Pool, s.Index, s.Owner, ledger.ErrNotOwner)
		}
		if err != nil {
			return fmt.Errorf("%s %s#%d: %w", op, s.Pool, s.Index, err)
		}
		return nil
	})
	for i := range errs {
		if valid[i] {
			errs[i] = out[i]
		}
	}
	return errs
}
