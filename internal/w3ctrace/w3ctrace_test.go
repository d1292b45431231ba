package w3ctrace_test

import (
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sqsonce/sqsonce/internal/w3ctrace"
)

func TestParse(t *testing.T) {
	t.Parallel()
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	good := []struct {
		in      string
		sampled bool
	}{
		{"00-" + tid + "-" + sid + "-01", true},
		{"00-" + tid + "-" + sid + "-00", false},
		{"00-" + tid + "-" + sid + "-03", true}, // other flags dropped
		{"01-" + tid + "-" + sid + "-01-what-comes-later", true},
		{"cc-" + tid + "-" + sid + "-01", true},
	}
	for _, g := range good {
		sc, err := w3ctrace.Parse(g.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", g.in, err)
			continue
		}
		if sc.TraceID().String() != tid || sc.SpanID().String() != sid || sc.IsSampled() != g.sampled || !sc.IsRemote() {
			t.Errorf("Parse(%q) = %v %v sampled %v remote %v", g.in, sc.TraceID(), sc.SpanID(), sc.IsSampled(), sc.IsRemote())
		}
	}
	bad := []string{
		"",
		"00-" + tid + "-" + sid,
		"00-" + tid + "-" + sid + "-01-", // version 00 has nothing after the flags
		"01-" + tid + "-" + sid + "-01x", // a later version's next field starts with a dash
		"ff-" + tid + "-" + sid + "-01",  // version ff is invalid
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-" + sid + "-01", // upper case
		"00-00000000000000000000000000000000-" + sid + "-01",
		"00-" + tid + "-0000000000000000-01",
		"00-" + tid + "-" + sid + "-0g",
		"00_" + tid + "-" + sid + "-01",
		"0x-" + tid + "-" + sid + "-01",
	}
	for _, in := range bad {
		if sc, err := w3ctrace.Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, sc)
		}
	}
}

func TestFromAWSTraceHeader(t *testing.T) {
	t.Parallel()
	good := []struct {
		in, want string
	}{
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1", "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"},
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0", "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00"},
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00"},
		{"Sampled=?;Parent=53995C3F42CD8AD8;Root=1-5759E988-BD862E3FE1BE46A994272793;Lineage=a87bd80c:1", "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00"},
		{"Root=1-5759e988-bd862e3fe1be46a994272793; Parent=53995c3f42cd8ad8; Sampled=1", "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"},
	}
	for _, g := range good {
		sc, err := w3ctrace.FromAWSTraceHeader(g.in)
		if err != nil {
			t.Errorf("FromAWSTraceHeader(%q): %v", g.in, err)
			continue
		}
		if got := w3ctrace.Format(sc); got != g.want || !sc.IsRemote() {
			t.Errorf("FromAWSTraceHeader(%q) = %s (remote %v), want %s", g.in, got, sc.IsRemote(), g.want)
		}
	}
	bad := []string{
		"",
		"Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1", // no parent: no span to continue
		"Parent=53995c3f42cd8ad8;Sampled=1",
		"Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
		"Root=1-5759e988bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
		"Root=1-5759e988-bd862e3fe1be46a99427279;Parent=53995c3f42cd8ad8",
		"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad",
		"Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8",
		"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000",
		"Root=1-5759e988-bd862e3fe1be46a99427279z;Parent=53995c3f42cd8ad8",
	}
	for _, in := range bad {
		if sc, err := w3ctrace.FromAWSTraceHeader(in); err == nil {
			t.Errorf("FromAWSTraceHeader(%q) = %v, want an error", in, sc)
		}
	}
}

func TestFormatNew(t *testing.T) {
	t.Parallel()
	if got := w3ctrace.Format(trace.SpanContext{}); got != "" {
		t.Errorf("Format of an invalid context = %q, want empty", got)
	}
	a, b := w3ctrace.New(0), w3ctrace.New(trace.FlagsSampled)
	if !a.IsValid() || a.IsSampled() || !b.IsSampled() || a.TraceID() == b.TraceID() {
		t.Fatalf("New: %v %v", a, b)
	}
	s := w3ctrace.Format(a)
	back, err := w3ctrace.Parse(s)
	if err != nil || back.TraceID() != a.TraceID() || back.SpanID() != a.SpanID() || back.TraceFlags() != a.TraceFlags() {
		t.Fatalf("Parse(Format(%v)) = %v, %v", a, back, err)
	}
}
