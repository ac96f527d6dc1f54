package dispatcher

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/tracing"
	"github.com/outboxkit/outbox/providers"
)

// The attempt span's attributes (Config.TracerProvider). Nothing that
// identifies a customer or could authenticate is recorded: no payload, no
// idempotency key, no provider reference.
const (
	attrIntentID = attribute.Key("outbox.intent.id")
	attrKind     = attribute.Key("outbox.intent.kind")
	attrProvider = attribute.Key("outbox.provider")
	attrAttempt  = attribute.Key("outbox.attempt")
	attrOutcome  = attribute.Key("outbox.outcome")
	attrState    = attribute.Key("outbox.intent.state")
	attrStatus   = attribute.Key("http.response.status_code")

	// outcomeClaimLost is the outcome of an attempt that never called the
	// provider: the intent moved between its load and its claim.
	outcomeClaimLost = "claim_lost"
)

// startAttempt starts the span of one attempt at row, a child of ctx's span
// (River's work span, with otelriver) linked to the span the intent was
// recorded under, when it was.
func (d *Dispatcher) startAttempt(ctx context.Context, row intentstore.Row, provider string) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrIntentID.Int64(row.ID), attrKind.String(row.Kind), attrProvider.String(provider)),
	}
	if sc := tracing.SpanContext(row.TraceParent, row.TraceState); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return d.tracer.Start(ctx, "outbox.dispatch "+row.Kind, opts...)
}

// endAttempt records a decided attempt's outcome on its span.
func endAttempt(span trace.Span, dec decision) {
	span.SetAttributes(attrState.String(string(dec.To)))
	o := dec.Outcome
	if o == nil {
		return
	}
	span.SetAttributes(attrOutcome.String(o.Outcome))
	if o.HTTPStatus != 0 {
		span.SetAttributes(attrStatus.Int(o.HTTPStatus))
	}
	if o.Outcome != string(providers.OutcomeSucceeded) && o.Error != "" {
		// The error as the attempt's row records it: classified, with the
		// provider's secrets already kept out.
		spanError(span, o.Error)
	}
}

func spanError(span trace.Span, msg string) {
	span.RecordError(errors.New(msg))
	span.SetStatus(codes.Error, msg)
}
