package main

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/worker"
)

// [flow]: what the file refuses, each problem under its key and in the
// file's words, and what it accepts.
func TestFlowConfig_Validate(t *testing.T) {
	t.Parallel()
	shared := func(c *Config) { c.Ledger.Backend = BackendPostgres }
	rejects := []struct {
		name   string
		mutate func(c *Config)
		key    string
		want   string
	}{
		{"mode unknown", func(c *Config) { c.Flow.Mode = "paused" }, "flow.mode", `must be on, observe or off, got "paused"`},
		{"mode empty", func(c *Config) { c.Flow.Mode = "" }, "flow.mode", `must be one of on, observe, off, got ""`},
		{"scope long", func(c *Config) { c.Flow.Scope = strings.Repeat("s", 161) }, "flow.scope", "must be at most 160 bytes, got 161"},
		{"scope newline", func(c *Config) { c.Flow.Scope = "orders\npartner" }, "flow.scope", "must not contain control characters"},
		{"scope blank", func(c *Config) { c.Flow.Scope = "  " }, "flow.scope", `must name the scope, got "  "`},
		{"scope invalid utf-8", func(c *Config) { c.Flow.Scope = "a\xffb" }, "flow.scope", "valid UTF-8"},
		{"pause_on unknown", func(c *Config) { c.Flow.PauseOn = []string{"unavailable", "permanent"} }, "flow.pause_on", `must list only unavailable and retry, got "permanent"`},
		{"pause_on without unavailable", func(c *Config) { c.Flow.PauseOn = []string{"retry"} }, "flow.pause_on", `must list "unavailable", the failures that say the downstream is down (they always count; flow.pause = false pauses on none), got ["retry"]`},
		{"pause_on empty", func(c *Config) { c.Flow.PauseOn = []string{} }, "flow.pause_on", `must list "unavailable"`},
		{"trip_failures zero", func(c *Config) { c.Flow.TripFailures = 0 }, "flow.trip_failures", "must be between 1 and 100000, got 0"},
		{"trip_window zero", func(c *Config) { c.Flow.TripWindow = Duration{} }, "flow.trip_window", "must be between 1s and 1h, got 0s"},
		{"trip_window long", func(c *Config) { c.Flow.TripWindow = Duration{2 * time.Hour} }, "flow.trip_window", "must be between 1s and 1h, got 2h"},
		{"trip_keys above trip_failures", func(c *Config) { c.Flow.TripFailures, c.Flow.TripKeys = 5, 6 }, "flow.trip_keys", "must be between 1 and flow.trip_failures (5), got 6"},
		{"trip_ratio zero", func(c *Config) { c.Flow.TripRatio = 0 }, "flow.trip_ratio", "must be greater than 0 and at most 1, got 0"},
		{"trip_ratio over one", func(c *Config) { c.Flow.TripRatio = 1.5 }, "flow.trip_ratio", "got 1.5"},
		{"probe_max zero", func(c *Config) { c.Flow.ProbeMax = Duration{} }, "flow.probe_max", "must be between 1s and 1h, got 0s"},
		{"rate negative", func(c *Config) { c.Flow.Rate = -1 }, "flow.rate", "must be 0 (no rate) or between one a day (1/86400) and 1e+06 per second, got -1"},
		{"rate below one a day", func(c *Config) { c.Flow.Rate = 1e-5 }, "flow.rate", "must be 0 (no rate) or between one a day (1/86400) and 1e+06 per second, got 1e-05"},
		{"burst longer than a bucket is kept", func(c *Config) { c.Flow.Rate, c.Flow.Burst = 2e-5, 10000 }, "flow.burst",
			"at 2e-05 per second spans more than 87600h0m0s, the longest a rate bucket is kept, got 10000"},
		{"burst zero", func(c *Config) { c.Flow.Burst = 0 }, "flow.burst", "must be between 1 and 10000, got 0"},
		{"concurrency on bbolt", func(c *Config) { c.Flow.Concurrency = 4 }, "flow.concurrency",
			`handler.concurrency already bounds one process; flow.concurrency needs a shared ledger (ledger.backend = "postgres" or "dynamodb"), got 4 on "bbolt"`},
		{"concurrency negative", func(c *Config) { shared(c); c.Flow.Concurrency = -1 }, "flow.concurrency", "must be between 0 (no bound) and 10000, got -1"},
		{"partition without a part", func(c *Config) { c.Flow.Partition = []FlowPartition{{Rate: 5}} }, "flow.partition",
			"#1: pointer or attribute, exactly one of them, must name the part of the message"},
		{"partition with both", func(c *Config) {
			c.Flow.Partition = []FlowPartition{{Pointer: "/tenant", Attribute: "Tenant", Rate: 5}}
		}, "flow.partition",
			"#1 (pointer /tenant): pointer or attribute, exactly one of them"},
		{"partition pointer relative", func(c *Config) {
			c.Flow.Partition = []FlowPartition{{Pointer: "/tenant", Rate: 5}, {Pointer: "tenant", Rate: 5}}
		}, "flow.partition", `#2 (pointer tenant): pointer: must be an RFC 6901 pointer`},
		{"partition without a limit", func(c *Config) { c.Flow.Partition = []FlowPartition{{Attribute: "Tenant"}} }, "flow.partition",
			"#1 (attribute Tenant): rate or concurrency must be set: a partition without a limit limits nothing, got 0"},
		{"partition burst over", func(c *Config) { c.Flow.Partition = []FlowPartition{{Pointer: "/t", Rate: 1, Burst: 10001}} }, "flow.partition",
			"#1 (pointer /t): burst: must be between 1 and 10000, got 10001"},
		{"partition pointer long", func(c *Config) { c.Flow.Partition = []FlowPartition{{Pointer: "/" + strings.Repeat("p", 80), Rate: 1}} }, "flow.partition",
			"#1: a pointer or attribute of 81 bytes, over 80"},
	}
	for _, tc := range rejects {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tc.mutate(&c)
			err := c.Validate()
			var keys []string
			for _, p := range problems(err) {
				key, _, _ := strings.Cut(p.Error(), ": ")
				keys = append(keys, key)
				if !errors.Is(p, ErrInvalidConfig) {
					t.Errorf("problem %q does not wrap ErrInvalidConfig", p)
				}
				if key == tc.key && !strings.Contains(p.Error(), tc.want) {
					t.Errorf("problem %q does not contain %q", p, tc.want)
				}
			}
			if !slices.Equal(keys, []string{tc.key}) {
				t.Errorf("problems name keys %q, want only %s: %v", keys, tc.key, err)
			}
		})
	}

	accepts := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"observe", func(c *Config) { c.Flow.Mode = "observe" }},
		{"off", func(c *Config) { c.Flow.Mode = "off" }},
		{"no pause", func(c *Config) { c.Flow.Pause = false }},
		{"pause on retries too", func(c *Config) { c.Flow.PauseOn = []string{"unavailable", "retry"} }},
		{"scope of one's own", func(c *Config) { c.Flow.Scope = "partner-api" }},
		{"longest scope", func(c *Config) { c.Flow.Scope = strings.Repeat("é", 80) }},
		{"a rate", func(c *Config) { c.Flow.Rate, c.Flow.Burst = 0.5, 3 }},
		{"one trip", func(c *Config) { c.Flow.TripFailures, c.Flow.TripKeys, c.Flow.TripRatio = 1, 1, 1 }},
		{"concurrency on a shared ledger", func(c *Config) { shared(c); c.Flow.Concurrency = 8 }},
		{"concurrency on dynamodb", func(c *Config) { c.Ledger.Backend = BackendDynamoDB; c.Flow.Concurrency = 8 }},
		{"partitions on bbolt, burst left out", func(c *Config) {
			c.Flow.Partition = []FlowPartition{{Pointer: "/tenant", Rate: 5}, {Attribute: "Account", Concurrency: 2}}
		}},
	}
	for _, tc := range accepts {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tc.mutate(&c)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate() = %v", err)
			}
		})
	}
}

