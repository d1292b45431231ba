package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// SchemaVersion is the layout of buckets and records this code writes. A file
// with a higher version is refused with ErrSchema.
const SchemaVersion = 1

// Defaults and limits for Options.
const (
	// DefaultRetention is 14 days, SQS's longest message retention: it
	// outlasts a queue and its dead-letter queue made with SQS's defaults
	// (4 days each) with room for a sender's retries.
	DefaultRetention = 14 * 24 * time.Hour
	// MaxRetention keeps expiry times far from the year 2262, where Unix
	// nanoseconds overflow.
	MaxRetention       = 10 * 365 * 24 * time.Hour
	DefaultLockTimeout = 2 * time.Second
	defaultSweepChunk  = 2000
	// requestQueue is how many write requests may wait for the committer
	// before a caller waits to hand its own over.
	requestQueue = 1024
	// DefaultCompleteDelay is how long a completion waits for company
	// when it would otherwise commit alone.
	DefaultCompleteDelay = time.Millisecond
	// readyRounds bounds how many times the committer yields to the
	// goroutines ready to run before a commit (see gatherReady).
	readyRounds = 4
)

// Bucket names.
var (
	bucketRecords  = []byte("records")  // key -> encoded Record
	bucketExpiry   = []byte("expiry")   // 8-byte expiry nanos + key -> empty
	bucketInFlight = []byte("inflight") // 8-byte claimed nanos + key -> empty, for in_progress records
	bucketMeta     = []byte("meta")     // schema version and counters

	metaSchema = []byte("schema")
)

// Options configure Open. The zero value of each field picks its default.
type Options struct {
	// Retention is how long a record is kept after its last write. After
	// that it is treated as absent and the sweeper removes it. A write of
	// a claim within a second of it (a quick completion) keeps the claim's
	// expiry, a second less at most.
	Retention time.Duration
	// LockTimeout bounds how long Open waits for another process to release
	// the file before it fails with ErrLocked.
	LockTimeout time.Duration
	// Now is the clock. Tests inject a fake one.
	Now func() time.Time
	// MaxBatch, when positive, bounds how many write requests share one
	// commit. By default none does: a commit takes every request waiting
	// when it starts, so that commits grow with the load. (The requests
	// waiting are bounded by the callers waiting for them.)
	MaxBatch int
	// SweepChunk bounds how many records one sweep transaction removes, so
	// that claims never wait long behind a sweep.
	SweepChunk int
	// CompleteDelay is how long a completion that would commit alone waits
	// for other writes (the next batch of claims, say) to share its commit
	// and its fsync. A write that is not a completion ends the wait at
	// once. It lengthens, by at most this much, the time in which done
	// work is not yet recorded; in exchange a busy worker makes about one
	// commit per received batch instead of one for its claims and another
	// for its completions. A completion written under a context from
	// WithoutDelay does not wait. Zero picks DefaultCompleteDelay; a
	// negative value turns the wait off.
	CompleteDelay time.Duration
	// OnCommit, when set, is called by the committer after each commit
	// with the number of write requests it carried, how long it took
	// (fsync included) and its error. It must be quick: commits wait for it.
	OnCommit func(requests int, took time.Duration, err error)

	// openFile opens the file for bbolt (os.OpenFile when nil). Tests use
	// it to learn when an Open has the file and is about to wait for its
	// lock.
	openFile func(name string, flag int, perm os.FileMode) (*os.File, error)
}

// DB is a ledger on a bbolt file. It is safe for concurrent use by many
// goroutines; only one process may hold the file.
//
// Writes are applied by a single committer goroutine that takes every write
// request waiting at the time and applies them in one transaction with one
// fsync (group commit). Writes that arrive while a commit is in flight share
// the next one. A write that finds the committer idle commits once the
// goroutines ready to run have handed theirs over (no timer: a scheduler's
// yield), except a completion, which waits up to Options.CompleteDelay for
// company.
type DB struct {
	bolt      *bolt.DB
	file      *os.File // the file bbolt opened and locked, while open
	path      string
	retention time.Duration
	now       func() time.Time
	maxBatch  int // Options.MaxBatch; 0: no bound
	chunk     int
	onCommit  func(int, time.Duration, error)
	linger    time.Duration // Options.CompleteDelay, 0 when off

	mu       sync.RWMutex // guards closed and sends on reqs
	closed   bool
	reqs     chan *request
	loopDone chan struct{}
	commits  uint64 // commits made; read with Commits
	commitMu sync.Mutex

	mem flowMem // rate buckets and slots (see flowdb.go)
}

