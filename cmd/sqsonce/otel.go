package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is configured by OpenTelemetry's standard variables alone:
//
//   - OTEL_TRACES_EXPORTER: "otlp" turns it on, "none" (or nothing, below)
//     leaves it off; no other exporter is built in.
//   - Unset, tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL:
//     only "http/protobuf".
//   - OTEL_SERVICE_NAME (default "sqsonce") and OTEL_RESOURCE_ATTRIBUTES
//     describe the process.
//
// The exporter reads the rest of OTEL_EXPORTER_OTLP_* (endpoint, headers,
// timeout, TLS) and the SDK reads OTEL_TRACES_SAMPLER and OTEL_BSP_*
// themselves, from the process's environment.

// The tracing variables this command reads itself.
const (
	envTracesExporter  = "OTEL_TRACES_EXPORTER"
	envEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol  = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envServiceName     = "OTEL_SERVICE_NAME"
	defaultServiceName = "sqsonce"
	// tracingFlushTimeout bounds the export of the last spans at the end.
	tracingFlushTimeout = 5 * time.Second
)

// tracingVars are the variables `--help` lists for tracing.
var tracingVars = []string{envTracesExporter, envEndpoint, envTracesEndpoint, envProtocol, envTracesProtocol, envServiceName, "OTEL_RESOURCE_ATTRIBUTES"}

// tracingOn reports whether the variables turn tracing on, or what is
// wrong with them, naming the variable, as an ErrInvalidConfig.
func tracingOn(lookupEnv func(string) (string, bool)) (bool, error) {
	get := func(name string) string { v, _ := lookupEnv(name); return v }
	on := false
	switch exp := get(envTracesExporter); exp {
	case "otlp":
		on = true
	case "none":
	case "":
		on = get(envEndpoint) != "" || get(envTracesEndpoint) != ""
	default:
		return false, fmt.Errorf("%s=%q: supported: otlp (OTLP over HTTP) or none: %w", envTracesExporter, exp, ErrInvalidConfig)
	}
	if !on {
		return false, nil
	}
	for _, name := range []string{envTracesProtocol, envProtocol} {
		if p := get(name); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%s=%q: supported: http/protobuf: %w", name, p, ErrInvalidConfig)
			}
			break
		}
	}
	return true, nil
}

// newTracing returns the tracer provider the variables configure, nil when
// tracing is off, and a flush that exports the spans still buffered (for
// at most tracingFlushTimeout) and stops it; flush may be called more than
// once. Export errors are logged.
func (m *Main) newTracing(ctx context.Context, log *slog.Logger) (trace.TracerProvider, func(), error) {
	on, err := tracingOn(m.LookupEnv)
	if err != nil || !on {
		return nil, func() {}, err
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: exporting spans failed", "error", err)
	}))
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	name := defaultServiceName
	if v, ok := m.LookupEnv(envServiceName); ok && v != "" {
		name = v
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", name), attribute.String("service.version", version)),
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES, and OTEL_SERVICE_NAME again
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		log.Warn("tracing: the resource is incomplete", "error", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	var once sync.Once
	flush := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
			defer cancel()
			if err := tp.Shutdown(ctx); err != nil {
				log.Warn("tracing: flushing the last spans failed", "error", err)
			}
		})
	}
	return tp, flush, nil
}

// tracerName names the command's own tracer (its producer spans).
const tracerName = "github.com/sqsonce/sqsonce/cmd/sqsonce"
