package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// What the embedded ledger keeps beside its records so that a console's
// overview reads counters and indexes, never the records:
//
//   - bucketFailed indexes the failed records by their last write, so that
//     a list of failures newest first finds them among any number of
//     complete records;
//   - bucketFailGroups counts the failed records by the group of their
//     reason (ReasonGroup), with the latest reason and key of each group;
//   - bucketDeadGroups keeps the latest reason and key of each group of
//     dead-letter marks (their counts are bucketDeadLetters');
//   - bucketMinutes counts the completions and failures recorded in each
//     minute of the last MinuteKeep;
//   - bucketHistory and bucketPayloads hold each record's attempt history
//     and kept payload, tied to the record by its FirstSeen like its flow
//     entry (see recflow.go).
//
// A sqsonce that predates them writes records without keeping them. So
// every commit of this code stamps the meta bucket with its transaction's
// id (metaTallyTx); at Open a stamp that is not the last commit's means
// that something else wrote the file since, and the counters and indexes
// are rebuilt from the records (one walk). The history and the minutes are
// not rebuilt: they miss what was not recorded.
var (
	bucketFailed     = []byte("failed")     // 8-byte updated nanos + key -> empty, for failed records
	bucketFailGroups = []byte("failgroups") // reason group -> encoded failGroup
	bucketDeadGroups = []byte("deadgroups") // reason group -> encoded example of its dead-letter marks
	bucketMinutes    = []byte("minutes")    // 8-byte Unix minute -> completions and failures, 8 bytes each
	bucketHistory    = []byte("history")    // key -> FirstSeen + EncodeHistory
	bucketPayloads   = []byte("payloads")   // key -> FirstSeen + EncodePayload

	metaTallyTx = []byte("tally_tx")
	// metaTallyStale marks counters that a removal could not keep (of a
	// record that could not be read): the next Open rebuilds them.
	metaTallyStale = []byte("tally_stale")
)

// MinuteKeep is how long the per-minute counts of completions and failures
// (Overview.Activity) are kept.
const MinuteKeep = 24 * time.Hour

// failGroup is the count of the failed records of one reason group.
type failGroup struct {
	n, permanent, dead int64 // dead: retryable ones marked dead-lettered
	last               int64 // Unix nanoseconds of the latest failure counted
	key, reason        string
}

