// Package providertest is the conformance suite every provider adapter runs,
// against the adapter's own test double. It checks the contract the
// dispatcher relies on: validation names fields, redaction hides what it
// must, success carries a provider reference, and each fault is classified
// the way DESIGN.md's outcome table says for a provider with or without an
// idempotency key. For an adapter that reconciles it also checks the
// intent's identity at the provider (DESIGN.md, invariant 1): Perform
// carries the namespace and key in the request's metadata, and Reconcile
// never finds an object that carries the same key under another namespace.
package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
)

// Double is what the suite needs from a provider's test double.
type Double interface {
	// URL is the base URL the adapter should be pointed at.
	URL() string
	// Faults is the double's fault injector.
	Faults() *fault.Injector
	// EffectsFor counts the effects the double performed for an intent id
	// (read from the metadata the adapter sent).
	EffectsFor(intentID int64) int
}

// Harness describes one adapter under test.
type Harness struct {
	// NewDouble starts a fresh double; the suite closes nothing, so register
	// cleanup with t.Cleanup.
	NewDouble func(t *testing.T) Double
	// NewProvider returns the adapter pointed at baseURL with credentials
	// the double accepts.
	NewProvider func(t *testing.T, baseURL string) providers.Provider
	// Kind is the intent kind to exercise.
	Kind string
	// ValidPayload is a payload of Kind that the provider performs.
	ValidPayload json.RawMessage
	// InvalidPayloads maps payloads of Kind to the field their validation
	// error must name.
	InvalidPayloads map[string]string
	// RejectedPayload passes Validate but the provider refuses it for good
	// (a declined card, say). Optional.
	RejectedPayload json.RawMessage
	// SensitiveValues are strings in ValidPayload that Redact must hide.
	SensitiveValues []string
	// RecordedMetadata returns the metadata (Stripe metadata, SendGrid
	// custom_args) of every effect the double performed, in order.
	// Required when the provider can reconcile.
	RecordedMetadata func(d Double) []map[string]string
	// ProvesAbsence is true when the provider's Reconcile reads consistently
	// and so answers an unknown intent with found=false and a nil error;
	// otherwise it must answer with an error wrapping
	// providers.ErrAbsenceNotProven.
	ProvesAbsence bool
}

