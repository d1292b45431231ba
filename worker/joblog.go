package worker

import (
	"context"
	"log/slog"
)

// jobLog logs for one message with its attributes (message id, key, ...).
// Unlike slog.Logger.With, which formats the attributes at once, it adds
// them only to what is logged: most messages log nothing at the default
// level, and formatting attributes for every one costs CPU at high rates.
// It is a value that holds its first few attributes itself, so that making
// one and adding to it allocates nothing.
type jobLog struct {
	l     *slog.Logger
	attrs [jobLogAttrs]slog.Attr
	n     int
	more  []slog.Attr // those beyond attrs, rarely any
}

// jobLogAttrs is how many attributes a jobLog holds without allocating:
// those of a message's way through the worker (message id, key, attempt,
// duration).
const jobLogAttrs = 4

func newJobLog(l *slog.Logger, attrs ...slog.Attr) jobLog {
	return jobLog{l: l}.With(attrs...)
}

// With returns a jobLog with attrs added to the attributes.
func (j jobLog) With(attrs ...slog.Attr) jobLog {
	for _, a := range attrs {
		if j.n < len(j.attrs) {
			j.attrs[j.n] = a
			j.n++
			continue
		}
		j.more = append(j.more[:len(j.more):len(j.more)], a)
	}
	return j
}

func (j *jobLog) log(level slog.Level, msg string, args []any) {
	ctx := context.Background()
	if !j.l.Enabled(ctx, level) {
		return
	}
	all := make([]any, 0, j.n+len(j.more)+len(args))
	for _, a := range j.attrs[:j.n] {
		all = append(all, a)
	}
	for _, a := range j.more {
		all = append(all, a)
	}
	j.l.Log(ctx, level, msg, append(all, args...)...)
}

func (j *jobLog) Debug(msg string, args ...any) { j.log(slog.LevelDebug, msg, args) }
func (j *jobLog) Info(msg string, args ...any)  { j.log(slog.LevelInfo, msg, args) }
func (j *jobLog) Warn(msg string, args ...any)  { j.log(slog.LevelWarn, msg, args) }
func (j *jobLog) Error(msg string, args ...any) { j.log(slog.LevelError, msg, args) }
