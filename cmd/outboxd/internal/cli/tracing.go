package cli

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// defaultServiceName names outboxd's spans when OTEL_SERVICE_NAME is unset.
const defaultServiceName = "outboxd"

// tracingHelp is the part of `outboxd run --help` about tracing.
const tracingHelp = `
Tracing (OpenTelemetry) is off unless OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; spans then go over OTLP/HTTP
(protobuf), configured by the standard OTEL_EXPORTER_OTLP_* variables
(headers, timeout, TLS), sampled by OTEL_TRACES_SAMPLER, and named by
OTEL_SERVICE_NAME (default outboxd) and OTEL_RESOURCE_ATTRIBUTES.
OTEL_SDK_DISABLED=true turns it off.`

// setupTracing returns the TracerProvider outboxd exports spans with (its
// Shutdown flushes and stops it), or nil when tracing is off: neither OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set, or OTEL_SDK_DISABLED is true. The exporter and the SDK read the
// rest of the standard variables themselves (from the process environment).
func setupTracing(ctx context.Context, env Env) (*sdktrace.TracerProvider, error) {
	if env.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && env.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	if strings.EqualFold(strings.TrimSpace(env.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := env.Getenv(name); p != "" && p != "http/protobuf" {
			return nil, usageErrorf("%s=%s is not supported: outboxd exports traces over OTLP/HTTP (http/protobuf)", name, p)
		}
		if env.Getenv(name) != "" {
			break // the traces-specific one wins
		}
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	service := env.Getenv("OTEL_SERVICE_NAME")
	if service == "" {
		service = defaultServiceName
	}
	// Default holds the SDK's attributes and OTEL_RESOURCE_ATTRIBUTES; the
	// service name is ours unless OTEL_SERVICE_NAME says otherwise.
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)), nil
}
