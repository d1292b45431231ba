// Command sqsonce consumes an Amazon SQS queue and runs each operation once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// defaultGOGC is the garbage collector's setting unless GOGC is set. The
// worker's live heap is small (a few MB: messages in hand and their
// bookkeeping) while it allocates per message, so Go's default (100)
// collects many times a second; 400 spends about 13% less CPU per message
// for about 12 MB more memory at full load.
const defaultGOGC = 400

func main() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGOGC)
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	m := &Main{
		Stdin:     os.Stdin,
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		LookupEnv: os.LookupEnv,
		Signals:   signals,
	}
	os.Exit(m.Run(context.Background(), os.Args[1:]))
}

// Main is the program with its surroundings made explicit, so that tests
// drive the same code as the binary.
type Main struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	LookupEnv      func(string) (string, bool)
	// Signals delivers SIGTERM and SIGINT: the first stops the worker
	// gracefully, the second cuts the grace short.
	Signals <-chan os.Signal
}

// errUsage marks errors that exit with status 2: bad flags, arguments or
// input. Make them with usageErrorf, whose text does not mention it.
var errUsage = errors.New("usage")

// usageError is an error that exits with status 2 (errors.Is(err,
// errUsage)); its text is its own alone.
type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == errUsage }

// usageErrorf formats an error as fmt.Errorf does and marks it as a usage
// error (exit status 2).
func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

const usage = `sqsonce consumes an Amazon SQS queue and runs each operation once.

Usage:
  sqsonce <command> [flags]

Commands:
  run       consume the queue until SIGTERM or SIGINT
  ingest    receive webhooks, verify them and send them to the queue
  send      send lines of JSON to the queue, one message each
  replay    move messages from the dead-letter queue back to the queue
  console   serve the web console of the ledger and the dead-letter queue (read-only by default)
  check     check configuration, credentials, queues, ledger and handler before deploying
  ledger    inspect and manage the ledger: get, list, stats, forget, export, compact
  flow      pause and resume the intake by hand, and show the pauses and the workers: status, pause, resume
  health    ask a running worker (or receiver) whether it is alive (for container health checks)
  version   print the version

Run 'sqsonce <command> --help' for a command's flags.
`

// Run runs one command and returns the process exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "send", "check", "health", "flow":
		// Commands without a stop of their own end at the first signal.
		var stop func()
		ctx, stop = m.stopOnSignal(ctx)
		defer stop()
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		err = m.runCommand(ctx, rest)
	case "ingest":
		err = m.ingestCommand(ctx, rest)
	case "send":
		err = m.sendCommand(ctx, rest)
	case "ledger":
		err = m.ledgerCommand(ctx, rest)
	case "flow":
		err = m.flowCommand(ctx, rest)
	case "check":
		err = m.checkCommand(ctx, rest)
	case "console":
		err = m.consoleCommand(ctx, rest)
	case "replay":
		err = m.replayCommand(ctx, rest)
	case "health":
		err = m.healthCommand(ctx, rest)
	case "version":
		fmt.Fprintf(m.Stdout, "sqsonce %s (%s)\n", version, runtime.Version())
	case "help", "-h", "-help", "--help":
		fmt.Fprint(m.Stdout, usage)
	default:
		fmt.Fprintf(m.Stderr, "sqsonce: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage), errors.Is(err, ErrInvalidConfig):
		fmt.Fprintf(m.Stderr, "sqsonce %s: %v\n", args[0], err)
		return exitUsage
	}
	fmt.Fprintf(m.Stderr, "sqsonce %s: %v\n", args[0], err)
	return exitFailure
}

// stopOnSignal returns ctx ended by the first SIGTERM or SIGINT, with the
// signal as its cause, and a function that stops watching for it.
func (m *Main) stopOnSignal(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		select {
		case sig := <-m.Signals:
			cancel(fmt.Errorf("stopped by a signal (%v)", sig))
		case <-done:
		}
	})
	return ctx, func() {
		close(done)
		watch.Wait()
		cancel(nil)
	}
}

