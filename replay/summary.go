package replay

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Summary is what a run did, or has done so far. In a dry run the counts
// say what would have been done.
type Summary struct {
	Moved             int64 `json:"moved"`               // sent to the target and deleted from the source (or being deleted)
	DroppedComplete   int64 `json:"dropped_complete"`    // deleted from the source: operation complete, DropComplete
	SkippedComplete   int64 `json:"skipped_complete"`    // left: operation complete
	SkippedKeyless    int64 `json:"skipped_keyless"`     // left: no operation key
	SkippedMaxReplays int64 `json:"skipped_max_replays"` // left: replayed MaxReplays times already
	SkippedFiltered   int64 `json:"skipped_filtered"`    // left: outside KeyGlob, Since or Until
	SkippedConflict   int64 `json:"skipped_conflict"`    // left: its payload differs from the one its key's record was claimed with
	Reset             int64 `json:"reset"`               // failed operations reset in the ledger
	// Failed counts messages left in the source because a ledger call, a
	// send or a delete of a complete one failed (see the log).
	Failed int64 `json:"failed"`
	// NoRoom counts messages left in the source because they carry ten
	// message attributes of their own, which leaves no room for
	// SqsonceReplays (see the package documentation).
	NoRoom       int64 `json:"no_room"`
	DeleteFailed int64 `json:"delete_failed"` // moved, but still in the source too

	Seconds     float64 `json:"seconds"` // since Run started
	Rate        float64 `json:"rate"`    // moved per second, up to the last move
	DryRun      bool    `json:"dry_run"`
	Interrupted bool    `json:"interrupted"` // Stop was called or Run's context ended
}

// Skipped is how many messages were left in the source on purpose.
func (s Summary) Skipped() int64 {
	return s.SkippedComplete + s.SkippedKeyless + s.SkippedMaxReplays + s.SkippedFiltered + s.SkippedConflict
}

// Handled is how many messages were decided: moved, dropped, or left in
// the source on purpose or not. Messages sent but not deleted are among
// the moved.
func (s Summary) Handled() int64 {
	return s.Moved + s.DroppedComplete + s.Skipped() + s.Failed + s.NoRoom
}

// counters are a run's counts, updated by its movers.
type counters struct {
	moved, droppedComplete, skippedComplete, skippedKeyless, skippedMaxReplays,
	skippedFiltered, skippedConflict, reset, failed, noRoom, deleteFailed atomic.Int64
}

func (n *counters) summary() Summary {
	return Summary{
		Moved: n.moved.Load(), DroppedComplete: n.droppedComplete.Load(), SkippedComplete: n.skippedComplete.Load(),
		SkippedKeyless: n.skippedKeyless.Load(), SkippedMaxReplays: n.skippedMaxReplays.Load(),
		SkippedFiltered: n.skippedFiltered.Load(), SkippedConflict: n.skippedConflict.Load(), Reset: n.reset.Load(), Failed: n.failed.Load(),
		NoRoom: n.noRoom.Load(), DeleteFailed: n.deleteFailed.Load(),
	}
}

// round3 rounds to three decimals, so that a summary prints short.
func round3(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', 3, 64), 64)
	return v
}

// seconds is d in seconds, rounded to milliseconds.
func seconds(d time.Duration) float64 { return round3(d.Seconds()) }

// Line is the summary as `sqsonce replay` prints it, one line, for a run
// from the queue from to the queue to.
func (s Summary) Line(from, to string) string {
	verb, dropVerb, resetVerb := "moved", "dropped", "reset"
	if s.DryRun {
		verb, dropVerb, resetVerb = "dry run: would move", "would drop", "would reset"
	}
	line := fmt.Sprintf("%s %d messages from %s to %s in %.1fs (%.0f/s); left %d (complete %d, keyless %d, max replays %d, filtered %d, conflicts %d); %s %d complete; %s %d; failed %d",
		verb, s.Moved, from, to, s.Seconds, s.Rate, s.Skipped(), s.SkippedComplete, s.SkippedKeyless, s.SkippedMaxReplays,
		s.SkippedFiltered, s.SkippedConflict, dropVerb, s.DroppedComplete, resetVerb, s.Reset, s.Failed)
	if s.NoRoom > 0 {
		line += fmt.Sprintf("; %d without room for SqsonceReplays", s.NoRoom)
	}
	if s.DeleteFailed > 0 {
		line += fmt.Sprintf("; %d sent but not deleted", s.DeleteFailed)
	}
	if s.Interrupted {
		line += "; interrupted"
	}
	return line
}
