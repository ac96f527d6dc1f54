package cli

import (
	"context"
	"errors"
	"testing"
)

func envOf(vars map[string]string) Env {
	return Env{Getenv: func(name string) string { return vars[name] }}
}

func TestTracingIsOffWithoutAnOTLPEndpoint(t *testing.T) {
	t.Parallel()
	for _, vars := range []map[string]string{
		{},
		{"OTEL_SERVICE_NAME": "billing", "OTEL_EXPORTER_OTLP_HEADERS": "x=y"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
	} {
		tp, err := setupTracing(context.Background(), envOf(vars))
		if tp != nil || err != nil {
			t.Errorf("%v: setupTracing = %v, %v; want off", vars, tp, err)
		}
	}
}

func TestTracingExportsWhenAnOTLPEndpointIsSet(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		tp, err := setupTracing(context.Background(), envOf(map[string]string{name: "http://127.0.0.1:4318"}))
		if err != nil || tp == nil {
			t.Fatalf("%s set: setupTracing = %v, %v; want a provider", name, tp, err)
		}
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown with nothing to flush: %v", err)
		}
	}
}

func TestTracingRefusesGRPC(t *testing.T) {
	t.Parallel()
	_, err := setupTracing(context.Background(), envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
	}))
	if !errors.Is(err, errUsage) {
		t.Fatalf("setupTracing with OTLP over gRPC = %v, want a usage error", err)
	}
	tp, err := setupTracing(context.Background(), envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
	}))
	if err != nil {
		t.Fatalf("the traces protocol overrides the general one: %v", err)
	}
	_ = tp.Shutdown(context.Background())
}