// [flow] from the file and from the environment.
func TestFlowConfig_Load(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `[queue]
url = "`+testQueueURL+`"

[flow]
rate = 50

[[flow.partition]]
pointer = "/tenant"
rate = 5
`)
	c, err := LoadConfig(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Flow.Rate != 50 || len(c.Flow.Partition) != 1 || c.Flow.Partition[0] != (FlowPartition{Pointer: "/tenant", Rate: 5}) {
		t.Errorf("flow %+v", c.Flow)
	}
	if w := workerConfig(c, nil); w.Flow.Partitions[0].Burst != 0 || w.Validate() != nil {
		t.Errorf("a partition's burst left out: %+v, %v", w.Flow.Partitions, w.Validate())
	}

	_, err = LoadConfig(path, env(map[string]string{"SQSONCE_FLOW_RATE": "fast"}))
	if err == nil || !strings.Contains(err.Error(), `SQSONCE_FLOW_RATE (flow.rate): want a number, got "fast"`) {
		t.Errorf("a rate that is not a number: %v", err)
	}
	_, err = LoadConfig(path, env(map[string]string{"SQSONCE_FLOW_PARTITION": `[{"pointer": "/tenant", "rates": 5}]`}))
	if err == nil || !strings.Contains(err.Error(), `unknown field "rates"`) {
		t.Errorf("a partition with an unknown key: %v", err)
	}
	_, err = LoadConfig(writeConfig(t, "[flow]\nrate = 5\n[[flow.partition]]\npointr = \"/t\"\n"), env(map[string]string{"SQSONCE_QUEUE_URL": testQueueURL}))
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), "flow.partition.pointr: unknown key (did you mean flow.partition.pointer?)") {
		t.Errorf("a misspelt partition key: %v", err)
	}
}