// Namespace is the deployment namespace of the suite's requests.
const Namespace = "conformance-ns"

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Helper()
	ctx := context.Background()
	probe := h.NewProvider(t, "http://127.0.0.1:1")
	caps := probe.Capabilities()

	t.Run("Declaration", func(t *testing.T) {
		if probe.Name() == "" {
			t.Fatal("Name() is empty")
		}
		if !contains(probe.Kinds(), h.Kind) {
			t.Fatalf("Kinds() = %v does not include %q", probe.Kinds(), h.Kind)
		}
		if caps.IdempotencyKeys && caps.KeyWindow <= 0 {
			t.Fatal("declares idempotency keys without a key window")
		}
		if _, err := providers.NewRegistry(probe); err != nil {
			t.Fatalf("NewRegistry: %v", err)
		}
	})

	t.Run("ValidateAcceptsValidPayload", func(t *testing.T) {
		if err := probe.Validate(h.Kind, h.ValidPayload); err != nil {
			t.Fatalf("Validate(valid payload) = %v", err)
		}
	})

	t.Run("ValidateNamesTheField", func(t *testing.T) {
		cases := map[string]string{"[]": "", `{"not_a_field": 1}`: "not_a_field"}
		for payload, field := range h.InvalidPayloads {
			cases[payload] = field
		}
		for payload, field := range cases {
			err := probe.Validate(h.Kind, json.RawMessage(payload))
			var payloadErr *providers.PayloadError
			if !errors.As(err, &payloadErr) {
				t.Errorf("Validate(%s) = %v, want a *PayloadError", payload, err)
				continue
			}
			if payloadErr.Field != field {
				t.Errorf("Validate(%s) names field %q, want %q (error: %v)", payload, payloadErr.Field, field, err)
			}
		}
	})

	t.Run("ValidateRejectsUnknownKind", func(t *testing.T) {
		if err := probe.Validate("no.such_kind", h.ValidPayload); !errors.Is(err, providers.ErrUnknownKind) {
			t.Fatalf("Validate(unknown kind) = %v, want ErrUnknownKind", err)
		}
	})

	t.Run("RedactHidesSensitiveValues", func(t *testing.T) {
		redacted := probe.Redact(h.Kind, h.ValidPayload)
		if !json.Valid(redacted) {
			t.Fatalf("Redact returned invalid JSON: %s", redacted)
		}
		for _, secret := range h.SensitiveValues {
			if strings.Contains(string(redacted), secret) {
				t.Errorf("Redact left %q in %s", secret, redacted)
			}
		}
		if garbage := probe.Redact(h.Kind, json.RawMessage("{not json")); !json.Valid(garbage) {
			t.Errorf("Redact(unparseable) returned invalid JSON: %s", garbage)
		}
	})

	request := func(id int64) providers.Request {
		return providers.Request{
			IntentID:       id,
			Namespace:      Namespace,
			IdempotencyKey: "conformance-key-" + string(rune('a'+id)),
			KeyFirstUsedAt: time.Now(),
			Kind:           h.Kind,
			Payload:        h.ValidPayload,
			Attempt:        1,
		}
	}
	// notFound checks a Reconcile answer for an intent the provider never
	// performed.
	notFound := func(t *testing.T, what string, found bool, err error) {
		t.Helper()
		if found {
			t.Fatalf("Reconcile(%s) found it", what)
		}
		if h.ProvesAbsence {
			if err != nil {
				t.Fatalf("Reconcile(%s) = %v, want a proven absence (nil error)", what, err)
			}
			return
		}
		if !errors.Is(err, providers.ErrAbsenceNotProven) {
			t.Fatalf("Reconcile(%s) = %v, want an error wrapping ErrAbsenceNotProven", what, err)
		}
	}
	perform := func(t *testing.T, double Double, req providers.Request) (providers.Result, error) {
		t.Helper()
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return h.NewProvider(t, double.URL()).Perform(callCtx, req)
	}

	t.Run("PerformSucceeds", func(t *testing.T) {
		double := h.NewDouble(t)
		res, err := perform(t, double, request(1))
		if err != nil {
			t.Fatalf("Perform: %v", err)
		}
		if res.ProviderRef == "" {
			t.Error("Result.ProviderRef is empty")
		}
		if res.Replayed {
			t.Error("a first request was reported as replayed")
		}
		if got := double.EffectsFor(1); got != 1 {
			t.Fatalf("double performed %d effects for the intent, want 1", got)
		}
	})

	t.Run("RequestThatNeverLeftIsRetried", func(t *testing.T) {
		_, err := h.NewProvider(t, "http://127.0.0.1:1").Perform(ctx, request(2))
		if got := providers.Classify(err); got == nil || got.Outcome != providers.OutcomeRetry {
			t.Fatalf("connection refused classified as %v, want retry", got)
		}
	})

	t.Run("RateLimitIsRetriedWithoutActing", func(t *testing.T) {
		double := h.NewDouble(t)
		double.Faults().Push(fault.Fault{Kind: fault.RateLimit, RetryAfter: 3 * time.Second})
		_, err := perform(t, double, request(3))
		got := providers.Classify(err)
		if got == nil || got.Outcome != providers.OutcomeRetry || got.HTTPStatus != 429 {
			t.Fatalf("429 classified as %v, want retry with HTTP 429", got)
		}
		if got.RetryAfter <= 0 {
			t.Errorf("429 classified without RetryAfter")
		}
		if n := double.EffectsFor(3); n != 0 {
			t.Fatalf("double acted %d times on a rate-limited request", n)
		}
	})

	t.Run("LostResponse", func(t *testing.T) {
		double := h.NewDouble(t)
		double.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
		_, err := perform(t, double, request(4))
		got := providers.Classify(err)
		want := providers.OutcomeAmbiguous
		if caps.IdempotencyKeys {
			want = providers.OutcomeRetry
		}
		if got == nil || got.Outcome != want {
			t.Fatalf("lost response classified as %v, want %s", got, want)
		}
		if caps.IdempotencyKeys {
			res, err := perform(t, double, request(4))
			if err != nil {
				t.Fatalf("retry with the same key: %v", err)
			}
			if !res.Replayed {
				t.Error("retry with the same key after a lost response was not reported as replayed")
			}
		}
		if n := double.EffectsFor(4); n != 1 {
			t.Fatalf("double performed %d effects, want 1", n)
		}
		if caps.CanReconcile {
			res, found, err := h.NewProvider(t, double.URL()).Reconcile(ctx, request(4))
			if err != nil || !found || res.ProviderRef == "" {
				t.Fatalf("Reconcile after a lost response = %+v, %v, %v; want found with a reference", res, found, err)
			}
		}
	})

	t.Run("ServerErrorAfterActingIsNeverRetriedBlindly", func(t *testing.T) {
		double := h.NewDouble(t)
		double.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 500})
		_, err := perform(t, double, request(5))
		got := providers.Classify(err)
		if got == nil || got.HTTPStatus != 500 {
			t.Fatalf("500 classified as %v, want an error with HTTP 500", got)
		}
		// Without a key a repeat could act twice. With Stripe's key a repeat
		// only replays the saved 500. Either way: ambiguous.
		if got.Outcome != providers.OutcomeAmbiguous {
			t.Fatalf("500 after acting classified as %s, want ambiguous", got.Outcome)
		}
	})

	t.Run("ReconcileFindsNothingForAnUnknownIntent", func(t *testing.T) {
		double := h.NewDouble(t)
		_, found, err := h.NewProvider(t, double.URL()).Reconcile(ctx, request(6))
		if !caps.CanReconcile {
			if !errors.Is(err, providers.ErrReconcileUnsupported) {
				t.Fatalf("Reconcile on a provider that cannot = %v, want ErrReconcileUnsupported", err)
			}
			return
		}
		notFound(t, "unknown", found, err)
	})

	if caps.CanReconcile {
		t.Run("PerformCarriesNamespaceAndKey", func(t *testing.T) {
			if h.RecordedMetadata == nil {
				t.Fatal("Harness.RecordedMetadata is required for a provider that reconciles")
			}
			double := h.NewDouble(t)
			req := request(8)
			if _, err := perform(t, double, req); err != nil {
				t.Fatalf("Perform: %v", err)
			}
			recorded := h.RecordedMetadata(double)
			if len(recorded) != 1 {
				t.Fatalf("the double recorded %d effects, want 1", len(recorded))
			}
			md := recorded[0]
			for k, want := range map[string]string{
				providers.MetadataNamespace: req.Namespace,
				providers.MetadataKey:       req.IdempotencyKey,
				providers.MetadataIntentID:  "8",
			} {
				if got, ok := md[k]; !ok || got != want {
					t.Errorf("metadata[%q] = %q (present %v), want %q; recorded %v", k, got, ok, want, md)
				}
			}
		})

		t.Run("OtherNamespaceIsNeverFound", func(t *testing.T) {
			// Another deployment sharing the provider account performed
			// an intent with the same id and the same key.
			double := h.NewDouble(t)
			theirs := request(9)
			theirs.Namespace = "conformance-other-ns"
			if _, err := perform(t, double, theirs); err != nil {
				t.Fatalf("Perform (other deployment): %v", err)
			}
			ours := request(9)
			res, found, err := h.NewProvider(t, double.URL()).Reconcile(ctx, ours)
			if found || res.ProviderRef != "" {
				t.Fatalf("Reconcile adopted another deployment's object %q", res.ProviderRef)
			}
			var mm *providers.MismatchError
			if errors.As(err, &mm) {
				t.Fatalf("Reconcile took another namespace's object for ours: %v", err)
			}
			notFound(t, "same key, other namespace", found, err)
			// The other deployment does find its own.
			if _, found, err := h.NewProvider(t, double.URL()).Reconcile(ctx, theirs); err != nil || !found {
				t.Fatalf("Reconcile by its owner = %v, %v; want found", found, err)
			}
		})
	}

	if h.RejectedPayload != nil {
		t.Run("PermanentRefusalFails", func(t *testing.T) {
			double := h.NewDouble(t)
			req := request(7)
			req.Payload = h.RejectedPayload
			_, err := perform(t, double, req)
			got := providers.Classify(err)
			if got == nil || got.Outcome != providers.OutcomeFailed || got.Message == "" {
				t.Fatalf("refusal classified as %v, want failed with the provider's message", got)
			}
		})
	}

}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