// request is one write waiting for a commit. apply runs inside the write
// transaction, on the store that every request of the transaction shares, and
// may run more than once (when another request in the same commit fails, the
// rest are applied again in a new transaction), so it must derive everything
// from the store and overwrite, not accumulate, its results. It returns an
// error only for a failure that must abort the transaction; outcomes meant
// for the caller are stored by apply itself.
type request struct {
	apply func(s *store) error
	done  chan error
	// lazy requests (completions) may wait for company; see CompleteDelay.
	lazy bool
}

// Open opens the ledger file at path, creating it (mode 0600) and its parent
// directory (mode 0700) when missing. It fails with ErrLocked when another
// process holds the file for longer than Options.LockTimeout, with ErrCorrupt
// when the file is not a readable ledger and with ErrSchema when it was
// written by a newer version.
//
// The returned ledger is on the file that path names once the lock is held:
// when the file is replaced while Open waits for its lock (Compact renames
// a new file over the path, then lets go of the old one), Open opens the new
// file, so that nothing is written to a file that no longer has a name.
func Open(path string, opts Options) (db *DB, err error) {
	if path == "" {
		return nil, fmt.Errorf("open ledger: empty path: %w", ErrInvalidArgument)
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Retention > MaxRetention {
		return nil, fmt.Errorf("open ledger: retention %v is longer than %v: %w", opts.Retention, MaxRetention, ErrInvalidArgument)
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SweepChunk <= 0 {
		opts.SweepChunk = defaultSweepChunk
	}
	if opts.CompleteDelay == 0 {
		opts.CompleteDelay = DefaultCompleteDelay
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open ledger: create directory: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("open ledger %s: is a directory: %w", path, ErrInvalidArgument)
	}

	bdb, file, err := openLocked(path, opts)
	if err != nil {
		return nil, err
	}
	db = &DB{
		bolt:      bdb,
		file:      file,
		path:      path,
		retention: opts.Retention,
		now:       opts.Now,
		maxBatch:  max(opts.MaxBatch, 0),
		chunk:     opts.SweepChunk,
		onCommit:  opts.OnCommit,
		linger:    max(opts.CompleteDelay, 0),
		reqs:      make(chan *request, requestQueue),
		loopDone:  make(chan struct{}),
	}
	if err := db.init(); err != nil {
		bdb.Close()
		return nil, err
	}
	go db.loop()
	return db, nil
}

// maxReopen bounds how often Open opens the file again because it was
// replaced while Open waited for its lock.
const maxReopen = 5

// openLocked opens path with bbolt and takes its lock. A lock is held on an
// open file, not on a name: a process that opened the file and then waited
// for the lock may get it on a file that has since been replaced (Compact
// renames a new file over the path) or removed, and whatever it wrote there
// would be lost. So once it holds the lock, openLocked checks that path
// still names the locked file, and otherwise opens path again, within
// Options.LockTimeout.
func openLocked(path string, opts Options) (*bolt.DB, *os.File, error) {
	openFile := opts.openFile
	if openFile == nil {
		openFile = os.OpenFile
	}
	deadline := time.Now().Add(opts.LockTimeout)
	for attempt := 1; ; attempt++ {
		var file *os.File
		bopts := &bolt.Options{
			// At least one try, also when the time is up: zero waits forever.
			Timeout: max(time.Until(deadline), time.Millisecond),
			OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
				f, err := openFile(name, flag, perm)
				if err != nil {
					return nil, err
				}
				if err := checkFile(f); err != nil {
					f.Close()
					return nil, err
				}
				file = f
				return f, nil
			},
		}
		var bdb *bolt.DB
		err := guard(func() error {
			var err error
			bdb, err = bolt.Open(path, 0o600, bopts)
			return err
		})
		if err != nil {
			return nil, nil, openError(path, err, opts.LockTimeout)
		}
		same, err := names(path, file)
		if err != nil {
			bdb.Close()
			return nil, nil, fmt.Errorf("open ledger %s: %w", path, err)
		}
		if same {
			return bdb, file, nil
		}
		bdb.Close()
		if attempt == maxReopen || time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("open ledger %s: the file was replaced %d times while this open waited for its lock (a compaction?): %w",
				path, attempt, ErrLocked)
		}
	}
}

