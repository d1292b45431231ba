package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// The flow fields of a record (OwnFailures, OutageFailures and the
// dead-letter mark) are not in the record's encoding: a sqsonce that
// predates them refuses a record of another version or with trailing
// bytes, and must keep working on a ledger this one wrote (a rollback).
// They live apart, in bucketRecFlow under the record's key, and only for
// records that have any: most records have none, and cost nothing more.
//
// An older sqsonce that removes a record (sweep, forget, release) leaves its
// entry behind, and may then make a new record under the same key. So an
// entry holds the FirstSeen of the record it belongs to, and counts only
// for a record with that FirstSeen; the others are stale: ignored by
// reads, replaced by the next write of the key, and removed by Sweep.
var (
	bucketRecFlow     = []byte("recflow")     // key -> encoded flow fields
	bucketDeadLetters = []byte("deadletters") // reason group -> 8-byte count of records marked dead-lettered

	metaFlowSchema = []byte("flow_schema")
)

// recFlow is the encoded flow fields of one record. Layout, version 1:
// version byte, FirstSeen of the record as varint Unix nanoseconds, own
// and outage failures as uvarints, DeadLettered as varint Unix nanoseconds
// (0 for none), then the length-prefixed reason and copy id. Later versions
// only append: a decoder reads what it knows and ignores the rest.
type recFlow struct {
	firstSeen      int64
	own, outage    uint64
	deadLettered   int64
	reason, copyID string
	valid          bool
}

const recFlowVersion = 1

func flowOf(r *Record) recFlow {
	return recFlow{
		firstSeen:    unixNano(r.FirstSeen),
		own:          uint64(max(r.OwnFailures, 0)),
		outage:       uint64(max(r.OutageFailures, 0)),
		deadLettered: unixNano(r.DeadLettered),
		reason:       r.DeadLetterReason,
		copyID:       r.DeadLetterCopyID,
		valid:        true,
	}
}

// hasFlow reports whether r has flow fields worth an entry.
func hasFlow(r *Record) bool {
	return r.OwnFailures != 0 || r.OutageFailures != 0 || !r.DeadLettered.IsZero()
}

