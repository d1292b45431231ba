package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Flow control on the embedded ledger. Flow documents and the process
// registry are buckets of the file, written durably like records (they are
// rare writes). Rate buckets and concurrency slots are kept in memory under
// a mutex: the embedded ledger serves one process, which is the whole
// fleet, and a restarted process starts with full buckets and free slots
// (its earlier holders are gone with it).
var (
	bucketFlowDocs  = []byte("flowdocs")  // scope -> encoded FlowDoc
	bucketProcesses = []byte("processes") // id -> JSON of a Process
)

// flowMem is the in-memory flow state of a DB.
type flowMem struct {
	mu      sync.Mutex
	buckets map[string]*memBucket
	pools   map[string][]memSlot
}

type memBucket struct {
	tat   int64 // Unix nanoseconds
	rate  float64
	burst int
}

type memSlot struct {
	owner string
	lease int64 // Unix nanoseconds
}

// checkOpen fails with ErrClosed once Close has begun.
func (db *DB) checkOpen() error {
	db.mu.RLock()
	defer db.mu.RUnlock()
	if db.closed {
		return ErrClosed
	}
	return nil
}

// Flow documents: version byte (1), the document's version as uvarint,
// Updated and Expires as varint Unix nanoseconds (0: none), the data
// length-prefixed. Later versions only append.
const flowDocVersion = 1

func encodeFlowDoc(d *FlowDoc) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+binary.MaxVarintLen16+len(d.Data))
	b = append(b, flowDocVersion)
	b = binary.AppendUvarint(b, uint64(d.Version))
	b = binary.AppendVarint(b, unixNano(d.Updated))
	b = binary.AppendVarint(b, unixNano(d.Expires))
	b = binary.AppendUvarint(b, uint64(len(d.Data)))
	return append(b, d.Data...)
}

func decodeFlowDoc(scope string, b []byte) (FlowDoc, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v < flowDocVersion {
		return FlowDoc{}, fmt.Errorf("flow %q: version %d: %w", scope, v, ErrCorrupt)
	}
	doc := FlowDoc{Scope: scope}
	doc.Version = int64(d.uvarint(1 << 62))
	doc.Updated = fromUnixNano(d.varint())
	doc.Expires = fromUnixNano(d.varint())
	doc.Data = d.bytes(MaxFlowData)
	if d.err != nil {
		return FlowDoc{}, fmt.Errorf("flow %q: %v: %w", scope, d.err, ErrCorrupt)
	}
	return doc, nil
}

// flowRead is what a read of scope's stored document (nil: none) answers.
func flowRead(scope string, stored *FlowDoc, now time.Time) FlowRead {
	if stored == nil {
		return FlowRead{Doc: FlowDoc{Scope: scope}, Now: now}
	}
	if !stored.Live(now) {
		return FlowRead{Doc: FlowDoc{Scope: scope, Version: stored.Version}, Now: now}
	}
	return FlowRead{Doc: *stored, Found: true, Now: now}
}

