package cli_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
)

// TestRunExportsTracesOverOTLP: with OTEL_EXPORTER_OTLP_ENDPOINT set,
// outboxd run exports the attempt's span, linked to the trace the intent
// was recorded under, and flushes it when it stops. Not parallel: the
// exporter reads the process environment.
func TestRunExportsTracesOverOTLP(t *testing.T) {
	var mu sync.Mutex
	var exported []byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			exported = append(exported, body...)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "outboxd-test")

	rd := startRunWith(t, secretStripeKey, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_SERVICE_NAME": "outboxd-test"},
		append(fastRunFlags, "--admin-addr", "")...)
	client, err := intents.NewClient(rd.pool, &intents.Config{Providers: fixture.Registry(t)})
	if err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"})
	if _, err := client.Consume(ctx, intents.Message{Consumer: "billing", ID: "traced"}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		return rec.Record(intents.Intent{Kind: "sendgrid.email", Payload: json.RawMessage(emailPayload)})
	}); err != nil {
		t.Fatal(err)
	}
	rd.waitForStates(t, 1, func(state string) bool { return state == "succeeded" })
	if code, _ := rd.stop(t); code != 0 {
		t.Fatalf("run returned %d\n%s", code, rd.stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	id, _ := hex.DecodeString(traceID)
	for _, want := range [][]byte{[]byte("outbox.dispatch sendgrid.email"), []byte("outboxd-test"), id} {
		if !bytes.Contains(exported, want) {
			t.Fatalf("the collector received %d bytes without %q\nstderr:\n%s", len(exported), want, rd.stderr.String())
		}
	}
}