// The default scope is the queue's name and the handler's target, the same
// for every command, and the worker gets [flow] as the file says it.
func TestFlowScope(t *testing.T) {
	t.Parallel()
	http := func(u string) func(c *Config) {
		return func(c *Config) { c.Handler.Type, c.Handler.URL = HandlerHTTP, u }
	}
	long := "https://partner.example/" + strings.Repeat("a", 200)
	for _, tc := range []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"exec", func(c *Config) { c.Handler.Command = []string{"/usr/local/bin/handle", "--fast"} }, "orders /usr/local/bin/handle"},
		{"http", http("https://partner.example/api/v1"), "orders https://partner.example/api/v1"},
		{"http without query, fragment or password", http("https://user:secret@partner.example/api?token=s3cret#x"), "orders https://partner.example/api"},
		{"explicit", func(c *Config) { c.Flow.Scope = "partner" }, "partner"},
		{"fifo queue", func(c *Config) { c.Queue.URL = "https://sqs.us-east-1.amazonaws.com/1/orders.fifo" }, "orders.fifo /usr/local/bin/handle-event"},
	} {
		c := validConfig()
		tc.mutate(&c)
		if got := flowScope(c); got != tc.want {
			t.Errorf("%s: flowScope = %q, want %q", tc.name, got, tc.want)
		}
		if got := workerConfig(c, nil).Flow.Scope; got != tc.want {
			t.Errorf("%s: the worker's scope = %q, want %q", tc.name, got, tc.want)
		}
	}

	// A long target is cut to the bound and stays apart from another one.
	a, b := validConfig(), validConfig()
	http(long + "x")(&a)
	http(long + "y")(&b)
	sa, sb := flowScope(a), flowScope(b)
	if len(sa) > maxScopeLen || len(sb) > maxScopeLen || sa == sb || !strings.HasPrefix(sa, "orders https://partner.example/aaa") {
		t.Errorf("long targets: %q (%d bytes), %q", sa, len(sa), sb)
	}
	if err := checkScope(sa); err != nil {
		t.Errorf("the default scope is not one the file would take: %v", err)
	}

	c := validConfig()
	c.Flow = FlowConfig{Mode: "observe", Pause: false, PauseOn: []string{"unavailable", "retry"}, TripFailures: 4, TripWindow: Duration{time.Minute},
		TripKeys: 2, TripRatio: 0.5, ProbeMax: Duration{time.Minute}, Rate: 40, Burst: 2,
		Partition: []FlowPartition{{Attribute: "Tenant", Rate: 5, Burst: 1, Concurrency: 2}}}
	got := workerConfig(c, nil).Flow
	want := worker.FlowConfig{Mode: worker.FlowObserve, Scope: "orders /usr/local/bin/handle-event", NoPause: true,
		PauseOn: []worker.FailureClass{worker.FailureUnavailable, worker.FailureRetry},
		Trip:    worker.Trip{Failures: 4, Window: time.Minute, Keys: 2, Ratio: 0.5}, ProbeMax: time.Minute, Rate: 40, Burst: 2,
		Partitions: []worker.FlowPartition{{Attribute: "Tenant", Rate: 5, Burst: 1, Concurrency: 2}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("worker flow %+v, want %+v", got, want)
	}
	if v := workerConfig(c, nil).Version; v != version {
		t.Errorf("worker version %q, want the build's %q", v, version)
	}
}