func getFlowDoc(b *bolt.Bucket, scope string) (*FlowDoc, error) {
	v := b.Get([]byte(scope))
	if v == nil {
		return nil, nil
	}
	d, err := decodeFlowDoc(scope, v)
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// GetFlow reads the document of scope. A document that expired or was
// deleted is not Found; Doc.Version is then its last version.
func (db *DB) GetFlow(ctx context.Context, scope string) (FlowRead, error) {
	if err := ValidateScope(scope); err != nil {
		return FlowRead{}, fmt.Errorf("get flow: %w", err)
	}
	var r FlowRead
	err := db.view(func(tx *bolt.Tx) error {
		d, err := getFlowDoc(tx.Bucket(bucketFlowDocs), scope)
		r = flowRead(scope, d, db.now())
		return err
	})
	if err != nil {
		return FlowRead{}, fmt.Errorf("get flow %q: %w", scope, err)
	}
	return r, nil
}

// PutFlow writes doc as version ifVersion+1 of its scope, only if the
// scope's stored version is ifVersion: the live document's, or for a scope
// without one the last document's (0 when there was none, as GetFlow
// reports it in Doc.Version). Otherwise it writes nothing and fails with
// ErrConflict, and the answer holds what is stored. On success the answer
// holds the document written, Updated (and Expires, from TTL) set by the
// ledger's clock. It returns once the write is durable.
func (db *DB) PutFlow(ctx context.Context, doc FlowDoc, ifVersion int64) (FlowRead, error) {
	if err := doc.Validate(); err != nil {
		return FlowRead{}, fmt.Errorf("put flow: %w", err)
	}
	if ifVersion < 0 {
		return FlowRead{}, fmt.Errorf("put flow %q: negative version %d: %w", doc.Scope, ifVersion, ErrInvalidArgument)
	}
	var r FlowRead
	var conflict bool
	err := db.write(ctx, func(s *store) error {
		b := s.tx.Bucket(bucketFlowDocs)
		cur, err := getFlowDoc(b, doc.Scope)
		if err != nil {
			return err
		}
		stored := int64(0)
		if cur != nil {
			stored = cur.Version
		}
		if stored != ifVersion {
			r, conflict = flowRead(doc.Scope, cur, s.now), true
			return nil
		}
		next := stampFlow(doc, ifVersion, s.now)
		r, conflict = flowRead(doc.Scope, &next, s.now), false
		return b.Put([]byte(doc.Scope), encodeFlowDoc(&next))
	})
	if err != nil {
		return FlowRead{}, fmt.Errorf("put flow %q: %w", doc.Scope, err)
	}
	if conflict {
		return r, fmt.Errorf("put flow %q: stored version %d, not %d: %w", doc.Scope, r.Doc.Version, ifVersion, ErrConflict)
	}
	return r, nil
}

// stampFlow is doc as written over version ifVersion at now.
func stampFlow(doc FlowDoc, ifVersion int64, now time.Time) FlowDoc {
	doc.Version = ifVersion + 1
	doc.Updated = now
	if doc.TTL > 0 {
		doc.Expires = now.Add(doc.TTL)
	}
	doc.TTL = 0
	doc.Data = slices.Clone(doc.Data)
	if len(doc.Data) == 0 {
		doc.Data = nil
	}
	return doc
}

// DeleteFlow deletes the live document of scope if its version is
// ifVersion: ErrNotFound when there is none, ErrConflict when its version
// is another. The scope keeps a tombstone of version ifVersion+1 for
// FlowKeep, so that a writer that read the deleted document cannot write
// over the deletion.
func (db *DB) DeleteFlow(ctx context.Context, scope string, ifVersion int64) error {
	if err := ValidateScope(scope); err != nil {
		return fmt.Errorf("delete flow: %w", err)
	}
	var answer error
	err := db.write(ctx, func(s *store) error {
		b := s.tx.Bucket(bucketFlowDocs)
		cur, err := getFlowDoc(b, scope)
		if err != nil {
			return err
		}
		answer = deleteAnswer(scope, cur, ifVersion, s.now)
		if answer != nil {
			return nil
		}
		tomb := tombstone(scope, ifVersion, s.now)
		return b.Put([]byte(scope), encodeFlowDoc(&tomb))
	})
	if err != nil {
		return fmt.Errorf("delete flow %q: %w", scope, err)
	}
	return answer
}

// deleteAnswer is the answer of a DeleteFlow that finds cur (nil: none).
func deleteAnswer(scope string, cur *FlowDoc, ifVersion int64, now time.Time) error {
	switch {
	case cur == nil || !cur.Live(now):
		return fmt.Errorf("delete flow %q: %w", scope, ErrNotFound)
	case cur.Version != ifVersion:
		return fmt.Errorf("delete flow %q: stored version %d, not %d: %w", scope, cur.Version, ifVersion, ErrConflict)
	}
	return nil
}

// tombstone is what DeleteFlow leaves of version ifVersion.
func tombstone(scope string, ifVersion int64, now time.Time) FlowDoc {
	return FlowDoc{Scope: scope, Version: ifVersion + 1, Updated: now, Expires: now}
}

// ListFlows returns the live flow documents, by scope.
func (db *DB) ListFlows(ctx context.Context) ([]FlowDoc, error) {
	var docs []FlowDoc
	err := db.view(func(tx *bolt.Tx) error {
		now := db.now()
		return tx.Bucket(bucketFlowDocs).ForEach(func(k, v []byte) error {
			d, err := decodeFlowDoc(string(k), v)
			if err != nil {
				return err
			}
			if d.Live(now) {
				docs = append(docs, d)
			}
			return ctx.Err()
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	return docs, nil
}

// processJSON is a process as the embedded ledger stores it.
type processJSON struct {
	Host      string    `json:"host,omitempty"`
	PID       int       `json:"pid,omitempty"`
	Version   string    `json:"version,omitempty"`
	Queue     string    `json:"queue,omitempty"`
	Started   time.Time `json:"started"`
	Beat      time.Time `json:"beat"`
	InHand    int       `json:"in_hand,omitempty"`
	Paused    bool      `json:"paused,omitempty"`
	PausedWhy string    `json:"paused_why,omitempty"`
	Expires   time.Time `json:"expires"`
}

// StampProcess is p as every ledger writes it at now: Beat set, Expires
// from TTL.
func StampProcess(p Process, now time.Time) Process {
	p.Beat = now
	if p.TTL > 0 {
		p.Expires = now.Add(p.TTL)
	}
	p.TTL, p.BeatAge = 0, 0
	return p
}

// PutProcess registers p, or renews its registration: the worker calls it
// at its start and at every beat. Beat is set by the ledger's clock, and
// Expires from TTL when TTL is positive. It returns once the write is
// durable.
func (db *DB) PutProcess(ctx context.Context, p Process) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("put process: %w", err)
	}
	err := db.write(ctx, func(s *store) error {
		q := StampProcess(p, s.now)
		v, err := json.Marshal(processJSON{Host: q.Host, PID: q.PID, Version: q.Version, Queue: q.Queue, Started: q.Started,
			Beat: q.Beat, InHand: q.InHand, Paused: q.Paused, PausedWhy: q.PausedWhy, Expires: q.Expires})
		if err != nil {
			return err
		}
		return s.tx.Bucket(bucketProcesses).Put([]byte(p.ID), v)
	})
	if err != nil {
		return fmt.Errorf("put process %q: %w", p.ID, err)
	}
	return nil
}

// RemoveProcess removes the registration of id: the worker calls it when it
// stops. An absent id is not an error.
func (db *DB) RemoveProcess(ctx context.Context, id string) error {
	if err := validName("process", id); err != nil {
		return fmt.Errorf("remove process: %w", err)
	}
	err := db.write(ctx, func(s *store) error {
		return s.tx.Bucket(bucketProcesses).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("remove process %q: %w", id, err)
	}
	return nil
}

// Processes returns the registered processes, by ID: those whose
// registration is live and those whose registration lapsed less than
// ProcessKeep ago (a caller judges them down from BeatAge).
func (db *DB) Processes(ctx context.Context) ([]Process, error) {
	var ps []Process
	err := db.view(func(tx *bolt.Tx) error {
		now := db.now()
		return tx.Bucket(bucketProcesses).ForEach(func(k, v []byte) error {
			var j processJSON
			if err := json.Unmarshal(v, &j); err != nil {
				return fmt.Errorf("process %q: %v: %w", k, err, ErrCorrupt)
			}
			if !j.Expires.Add(ProcessKeep).After(now) {
				return nil
			}
			ps = append(ps, Process{ID: string(k), Host: j.Host, PID: j.PID, Version: j.Version, Queue: j.Queue,
				Started: j.Started, Beat: j.Beat, BeatAge: now.Sub(j.Beat), InHand: j.InHand, Paused: j.Paused,
				PausedWhy: j.PausedWhy, Expires: j.Expires})
			return ctx.Err()
		})
	})
	if err != nil {
		return nil, fmt.Errorf("processes: %w", err)
	}
	return ps, nil
}

// Reserve takes rate tokens (see Reservation and Grant). An invalid
// reservation fails the call before anything is taken. On the embedded
// ledger the buckets are in memory (see the package documentation): a
// restart starts them full.
func (db *DB) Reserve(ctx context.Context, r Reservation) (Grant, error) {
	if err := r.Validate(); err != nil {
		return Grant{}, err
	}
	if err := db.checkOpen(); err != nil {
		return Grant{}, fmt.Errorf("reserve: %w", err)
	}
	m := &db.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buckets == nil {
		m.buckets = map[string]*memBucket{}
	}
	n := len(r.Buckets)
	tats, rates, bursts := make([]int64, n), make([]float64, n), make([]int, n)
	for i, b := range r.Buckets {
		if mb := m.buckets[b.Name]; mb != nil {
			tats[i], rates[i], bursts[i] = mb.tat, mb.rate, mb.burst
		}
	}
	was := slices.Clone(tats)
	g := r.Plan(tats, rates, bursts, db.now().UnixNano())
	for i, b := range r.Buckets {
		if tats[i] != was[i] { // a token was taken: the bucket holds this reserver's limits
			m.buckets[b.Name] = &memBucket{tat: tats[i], rate: b.Rate, burst: b.Burst}
		}
	}
	return g, nil
}

// BucketLimits returns the rate and burst that the rate bucket name holds
// (see Grant.Rates): the limits its last reserver took tokens with;
// found is false for a bucket with none. On the embedded ledger buckets
// live in memory, in the one process that reserves.
func (db *DB) BucketLimits(ctx context.Context, name string) (rate float64, burst int, found bool, err error) {
	if err := db.checkOpen(); err != nil {
		return 0, 0, false, fmt.Errorf("bucket limits: %w", err)
	}
	db.mem.mu.Lock()
	defer db.mem.mu.Unlock()
	if mb := db.mem.buckets[name]; mb != nil {
		return mb.rate, mb.burst, true, nil
	}
	return 0, 0, false, nil
}

// TakeSlots takes free slots for each request, at once (see SlotRequest):
// for each request the slots taken, fewer than N (or none) when fewer are
// free. An invalid request, or a pool named twice, fails the call before
// anything is taken. On the embedded ledger the slots are in memory.
func (db *DB) TakeSlots(ctx context.Context, rs []SlotRequest) ([][]Slot, error) {
	if err := ValidateSlotRequests(rs); err != nil {
		return nil, err
	}
	if err := db.checkOpen(); err != nil {
		return nil, fmt.Errorf("take slots: %w", err)
	}
	m := &db.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pools == nil {
		m.pools = map[string][]memSlot{}
	}
	now := db.now().UnixNano()
	out := make([][]Slot, len(rs))
	for i := range rs {
		r := &rs[i]
		pool := m.pools[r.Pool]
		if len(pool) < r.Limit {
			pool = append(pool, make([]memSlot, r.Limit-len(pool))...)
			m.pools[r.Pool] = pool
		}
		out[i] = []Slot{}
		for idx := 0; idx < r.Limit && len(out[i]) < r.N; idx++ {
			if pool[idx].owner != "" && pool[idx].lease > now {
				continue
			}
			pool[idx] = memSlot{owner: r.Owner, lease: now + int64(r.Lease)}
			out[i] = append(out[i], Slot{Pool: r.Pool, Index: idx, Owner: r.Owner})
		}
	}
	return out, nil
}

// ExtendSlots renews the leases of slots to now+lease, one error per slot:
// ErrNotOwner for a slot its owner no longer holds (it was released, or
// taken by another owner after its lease lapsed).
func (db *DB) ExtendSlots(ctx context.Context, ss []Slot, lease time.Duration) []error {
	if err := ValidateSlotLease(lease); err != nil {
		return sameErrors(len(ss), fmt.Errorf("extend slots: %w", err))
	}
	return db.eachSlot("extend slot", ss, func(s *memSlot, now int64) { s.lease = now + int64(lease) })
}

// sameErrors is n times err.
func sameErrors(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// ReleaseSlots gives slots back, one error per slot: ErrNotOwner for a slot
// its owner no longer holds.
func (db *DB) ReleaseSlots(ctx context.Context, ss []Slot) []error {
	return db.eachSlot("release slot", ss, func(s *memSlot, _ int64) { *s = memSlot{} })
}

func (db *DB) eachSlot(op string, ss []Slot, fn func(s *memSlot, now int64)) []error {
	errs := make([]error, len(ss))
	open := db.checkOpen()
	m := &db.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	now := db.now().UnixNano()
	for i, s := range ss {
		if err := ValidateSlot(s); err != nil {
			errs[i] = fmt.Errorf("%s: %w", op, err)
			continue
		}
		if open != nil {
			errs[i] = fmt.Errorf("%s %s#%d: %w", op, s.Pool, s.Index, open)
			continue
		}
		pool := m.pools[s.Pool]
		if s.Index >= len(pool) || pool[s.Index].owner != s.Owner {
			errs[i] = fmt.Errorf("%s %s#%d: not held by %q: %w", op, s.Pool, s.Index, s.Owner, ErrNotOwner)
			continue
		}
		fn(&pool[s.Index], now)
	}
	return errs
}

// sweepFlow removes the flow state that has no more use: flow entries of
// records that are gone, tombstones of flow documents older than FlowKeep,
// registrations lapsed more than ProcessKeep ago, idle rate buckets and
// slots lapsed more than SlotIdle ago.
func (db *DB) sweepFlow(ctx context.Context) error {
	if err := db.sweepRecFlow(ctx); err != nil {
		return err
	}
	if err := db.sweepSidecars(ctx); err != nil {
		return err
	}
	err := db.write(ctx, func(s *store) error {
		var stale [][]byte
		docs := s.tx.Bucket(bucketFlowDocs)
		err := docs.ForEach(func(k, v []byte) error {
			d, err := decodeFlowDoc(string(k), v)
			if err == nil && !d.Expires.IsZero() && !d.Expires.Add(FlowKeep).After(s.now) {
				stale = append(stale, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range stale {
			if err := docs.Delete(k); err != nil {
				return err
			}
		}
		stale = stale[:0]
		procs := s.tx.Bucket(bucketProcesses)
		err = procs.ForEach(func(k, v []byte) error {
			var j processJSON
			if json.Unmarshal(v, &j) == nil && !j.Expires.Add(ProcessKeep).After(s.now) {
				stale = append(stale, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range stale {
			if err := procs.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	m := &db.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	now := db.now().UnixNano()
	for name, b := range m.buckets {
		if b.tat+int64(BucketIdle) <= now {
			delete(m.buckets, name)
		}
	}
	for name, pool := range m.pools {
		if !slices.ContainsFunc(pool, func(s memSlot) bool { return s.owner != "" && s.lease+int64(SlotIdle) > now }) {
			delete(m.pools, name)
		}
	}
	return nil
}