// names reports whether path names f: the same device and inode.
func names(path string, f *os.File) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fi, pi), nil
}

// openError turns an error of bolt.Open into one that says what is wrong.
func openError(path string, err error, timeout time.Duration) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("open ledger %s: waited %v for the file lock: another sqsonce process is using this ledger: %w", path, timeout, ErrLocked)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch),
		errors.Is(err, berrors.ErrChecksum), errors.Is(err, ErrCorrupt):
		return fmt.Errorf("open ledger %s: not a valid ledger file (%v): %w", path, err, ErrCorrupt)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return fmt.Errorf("open ledger %s: cannot open for writing (read-only file, directory or file system?): %w", path, err)
	}
	return fmt.Errorf("open ledger %s: %w", path, err)
}

// init checks the file's size and schema and creates missing buckets.
func (db *DB) init() error {
	fi, err := db.file.Stat()
	if err != nil {
		return fmt.Errorf("open ledger %s: %w", db.path, err)
	}
	err = guard(func() error {
		return db.bolt.Update(func(tx *bolt.Tx) error {
			// A file cut short would make bbolt read past its end.
			if tx.Size() > fi.Size() {
				return fmt.Errorf("file is %d bytes, its pages need %d: truncated: %w", fi.Size(), tx.Size(), ErrCorrupt)
			}
			meta := tx.Bucket(bucketMeta)
			if meta == nil {
				if tx.Bucket(bucketRecords) != nil || !isEmpty(tx) {
					return fmt.Errorf("a bbolt file without sqsonce's meta bucket: not a ledger: %w", ErrCorrupt)
				}
				meta, err = tx.CreateBucket(bucketMeta)
				if err != nil {
					return err
				}
				if err := meta.Put(metaSchema, binary.BigEndian.AppendUint64(nil, SchemaVersion)); err != nil {
					return err
				}
			}
			v := meta.Get(metaSchema)
			if len(v) != 8 {
				return fmt.Errorf("schema version unreadable: %w", ErrCorrupt)
			}
			if got := binary.BigEndian.Uint64(v); got > SchemaVersion {
				return fmt.Errorf("written with schema %d, this sqsonce reads up to %d: upgrade sqsonce: %w", got, SchemaVersion, ErrSchema)
			}
			for _, name := range [][]byte{bucketRecords, bucketExpiry, bucketInFlight} {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return err
				}
			}
			if err := initFlow(tx, meta); err != nil {
				return err
			}
			return checkTally(tx, meta)
		})
	})
	if err != nil {
		return openError(db.path, err, 0)
	}
	return nil
}

func isEmpty(tx *bolt.Tx) bool {
	empty := true
	_ = tx.ForEach(func([]byte, *bolt.Bucket) error {
		empty = false
		return errors.New("stop")
	})
	return empty
}

// guard runs fn and turns a panic inside bbolt (which it raises on some
// corrupt pages) into an error wrapping ErrCorrupt.
func guard(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("bbolt: %v: %w", p, ErrCorrupt)
		}
	}()
	return fn()
}

// Path returns the file the ledger was opened on.
func (db *DB) Path() string { return db.path }

// Commits returns how many write transactions the ledger has committed since
// Open: one fsync each.
func (db *DB) Commits() uint64 {
	db.commitMu.Lock()
	defer db.commitMu.Unlock()
	return db.commits
}

// Close waits for queued writes to commit, then closes the file. Calls after
// Close fail with ErrClosed. Close is safe to call more than once.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	close(db.reqs)
	db.mu.Unlock()
	<-db.loopDone
	return db.bolt.Close()
}

// write submits apply to the committer and waits until its commit is durable.
// When ctx ends first the call returns ctx's error, and the write may still
// take effect.
func (db *DB) write(ctx context.Context, apply func(s *store) error) error {
	return db.writeRequest(ctx, &request{apply: apply, done: make(chan error, 1)})
}

