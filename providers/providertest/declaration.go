package providertest

import (
	"slices"
	"testing"

	"github.com/outboxkit/outbox/providers"
)

// exerciseDeclaration checks what the provider says of itself, which the
// registry and the dispatcher take on trust.
func exerciseDeclaration(t *testing.T, s *suite) {
	t.Run("Declaration", func(t *testing.T) {
		if s.probe.Name() == "" {
			t.Fatal("Name() is empty")
		}
		if !slices.Contains(s.probe.Kinds(), s.h.Kind) {
			t.Fatalf("Kinds() = %v does not include %q", s.probe.Kinds(), s.h.Kind)
		}
		if s.caps.IdempotencyKeys && s.caps.KeyWindow <= 0 {
			t.Fatal("declares idempotency keys without a key window")
		}
		if s.caps.CanReconcile != s.h.Features.Reconciles {
			t.Fatalf("Capabilities().CanReconcile = %v, but the harness has Features.Reconciles = %v", s.caps.CanReconcile, s.h.Features.Reconciles)
		}
		if _, err := providers.NewRegistry(s.probe); err != nil {
			t.Fatalf("NewRegistry: %v", err)
		}
	})
}
