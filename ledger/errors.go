package ledger

import "errors"

// Errors returned by ledger operations. They are backend-neutral: every
// implementation wraps these so callers can test with errors.Is.
var (
	// ErrInvalidKey is returned for an empty key, a key longer than
	// MaxKeyLen bytes, or a key that is not valid UTF-8.
	ErrInvalidKey = errors.New("invalid operation key")

	// ErrInvalidArgument is returned for other bad arguments: an empty
	// owner, a non-positive lease or one longer than the retention, an
	// oversized fingerprint.
	ErrInvalidArgument = errors.New("invalid argument")

	// ErrNotFound is returned when no live record exists for a key. An
	// expired record that has not been swept yet is not live.
	ErrNotFound = errors.New("no such operation")

	// ErrNotOwner is returned by a transition whose owner no longer holds
	// the record: the lease lapsed and another owner took the operation
	// over. The caller must stop and must not report the work as done.
	ErrNotOwner = errors.New("operation owned by another claim")

	// ErrState is returned when the record is not in a state that allows
	// the transition, for example completing a failed record.
	ErrState = errors.New("operation not in a state for this")

	// ErrLocked is returned by Open when another process holds the ledger
	// file.
	ErrLocked = errors.New("ledger held by another process")

	// ErrCorrupt is returned when the file is not a readable ledger: not a
	// bbolt file, truncated, or holding records that cannot be decoded.
	ErrCorrupt = errors.New("ledger corrupt")

	// ErrSchema is returned by Open when the file was written by a newer
	// sqsonce with a schema this one does not know.
	ErrSchema = errors.New("ledger schema too new")

	// ErrNoSchema is returned by a shared ledger's Open when its table
	// does not exist yet: `sqsonce ledger init` creates it.
	ErrNoSchema = errors.New("ledger schema missing")

	// ErrUnavailable is wrapped by the errors of a shared ledger whose
	// store cannot be reached (connection refused or lost, a timeout):
	// the call may succeed later.
	ErrUnavailable = errors.New("ledger store unavailable")

	// ErrContention is wrapped by the errors of a shared ledger whose
	// store answered, and rolled the call's transaction back because of
	// a concurrent one (in PostgreSQL a serialization failure or a
	// deadlock): nothing of it took effect, and the same call may
	// succeed when made again. The store is not unavailable.
	ErrContention = errors.New("transaction rolled back because of a concurrent one (serialization failure or deadlock): it must be retried")

	// ErrClosed is returned by calls on a closed ledger.
	ErrClosed = errors.New("ledger closed")

	// ErrConflict is returned by a compare-and-set of a flow document
	// (PutFlow, DeleteFlow) whose expected version is not the stored
	// one: another writer came first. The answer holds the current
	// document.
	ErrConflict = errors.New("flow document changed by another writer")
)
