package worker

import (
	"context"
	"log/slog"
	"slices"
)

// jobLog logs for one message with its attributes (message id, key, ...).
// Unlike slog.Logger.With, which formats the attributes at once, it adds
// them only to what is logged: most messages log nothing at the default
// level, and formatting attributes for every one costs CPU at high rates.
type jobLog struct {
	l     *slog.Logger
	attrs []any
}

func newJobLog(l *slog.Logger, args ...any) *jobLog {
	return &jobLog{l: l, attrs: args}
}

// With returns a jobLog with args added to the attributes.
func (j *jobLog) With(args ...any) *jobLog {
	return &jobLog{l: j.l, attrs: append(slices.Clip(j.attrs), args...)}
}

func (j *jobLog) log(level slog.Level, msg string, args []any) {
	ctx := context.Background()
	if !j.l.Enabled(ctx, level) {
		return
	}
	j.l.Log(ctx, level, msg, append(slices.Clip(j.attrs), args...)...)
}

func (j *jobLog) Debug(msg string, args ...any) { j.log(slog.LevelDebug, msg, args) }
func (j *jobLog) Info(msg string, args ...any)  { j.log(slog.LevelInfo, msg, args) }
func (j *jobLog) Warn(msg string, args ...any)  { j.log(slog.LevelWarn, msg, args) }
func (j *jobLog) Error(msg string, args ...any) { j.log(slog.LevelError, msg, args) }
