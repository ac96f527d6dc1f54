package providertest

import (
	"testing"

	"github.com/outboxkit/outbox/providers"
)

// exercisePerform checks the attempts every target can answer without a
// fault injected: a success acts once and says where, a request that never
// left is retried, a refusal fails for good.
func exercisePerform(t *testing.T, s *suite) {
	t.Run("PerformSucceeds", func(t *testing.T) {
		double := s.h.NewDouble(t)
		res, err := s.perform(t, double.URL(), s.request(double, 1))
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
		_, err := s.perform(t, s.h.Unreachable, s.request(nil, 2))
		if got := providers.Classify(err); got == nil || got.Outcome != providers.OutcomeRetry {
			t.Fatalf("connection refused classified as %v, want retry", got)
		}
	})

	t.Run("PermanentRefusalFails", func(t *testing.T) {
		requires(t, s.h.Features.RejectsPayload, "RejectsPayload")
		double := s.h.NewDouble(t)
		req := s.request(double, 7)
		req.Payload = s.h.RejectedPayload
		_, err := s.perform(t, double.URL(), req)
		got := providers.Classify(err)
		if got == nil || got.Outcome != providers.OutcomeFailed || got.Message == "" {
			t.Fatalf("refusal classified as %v, want failed with the provider's message", got)
		}
	})
}