// commonFlags are the flags every command that reads the configuration has.
type commonFlags struct {
	config    string
	logFormat string
	logLevel  string
	// keys maps a command's own flags that set a configuration key to that
	// key ("listen": "console.listen"): a flag that is given wins over the
	// key's environment variable and the file, and is validated with them.
	keys map[string]string
}

// keyFlag defines a string flag of fs that sets the configuration key, as
// commonFlags.keys says.
func (c *commonFlags) keyFlag(fs *flag.FlagSet, name, key, usage string) {
	if c.keys == nil {
		c.keys = map[string]string{}
	}
	c.keys[name] = key
	fs.String(name, "", usage+" ("+key+"; wins over "+keyEnv(key)+" and the file)")
}

func (m *Main) flagSet(name, synopsis string, c *commonFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.StringVar(&c.config, "config", "", "configuration file (default: $SQSONCE_CONFIG; without either, the environment alone)")
	fs.StringVar(&c.logFormat, "log-format", "auto", "log format: text, json, or auto (text on a terminal, JSON otherwise)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nEvery configuration key can be set by an environment variable:\n")
		for _, v := range EnvVars() {
			fmt.Fprintf(fs.Output(), "  %s\n", v)
		}
		if name == "run" || name == "ingest" || name == "send" {
			fmt.Fprintf(fs.Output(), "\nTracing (OpenTelemetry, OTLP over HTTP) is on when OTEL_TRACES_EXPORTER=otlp, or when it is\nunset and an OTLP endpoint is; the SDK reads its other OTEL_* variables itself:\n")
			for _, v := range tracingVars {
				fmt.Fprintf(fs.Output(), "  %s\n", v)
			}
		}
	}
	return fs
}

// parse parses flags and loads the configuration.
func (m *Main) parse(fs *flag.FlagSet, c *commonFlags, args []string) (Config, *slog.Logger, error) {
	// Flags may come after arguments too (sqsonce ledger get KEY --json):
	// parse around each argument, then leave the arguments in fs.Args().
	var positional []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return Config{}, nil, err
			}
			return Config{}, nil, usageErrorf("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	fs.Parse(append([]string{"--"}, positional...))
	logger, err := newLogger(m.Stderr, c.logFormat, c.logLevel, m.LookupEnv)
	if err != nil {
		return Config{}, nil, err
	}
	path := c.config
	if path == "" {
		path, _ = m.LookupEnv("SQSONCE_CONFIG")
	}
	// The keys set by flags, read as their variables are.
	lookupEnv := m.LookupEnv
	if len(c.keys) > 0 {
		set := map[string]string{}
		fs.Visit(func(f *flag.Flag) {
			if key, ok := c.keys[f.Name]; ok {
				set[keyEnv(key)] = f.Value.String()
			}
		})
		lookupEnv = func(name string) (string, bool) {
			if v, ok := set[name]; ok {
				return v, true
			}
			return m.LookupEnv(name)
		}
	}
	cfg, err := LoadConfig(path, lookupEnv)
	if err != nil {
		return Config{}, nil, err
	}
	return cfg, logger, nil
}

// newLogger makes the process's logger: text on a terminal, JSON otherwise,
// unless the format is given; without timestamps under systemd's journal.
func newLogger(w io.Writer, format, level string, lookupEnv func(string) (string, bool)) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", level)
	}
	// Under systemd the journal stamps each line itself.
	journal := false
	if v, ok := lookupEnv("JOURNAL_STREAM"); ok && v != "" {
		journal = true
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if journal && len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return readableAttr(a)
	}}
	if format == "auto" {
		format = "json"
		if isTerminal(w) {
			format = "text"
		}
	}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErrorf("--log-format %q: want text, json or auto", format)
}

// readableAttr writes a value as a log pipeline reads it best, under the
// same key, in text and JSON alike: a duration as text ("5s", "1m30s"),
// not a number of nanoseconds, and a value of an integer type with a
// String method (a state such as ledger.State: "in_progress") by its name,
// not its number.
func readableAttr(a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(a.Value.Duration().String())
	case slog.KindAny:
		if s, ok := a.Value.Any().(fmt.Stringer); ok {
			switch reflect.ValueOf(s).Kind() {
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				a.Value = slog.StringValue(s.String())
			}
		}
	}
	return a
}