func (g *failGroup) encode() []byte {
	b := []byte{1}
	for _, n := range [...]int64{g.n, g.permanent, g.dead, g.last} {
		b = binary.AppendVarint(b, n)
	}
	for _, s := range [...]string{g.key, g.reason} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func decodeFailGroup(b []byte) failGroup {
	d := decoder{b: b}
	if d.byte() != 1 {
		return failGroup{}
	}
	g := failGroup{n: d.varint(), permanent: d.varint(), dead: d.varint(), last: d.varint()}
	g.key = string(d.bytes(MaxKeyLen))
	g.reason = string(d.bytes(MaxErrorLen))
	if d.err != nil {
		return failGroup{}
	}
	return g
}

// example is the latest reason and key of a group of dead-letter marks.
type example struct {
	last        int64
	key, reason string
}

func (e *example) encode() []byte {
	b := binary.AppendVarint([]byte{1}, e.last)
	for _, s := range [...]string{e.key, e.reason} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func decodeExample(b []byte) example {
	d := decoder{b: b}
	if d.byte() != 1 {
		return example{}
	}
	e := example{last: d.varint()}
	e.key = string(d.bytes(MaxKeyLen))
	e.reason = string(d.bytes(MaxErrorLen))
	if d.err != nil {
		return example{}
	}
	return e
}

// tallyState is what a write transaction gathers for the counters, written
// once at its end (flushTally).
type tallyState struct {
	groups  map[string]*failGroup // deltas
	minutes map[int64]*[2]int64   // completions and failures per Unix minute
}

// failedClass is how r counts among the failures: whether it does, its
// group, and whether it is permanent or dead-lettered.
func failedClass(r *Record) (ok bool, group string, permanent, dead bool) {
	if r == nil || r.State != StateFailed {
		return false, "", false, false
	}
	return true, ReasonGroup(r.LastError), r.Permanent, !r.Permanent && !r.DeadLettered.IsZero()
}

// tallyFailure counts r (delta 1) or takes it out (-1) of the failures by
// group, and of the failed index.
func (s *store) tallyFailure(r *Record, delta int64) error {
	ok, group, permanent, dead := failedClass(r)
	if !ok {
		return nil
	}
	if delta > 0 {
		if err := s.tx.Bucket(bucketFailed).Put(s.indexKey(r.Updated, r.Key), nil); err != nil {
			return err
		}
	} else if err := del(s.tx.Bucket(bucketFailed).Cursor(), s.indexKey(r.Updated, r.Key)); err != nil {
		return err
	}
	t := &s.tally
	if t.groups == nil {
		t.groups = map[string]*failGroup{}
	}
	g := t.groups[group]
	if g == nil {
		g = &failGroup{}
		t.groups[group] = g
	}
	g.n += delta
	if permanent {
		g.permanent += delta
	}
	if dead {
		g.dead += delta
	}
	if u := unixNano(r.Updated); delta > 0 && u >= g.last {
		g.last, g.key, g.reason = u, r.Key, r.LastError
	}
	return nil
}

// countMinute counts a completion (failed false) or a failure recorded now.
func (s *store) countMinute(failed bool) {
	t := &s.tally
	if t.minutes == nil {
		t.minutes = map[int64]*[2]int64{}
	}
	m := s.now.Unix() / 60
	c := t.minutes[m]
	if c == nil {
		c = &[2]int64{}
		t.minutes[m] = c
	}
	if failed {
		c[1]++
	} else {
		c[0]++
	}
}

// flushTally writes what the transaction gathered, drops the minutes older
// than MinuteKeep and stamps the transaction (see metaTallyTx).
func (s *store) flushTally() error {
	t := &s.tally
	if len(t.groups) > 0 {
		b := s.tx.Bucket(bucketFailGroups)
		for group, d := range t.groups {
			k := groupKey(group)
			g := decodeFailGroup(b.Get(k))
			g.n += d.n
			g.permanent += d.permanent
			g.dead += d.dead
			if d.key != "" && d.last >= g.last {
				g.last, g.key, g.reason = d.last, d.key, d.reason
			}
			var err error
			if g.n <= 0 {
				err = b.Delete(k)
			} else {
				err = b.Put(k, g.encode())
			}
			if err != nil {
				return err
			}
		}
		t.groups = nil
	}
	if len(t.minutes) > 0 {
		b := s.tx.Bucket(bucketMinutes)
		for m, c := range t.minutes {
			k := binary.BigEndian.AppendUint64(nil, uint64(m))
			var v [16]byte
			if old := b.Get(k); len(old) == 16 {
				copy(v[:], old)
			}
			binary.BigEndian.PutUint64(v[:8], binary.BigEndian.Uint64(v[:8])+uint64(c[0]))
			binary.BigEndian.PutUint64(v[8:], binary.BigEndian.Uint64(v[8:])+uint64(c[1]))
			if err := b.Put(k, v[:]); err != nil {
				return err
			}
		}
		t.minutes = nil
		cut := binary.BigEndian.AppendUint64(nil, uint64(s.now.Add(-MinuteKeep).Unix()/60))
		c := b.Cursor()
		for k, _ := c.First(); k != nil && bytes.Compare(k, cut) < 0; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
	}
	return s.meta.Put(metaTallyTx, binary.BigEndian.AppendUint64(nil, uint64(s.tx.ID())))
}

// noteDeadLetter keeps key and reason as the latest example of the group of
// dead-letter marks they are counted in.
func (s *store) noteDeadLetter(group, key, reason string) error {
	e := example{last: unixNano(s.now), key: key, reason: reason}
	return s.tx.Bucket(bucketDeadGroups).Put(groupKey(group), e.encode())
}

// sidecar is a bucket of values tied to records by their FirstSeen, as
// flow entries are: a value counts only for the record with that FirstSeen.
type sidecar []byte

// get returns the value of r's entry, or nil.
func (b sidecar) get(tx *bolt.Tx, r *Record) []byte {
	v := tx.Bucket(b).Get([]byte(r.Key))
	d := decoder{b: v}
	if v == nil || d.varint() != unixNano(r.FirstSeen) || d.err != nil {
		return nil
	}
	return d.b
}

// put writes r's entry.
func (b sidecar) put(s *store, r *Record, value []byte) error {
	v := binary.AppendVarint(make([]byte, 0, binary.MaxVarintLen64+len(value)), unixNano(r.FirstSeen))
	return s.tx.Bucket(b).Put([]byte(r.Key), append(v, value...))
}

// remove deletes key's entry, if any.
func (b sidecar) remove(s *store, key string) error {
	return s.tx.Bucket(b).Delete([]byte(key))
}

// attachStory fills r's history and payload from tx, as Get reads them.
func attachStory(tx *bolt.Tx, r *Record) {
	if v := sidecar(bucketHistory).get(tx, r); v != nil {
		r.History, _ = DecodeHistory(v)
	}
	if v := sidecar(bucketPayloads).get(tx, r); v != nil {
		r.Payload = DecodePayload(v)
	}
	DeriveHistory(r)
}

// loadHistory fills rec's history in a write, before a transition appends
// to it.
func (s *store) loadHistory(rec *Record) {
	if v := sidecar(bucketHistory).get(s.tx, rec); v != nil {
		rec.History, _ = DecodeHistory(v)
	}
}

// putStory writes rec's history, and its payload when p is not nil.
func (s *store) putStory(rec *Record, p *Payload) error {
	if len(rec.History) > 0 {
		if err := sidecar(bucketHistory).put(s, rec, EncodeHistory(rec.History)); err != nil {
			return err
		}
	}
	if p != nil {
		return sidecar(bucketPayloads).put(s, rec, EncodePayload(p.Bounded()))
	}
	return nil
}

// removeStory deletes key's history and payload.
func (s *store) removeStory(key string) error {
	if err := sidecar(bucketHistory).remove(s, key); err != nil {
		return err
	}
	return sidecar(bucketPayloads).remove(s, key)
}

// checkTally rebuilds the counters and indexes of this file when its last
// commit was not this code's (see metaTallyTx): part of Open, in its
// transaction.
func checkTally(tx *bolt.Tx, meta *bolt.Bucket) error {
	if v := meta.Get(metaTallyTx); len(v) == 8 && binary.BigEndian.Uint64(v) == uint64(tx.ID()-1) && meta.Get(metaTallyStale) == nil {
		// This code's commit was the last: the counters hold. Open's own
		// commit is this code's too.
		return meta.Put(metaTallyTx, binary.BigEndian.AppendUint64(nil, uint64(tx.ID())))
	}
	if err := meta.Delete(metaTallyStale); err != nil {
		return err
	}
	for _, name := range [][]byte{bucketFailed, bucketFailGroups, bucketDeadGroups, bucketDeadLetters} {
		if err := tx.DeleteBucket(name); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(name); err != nil {
			return err
		}
	}
	s := &store{tx: tx, meta: meta}
	flows := tx.Bucket(bucketRecFlow)
	dead := tx.Bucket(bucketDeadLetters)
	examples := map[string]example{}
	c := tx.Bucket(bucketRecords).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		r, err := decodeRecord(string(k), v)
		if err != nil {
			continue // Forget removes it; it counts nowhere meanwhile
		}
		if fv := flows.Get(k); fv != nil {
			f := decodeRecFlow(fv)
			f.apply(&r)
		}
		if err := s.tallyFailure(&r, 1); err != nil {
			return err
		}
		if r.DeadLettered.IsZero() {
			continue
		}
		group := ReasonGroup(r.DeadLetterReason)
		if err := addGroupCount(dead, group, 1); err != nil {
			return err
		}
		if e := examples[group]; unixNano(r.DeadLettered) >= e.last {
			examples[group] = example{last: unixNano(r.DeadLettered), key: r.Key, reason: r.DeadLetterReason}
		}
	}
	for group, e := range examples {
		if err := tx.Bucket(bucketDeadGroups).Put(groupKey(group), e.encode()); err != nil {
			return err
		}
	}
	s.now = time.Now()
	if err := s.flushTally(); err != nil {
		return fmt.Errorf("rebuild the counters: %w", err)
	}
	return nil
}

// sweepSidecars removes the history and payload entries of records that
// are gone or were made anew, a chunk per commit.
func (db *DB) sweepSidecars(ctx context.Context) error {
	for _, bucket := range [][]byte{bucketHistory, bucketPayloads} {
		var after []byte
		for done := false; !done; {
			if err := ctx.Err(); err != nil {
				return err
			}
			err := db.write(ctx, func(s *store) error {
				c := s.tx.Bucket(bucket).Cursor()
				k, v := c.First()
				if after != nil {
					k, v = c.Seek(after)
					if k != nil && bytes.Equal(k, after) {
						k, v = c.Next()
					}
				}
				var stale [][]byte
				for n := 0; k != nil && n < db.chunk; k, v = c.Next() {
					n++
					after = append(after[:0], k...)
					d := decoder{b: v}
					firstSeen := d.varint()
					if rv := s.records.Get(k); rv != nil {
						if r, err := decodeRecord(string(k), rv); err != nil || d.err == nil && firstSeen == unixNano(r.FirstSeen) {
							continue // its record's, or a record that cannot be read
						}
					}
					stale = append(stale, bytes.Clone(k))
				}
				done = k == nil
				for _, k := range stale {
					if err := s.tx.Bucket(bucket).Delete(k); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// groupKey is the key of a reason group in the buckets that count by
// group: the group, or a NUL for the empty group (of an empty reason),
// since bbolt refuses an empty key. groupName reads it back.
func groupKey(group string) []byte {
	if group == "" {
		return []byte{0}
	}
	return []byte(group)
}

func groupName(k []byte) string {
	if len(k) == 1 && k[0] == 0 {
		return ""
	}
	return string(k)
}
