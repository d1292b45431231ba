// Package w3ctrace reads and writes trace contexts as they travel with
// messages: the W3C Trace Context traceparent and tracestate
// (https://www.w3.org/TR/trace-context/) and the AWSTraceHeader that X-Ray
// and Lambda put on SQS messages.
package w3ctrace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// The names under which a trace context travels: the message attributes
// and HTTP headers of W3C Trace Context, the SQS system attribute of X-Ray.
const (
	TraceParent    = "traceparent"
	TraceState     = "tracestate"
	AWSTraceHeader = "AWSTraceHeader"
)

// Errors of Parse and FromAWSTraceHeader.
var (
	// ErrTraceParent: the value is not a traceparent of a version this
	// package reads.
	ErrTraceParent = errors.New("invalid traceparent")
	// ErrAWSTraceHeader: the value has no valid Root and Parent.
	ErrAWSTraceHeader = errors.New("invalid AWSTraceHeader")
)

// Parse reads a traceparent: version 00 exactly, and a later version by
// its first four fields, as the recommendation asks; version ff, upper-case
// hex and all-zero ids are refused. The context is remote, and of the flags
// it keeps only sampled. What a later version puts after the flags is
// neither read nor checked: pass on Format of the context, never the
// text parsed.
func Parse(traceparent string) (trace.SpanContext, error) {
	s := traceparent
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, ErrTraceParent
	}
	var version [1]byte
	if !lowerHex(version[:], s[0:2]) || version[0] == 0xff {
		return trace.SpanContext{}, ErrTraceParent
	}
	if version[0] == 0 && len(s) != 55 || version[0] != 0 && len(s) > 55 && s[55] != '-' {
		return trace.SpanContext{}, ErrTraceParent
	}
	var cfg trace.SpanContextConfig
	var flags [1]byte
	if !lowerHex(cfg.TraceID[:], s[3:35]) || !lowerHex(cfg.SpanID[:], s[36:52]) || !lowerHex(flags[:], s[53:55]) {
		return trace.SpanContext{}, ErrTraceParent
	}
	cfg.TraceFlags = trace.TraceFlags(flags[0]) & trace.FlagsSampled
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	if !sc.IsValid() {
		return trace.SpanContext{}, ErrTraceParent
	}
	return sc, nil
}

// FromAWSTraceHeader converts an AWSTraceHeader
// (Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1)
// to a remote span context: the trace id is Root's time and random parts
// together, the span id is Parent, and the context is sampled when Sampled
// is 1 (not when it is 0, ? or absent). Other fields are ignored.
func FromAWSTraceHeader(h string) (trace.SpanContext, error) {
	var cfg trace.SpanContextConfig
	var root, parent bool
	for field := range strings.SplitSeq(h, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(field), "=")
		switch k {
		case "Root":
			// 1-<8 hex: epoch seconds>-<24 hex>
			if len(v) != 35 || v[0] != '1' || v[1] != '-' || v[10] != '-' ||
				!anyHex(cfg.TraceID[:4], v[2:10]) || !anyHex(cfg.TraceID[4:], v[11:]) {
				return trace.SpanContext{}, ErrAWSTraceHeader
			}
			root = true
		case "Parent":
			if len(v) != 16 || !anyHex(cfg.SpanID[:], v) {
				return trace.SpanContext{}, ErrAWSTraceHeader
			}
			parent = true
		case "Sampled":
			if v == "1" {
				cfg.TraceFlags = trace.FlagsSampled
			}
		}
	}
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	if !root || !parent || !sc.IsValid() {
		return trace.SpanContext{}, ErrAWSTraceHeader
	}
	return sc, nil
}

// FormattedLen is the length of a traceparent that Format writes.
const FormattedLen = 55

// Format writes sc as a version 00 traceparent; "" when sc is not valid.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [FormattedLen]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// New returns a fresh, valid span context with random ids and the given
// flags, for a message whose sender records no span: the trace id ties
// together what happens to the message downstream.
func New(flags trace.TraceFlags) trace.SpanContext {
	var cfg trace.SpanContextConfig
	for !cfg.TraceID.IsValid() || !cfg.SpanID.IsValid() {
		rand.Read(cfg.TraceID[:])
		rand.Read(cfg.SpanID[:])
	}
	cfg.TraceFlags = flags
	return trace.NewSpanContext(cfg)
}

// lowerHex decodes s, lower-case hex digits only, into dst.
func lowerHex(dst []byte, s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return anyHex(dst, s)
}

// anyHex decodes s, hex digits of either case, into dst.
func anyHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