func (f *recFlow) encode() []byte {
	b := make([]byte, 0, 1+4*binary.MaxVarintLen64+2*binary.MaxVarintLen16+len(f.reason)+len(f.copyID))
	b = append(b, recFlowVersion)
	b = binary.AppendVarint(b, f.firstSeen)
	b = binary.AppendUvarint(b, f.own)
	b = binary.AppendUvarint(b, f.outage)
	b = binary.AppendVarint(b, f.deadLettered)
	for _, s := range [...]string{f.reason, f.copyID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// decodeRecFlow decodes an entry; valid is false for one that cannot be
// read, which counts as none.
func decodeRecFlow(b []byte) recFlow {
	d := decoder{b: b}
	if v := d.byte(); d.err != nil || v < recFlowVersion {
		return recFlow{}
	}
	f := recFlow{firstSeen: d.varint()}
	f.own = d.uvarint(1 << 31)
	f.outage = d.uvarint(1 << 31)
	f.deadLettered = d.varint()
	f.reason = string(d.bytes(MaxErrorLen))
	f.copyID = string(d.bytes(MaxMessageIDLen))
	if d.err != nil {
		return recFlow{}
	}
	f.valid = true
	return f
}

// apply copies the entry's fields into r when the entry belongs to r.
func (f *recFlow) apply(r *Record) {
	if !f.valid || f.firstSeen != unixNano(r.FirstSeen) {
		return
	}
	r.OwnFailures, r.OutageFailures = int(f.own), int(f.outage)
	r.DeadLettered = fromUnixNano(f.deadLettered)
	r.DeadLetterReason, r.DeadLetterCopyID = f.reason, f.copyID
}

// attachFlow fills r's flow fields from the entry in tx, if any.
func attachFlow(tx *bolt.Tx, r *Record) {
	b := tx.Bucket(bucketRecFlow)
	if b == nil {
		return
	}
	if v := b.Get([]byte(r.Key)); v != nil {
		f := decodeRecFlow(v)
		f.apply(r)
	}
}

// recFlowState is a write transaction's view of the flow entries.
type recFlowState struct {
	bucket, dead *bolt.Bucket
	cur          *bolt.Cursor
	// empty is known once looked at: the bucket had no entry when the
	// transaction began and none was written since. Most ledgers have
	// few entries, many none; then a record's write costs no lookup.
	looked, empty bool
}

func (s *store) recFlow() *recFlowState {
	f := &s.flow
	if f.bucket == nil {
		f.bucket = s.tx.Bucket(bucketRecFlow)
		f.dead = s.tx.Bucket(bucketDeadLetters)
		f.cur = f.bucket.Cursor()
	}
	if !f.looked {
		k, _ := f.cur.First()
		f.looked, f.empty = true, k == nil
	}
	return f
}

// readFlow fills r's flow fields from its entry.
func (s *store) readFlow(r *Record) {
	f := s.recFlow()
	if f.empty {
		return
	}
	if v := seek(f.cur, s.recordKey(r.Key)); v != nil {
		e := decodeRecFlow(v)
		e.apply(r)
	}
}

// putFlow writes rec's flow fields to its entry, removing the entry when it
// has none, and keeps the dead-letter counts in step.
func (s *store) putFlow(rec *Record) error {
	f := s.recFlow()
	has := hasFlow(rec)
	if f.empty && !has {
		return nil
	}
	k := s.recordKey(rec.Key)
	next := flowOf(rec)
	var enc []byte
	if has {
		enc = next.encode()
	}
	var old recFlow
	if v := seek(f.cur, k); v != nil {
		if has && bytes.Equal(v, enc) {
			return nil // unchanged: most writes of a record with flow fields
		}
		old = decodeRecFlow(v)
		old.valid = true // an unreadable entry is replaced all the same
	}
	if err := s.moveDeadLetter(rec.Key, &old, has, &next); err != nil {
		return err
	}
	if !has {
		if old.valid {
			return del(f.cur, s.recordKey(rec.Key))
		}
		return nil
	}
	f.empty = false
	return f.bucket.Put(s.recordKey(rec.Key), enc)
}

// removeFlow removes the entry of key, if any.
func (s *store) removeFlow(key string) error {
	f := s.recFlow()
	if f.empty {
		return nil
	}
	v := seek(f.cur, s.recordKey(key))
	if v == nil {
		return nil
	}
	old := decodeRecFlow(v)
	if err := s.moveDeadLetter(key, &old, false, nil); err != nil {
		return err
	}
	return del(f.cur, s.recordKey(key))
}

// moveDeadLetter takes the dead-letter mark of old (if any) out of the
// counts and puts that of next (when has) in, as the latest example of its
// group.
func (s *store) moveDeadLetter(key string, old *recFlow, has bool, next *recFlow) error {
	var from, to string
	marked, marking := old.valid && old.deadLettered != 0, has && next.deadLettered != 0
	if marked {
		from = ReasonGroup(old.reason)
	}
	if marking {
		to = ReasonGroup(next.reason)
	}
	if marked == marking && from == to {
		return nil
	}
	if marked {
		if err := addGroupCount(s.flow.dead, from, -1); err != nil {
			return err
		}
	}
	if marking {
		if err := addGroupCount(s.flow.dead, to, 1); err != nil {
			return err
		}
		return s.noteDeadLetter(to, key, next.reason)
	}
	return nil
}

// addGroupCount adds delta to the count of group, removing a count that
// reaches zero.
func addGroupCount(b *bolt.Bucket, group string, delta int64) error {
	k := groupKey(group)
	n := int64(0)
	if v := b.Get(k); len(v) == 8 {
		n = int64(binary.BigEndian.Uint64(v))
	}
	n += delta
	if n <= 0 {
		return b.Delete(k)
	}
	return b.Put(k, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// MarkDeadLettered records on each mark's record that its message is being
// dead-lettered (the intent, before the copy is sent: CopyID empty) or was
// (CopyID set), in one commit, and returns one error per mark: nil once it
// is durable, ErrNotFound without a live record, ErrNotOwner when another
// owner's live lease holds the record (see DeadLetter.Owner). The mark
// does not change the record's state; like every write it renews the
// record's retention. A later Claim that takes the operation (a replayed
// message) clears it.
func (db *DB) MarkDeadLettered(ctx context.Context, ds []DeadLetter) []error {
	errs := make([]error, len(ds))
	bad := make([]bool, len(ds))
	for i := range ds {
		if err := ds[i].Validate(); err != nil {
			errs[i], bad[i] = err, true
		}
	}
	out := db.transitionBatch(ctx, "mark dead-lettered", len(ds), func(i int) string {
		if bad[i] {
			return "" // refused above: transitionBatch skips it
		}
		return ds[i].Key
	}, func(s *store, i int) error {
		d := &ds[i]
		cur, old, err := s.live(d.Key)
		if err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("mark dead-lettered %q: %w", d.Key, ErrNotFound)
		}
		rec := &s.next
		*rec = *cur
		if err := MarkDeadLetter(rec, d, s.now); err != nil {
			return err
		}
		return s.put(old, rec)
	})
	for i := range errs {
		if !bad[i] {
			errs[i] = out[i]
		}
	}
	return errs
}

// DeadLetterCounts counts the records marked dead-lettered, by the group of
// their reason (ReasonGroup). It reads a counter per group, not the
// records: its cost does not grow with the ledger. Records that expired and
// are not swept yet still count, and so, until the next Sweep, do those
// that a sqsonce predating these counts removed.
func (db *DB) DeadLetterCounts(ctx context.Context) (map[string]int, error) {
	counts := map[string]int{}
	err := db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDeadLetters).ForEach(func(k, v []byte) error {
			if len(v) == 8 {
				counts[groupName(k)] = int(binary.BigEndian.Uint64(v))
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("dead-letter counts: %w", err)
	}
	return counts, nil
}

// sweepRecFlow removes the flow entries of records that are gone or were
// made anew by a sqsonce that does not know them, a chunk per commit.
func (db *DB) sweepRecFlow(ctx context.Context) error {
	var after []byte
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		done := false
		err := db.write(ctx, func(s *store) error {
			f := s.recFlow()
			c := f.bucket.Cursor()
			k, v := c.First()
			if after != nil {
				k, v = c.Seek(after)
				if k != nil && string(k) == string(after) {
					k, v = c.Next()
				}
			}
			var stale [][]byte
			n := 0
			for ; k != nil && n < db.chunk; k, v = c.Next() {
				n++
				after = append(after[:0], k...)
				e := decodeRecFlow(v)
				rv := s.records.Get(k)
				if rv != nil {
					if r, err := decodeRecord(string(k), rv); err != nil || (e.valid && e.firstSeen == unixNano(r.FirstSeen)) {
						continue // its record's, or a record that cannot be read: it stays
					}
				}
				stale = append(stale, slices.Clone(k))
			}
			done = k == nil
			for _, k := range stale {
				if err := s.removeFlow(string(k)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || done {
			return err
		}
	}
}

// FlowSchema returns the flow schema version recorded in the file: the
// version of the newest sqsonce that opened it (FlowSchemaVersion for
// this one, unless a newer one has opened it since).
func (db *DB) FlowSchema(ctx context.Context) (int, error) {
	v := 0
	err := db.view(func(tx *bolt.Tx) error {
		v = int(readCounter(tx.Bucket(bucketMeta), metaFlowSchema))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("flow schema: %w", err)
	}
	return v, nil
}

// initFlow creates the buckets of flow control and records the flow schema
// version (never lowering it): part of Open.
func initFlow(tx *bolt.Tx, meta *bolt.Bucket) error {
	for _, name := range [][]byte{bucketRecFlow, bucketDeadLetters, bucketFlowDocs, bucketProcesses,
		bucketFailed, bucketFailGroups, bucketDeadGroups, bucketMinutes, bucketHistory, bucketPayloads} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	if readCounter(meta, metaFlowSchema) < FlowSchemaVersion {
		return meta.Put(metaFlowSchema, binary.BigEndian.AppendUint64(nil, FlowSchemaVersion))
	}
	return nil
}
