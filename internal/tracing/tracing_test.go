package tracing

import (
	"context"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := Extract(context.Background(), " "+parent, "a=1,b=2")
	p, s := Inject(ctx)
	if p != parent || s != "a=1,b=2" {
		t.Fatalf("Inject(Extract) = %q %q", p, s)
	}
	if sc := SpanContext(p, s); !sc.IsValid() || !sc.IsSampled() || sc.TraceState().Get("b") != "2" {
		t.Fatalf("SpanContext = %+v", sc)
	}
	// An unsampled context is kept as it is.
	if p, _ := Inject(Extract(context.Background(), parent[:53]+"00", "")); p != parent[:53]+"00" {
		t.Fatalf("unsampled traceparent stored as %q", p)
	}
}

func TestNothingOrMalformedIsNothing(t *testing.T) {
	for _, parent := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"} {
		if p, s := Inject(Extract(context.Background(), parent, "a=1")); p != "" || s != "" {
			t.Errorf("%q: Inject = %q %q, want nothing", parent, p, s)
		}
		if SpanContext(parent, "").IsValid() {
			t.Errorf("%q: SpanContext is valid", parent)
		}
	}
	if _, span := Tracer(nil).Start(context.Background(), "x"); span.IsRecording() {
		t.Fatal("the nil provider's tracer records")
	}
}
