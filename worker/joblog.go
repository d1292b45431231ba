package worker

import (
	"context"
	"log/slog"
	"time"
)

// jobLog logs for one message with its attributes: its message id, then,
// once known, its key and attempt, then, once it ran, the work's duration.
// Unlike slog.Logger.With, which formats the attributes at once, it adds
// them only to what is logged: most messages log nothing at the default
// level, and formatting attributes for every one costs CPU at high rates.
// It is a small value: making one and adding to it allocates nothing, and
// it keeps the frames of a message's goroutine small (each stack growth
// copies the stack).
type jobLog struct {
	l        *slog.Logger
	id       string
	key      string
	attempt  int
	duration time.Duration
	has      uint8 // jobLogKey, jobLogDuration
}

const (
	jobLogKey = 1 << iota
	jobLogDuration
)

func newJobLog(l *slog.Logger, messageID string) jobLog {
	return jobLog{l: l, id: messageID}
}

// withKey returns the jobLog with the key and attempt added.
func (j jobLog) withKey(key string, attempt int) jobLog {
	j.key, j.attempt = key, attempt
	j.has |= jobLogKey
	return j
}

// withDuration returns the jobLog with the work's duration added.
func (j jobLog) withDuration(d time.Duration) jobLog {
	j.duration = d
	j.has |= jobLogDuration
	return j
}

func (j *jobLog) log(level slog.Level, msg string, args []any) {
	ctx := context.Background()
	if !j.l.Enabled(ctx, level) {
		return
	}
	all := make([]any, 0, 4+len(args))
	all = append(all, slog.String("message_id", j.id))
	if j.has&jobLogKey != 0 {
		all = append(all, slog.String("key", j.key), slog.Int("attempt", j.attempt))
	}
	if j.has&jobLogDuration != 0 {
		all = append(all, slog.Duration("duration", j.duration))
	}
	j.l.Log(ctx, level, msg, append(all, args...)...)
}

func (j *jobLog) Debug(msg string, args ...any) { j.log(slog.LevelDebug, msg, args) }
func (j *jobLog) Info(msg string, args ...any)  { j.log(slog.LevelInfo, msg, args) }
func (j *jobLog) Warn(msg string, args ...any)  { j.log(slog.LevelWarn, msg, args) }
func (j *jobLog) Error(msg string, args ...any) { j.log(slog.LevelError, msg, args) }
