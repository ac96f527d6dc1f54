package providertest

import (
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
)

// exerciseFaults checks how each injected fault is classified, the way
// DESIGN.md's outcome table says for a provider with or without an
// idempotency key: only an attempt that did not act, or one the key makes
// safe to repeat, may be retried.
func exerciseFaults(t *testing.T, s *suite) {
	t.Run("RateLimitIsRetriedWithoutActing", func(t *testing.T) {
		double := s.faultDouble(t)
		double.Faults().Push(fault.Fault{Kind: fault.RateLimit, RetryAfter: 3 * time.Second})
		_, err := s.perform(t, double.URL(), s.request(double, 3))
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
		double := s.faultDouble(t)
		double.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
		_, err := s.perform(t, double.URL(), s.request(double, 4))
		got := providers.Classify(err)
		want := providers.OutcomeAmbiguous
		if s.caps.IdempotencyKeys {
			want = providers.OutcomeRetry
		}
		if got == nil || got.Outcome != want {
			t.Fatalf("lost response classified as %v, want %s", got, want)
		}
		if s.caps.IdempotencyKeys {
			res, err := s.perform(t, double.URL(), s.request(double, 4))
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
		if s.caps.CanReconcile {
			res, found, err := s.reconcile(t, double, s.request(double, 4))
			if err != nil || !found || res.ProviderRef == "" {
				t.Fatalf("Reconcile after a lost response = %+v, %v, %v; want found with a reference", res, found, err)
			}
		}
	})

	t.Run("ServerErrorAfterActingIsNeverRetriedBlindly", func(t *testing.T) {
		double := s.faultDouble(t)
		double.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 500})
		_, err := s.perform(t, double.URL(), s.request(double, 5))
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
}

// faultDouble starts a double to inject faults into, skipping t when the
// harness has Features.HTTPFaults off.
func (s *suite) faultDouble(t *testing.T) FaultDouble {
	t.Helper()
	requires(t, s.h.Features.HTTPFaults, "HTTPFaults")
	d := s.h.NewDouble(t)
	fd, ok := d.(FaultDouble)
	if !ok {
		t.Fatalf("Features.HTTPFaults is on but the double, a %T, has no Faults method", d)
	}
	return fd
}