func (db *DB) writeRequest(ctx context.Context, r *request) error {
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	select {
	case db.reqs <- r:
	case <-ctx.Done():
		db.mu.RUnlock()
		return ctx.Err()
	}
	db.mu.RUnlock()
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop is the committer: it gathers every request waiting and commits them
// together, until Close closes the channel and the queue is empty.
func (db *DB) loop() {
	defer close(db.loopDone)
	var batch []*request
	for r := range db.reqs {
		batch = db.gather(append(batch[:0], r), nil)
		if db.linger > 0 && allLazy(batch) {
			t := time.NewTimer(db.linger)
			batch = db.gather(batch, t.C)
			t.Stop()
		} else {
			batch = db.gatherReady(batch)
		}
		db.commit(batch)
	}
}

// gather adds waiting requests to batch, up to the batch limit if there is
// one. With until
// nil it takes only those waiting now. Otherwise it also waits for more
// until then, and stops at the first request that is not a completion:
// that one joins, with whatever waits behind it.
func (db *DB) gather(batch []*request, until <-chan time.Time) []*request {
	for db.maxBatch == 0 || len(batch) < db.maxBatch {
		var r *request
		var ok bool
		if until == nil {
			select {
			case r, ok = <-db.reqs:
			default:
				return batch
			}
		} else {
			select {
			case r, ok = <-db.reqs:
			case <-until:
				return batch
			}
		}
		if !ok {
			return batch
		}
		batch = append(batch, r)
		if !r.lazy {
			until = nil
		}
	}
	return batch
}

// gatherReady lets the goroutines that are ready to run hand their writes
// over before the committer commits batch, and adds them. A send to an idle
// committer runs it next, ahead of the goroutines already waiting for the
// processor: without this, when many callers finish together (handlers
// freed by the last commit), the first one's write would commit alone and
// the others' in the commit after its fsync. Yielding costs no timer and
// no wait when nothing else is ready; it is bounded so that a steady
// stream of writes cannot hold a commit back.
func (db *DB) gatherReady(batch []*request) []*request {
	for range readyRounds {
		n := len(batch)
		runtime.Gosched()
		if batch = db.gather(batch, nil); len(batch) == n {
			break
		}
	}
	return batch
}

func allLazy(batch []*request) bool {
	for _, r := range batch {
		if !r.lazy {
			return false
		}
	}
	return true
}

// commit applies batch in one transaction. A request whose apply fails gets
// its error alone and the others are applied again without it. When the
// commit itself fails (a full disk, say), nothing of it is written and each
// request is tried again in a commit of its own, failing only those that
// still cannot be written.
func (db *DB) commit(batch []*request) {
	for len(batch) > 0 {
		failed := -1
		start := time.Now()
		err := guard(func() error {
			return db.bolt.Update(func(tx *bolt.Tx) error {
				// One view for the whole transaction: the per-state
				// counters are written once, not once per request.
				st := db.store(tx)
				for i, r := range batch {
					if err := r.apply(st); err != nil {
						failed = i
						return err
					}
				}
				if err := st.flushCounts(); err != nil {
					return err
				}
				return st.flushTally()
			})
		})
		if err == nil {
			db.commitMu.Lock()
			db.commits++
			db.commitMu.Unlock()
		}
		if db.onCommit != nil {
			db.onCommit(len(batch), time.Since(start), err)
		}
		if err != nil && failed < 0 && len(batch) > 1 {
			// The commit failed (a full disk, say): try each request on
			// its own, so that those that fit (a completion needs no new
			// page, a claim of a new key may) are not failed with the
			// rest.
			for _, r := range batch {
				db.commit([]*request{r})
			}
			return
		}
		if err == nil || failed < 0 {
			if err != nil {
				err = fmt.Errorf("commit ledger %s: %w", db.path, err)
			}
			for _, r := range batch {
				r.done <- err
			}
			return
		}
		batch[failed].done <- err
		batch = append(batch[:failed], batch[failed+1:]...)
	}
}

// view runs fn in a read transaction, concurrently with writes.
func (db *DB) view(fn func(tx *bolt.Tx) error) error {
	db.mu.RLock()
	closed := db.closed
	db.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	return guard(func() error { return db.bolt.View(fn) })
}
