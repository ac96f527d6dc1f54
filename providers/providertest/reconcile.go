package providertest

import (
	"errors"
	"strconv"
	"testing"

	"github.com/outboxkit/outbox/providers"
)

// exerciseReconcile checks Reconcile and the intent's identity at the
// provider (DESIGN.md, invariant 1): the dispatcher acts on what Reconcile
// finds, so it must never find what it did not perform, nor another
// deployment's object that carries the same key.
func exerciseReconcile(t *testing.T, s *suite) {
	t.Run("ReconcileFindsNothingForAnUnknownIntent", func(t *testing.T) {
		double := s.h.NewDouble(t)
		_, found, err := s.reconcile(t, double, s.request(double, 6))
		if !s.caps.CanReconcile {
			if !errors.Is(err, providers.ErrReconcileUnsupported) {
				t.Fatalf("Reconcile on a provider that cannot = %v, want ErrReconcileUnsupported", err)
			}
			return
		}
		s.notFound(t, "unknown", found, err)
	})

	t.Run("PerformCarriesNamespaceAndKey", func(t *testing.T) {
		requires(t, s.h.Features.Reconciles, "Reconciles")
		double := s.h.NewDouble(t)
		req := s.request(double, 8)
		if _, err := s.perform(t, double.URL(), req); err != nil {
			t.Fatalf("Perform: %v", err)
		}
		recorded := s.h.RecordedMetadata(double)
		if len(recorded) != 1 {
			t.Fatalf("the double recorded %d effects, want 1", len(recorded))
		}
		md := recorded[0]
		for k, want := range map[string]string{
			providers.MetadataNamespace: req.Namespace,
			providers.MetadataKey:       req.IdempotencyKey,
			providers.MetadataIntentID:  strconv.FormatInt(req.IntentID, 10),
		} {
			if got, ok := md[k]; !ok || got != want {
				t.Errorf("metadata[%q] = %q (present %v), want %q; recorded %v", k, got, ok, want, md)
			}
		}
	})

	t.Run("OtherNamespaceIsNeverFound", func(t *testing.T) {
		requires(t, s.h.Features.Reconciles, "Reconciles")
		// Another deployment sharing the provider account performed an
		// intent with the same id and the same key.
		double := s.h.NewDouble(t)
		theirs := s.request(double, 9)
		theirs.Namespace = "conformance-other-ns"
		if _, err := s.perform(t, double.URL(), theirs); err != nil {
			t.Fatalf("Perform (other deployment): %v", err)
		}
		ours := s.request(double, 9)
		res, found, err := s.reconcile(t, double, ours)
		if found || res.ProviderRef != "" {
			t.Fatalf("Reconcile adopted another deployment's object %q", res.ProviderRef)
		}
		var mm *providers.MismatchError
		if errors.As(err, &mm) {
			t.Fatalf("Reconcile took another namespace's object for ours: %v", err)
		}
		s.notFound(t, "same key, other namespace", found, err)
		// The other deployment does find its own.
		if _, found, err := s.reconcile(t, double, theirs); err != nil || !found {
			t.Fatalf("Reconcile by its owner = %v, %v; want found", found, err)
		}
	})
}
