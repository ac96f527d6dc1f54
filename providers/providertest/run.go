package providertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
)

// callTimeout bounds every call the suite makes, so that a target that
// never answers fails the subtest instead of hanging the run.
const callTimeout = 10 * time.Second

// Run runs the suite against the adapter h describes, one group of subtests
// per area of the contract. Subtests that need a feature h.Features has off
// are skipped, naming it. Run fails at once when the harness contradicts its
// own features.
func Run(t *testing.T, h Harness) {
	t.Helper()
	s := newSuite(t, h)
	exerciseDeclaration(t, s)
	exerciseValidation(t, s)
	exerciseRedaction(t, s)
	exercisePerform(t, s)
	exerciseFaults(t, s)
	exerciseReconcile(t, s)
}

// suite is what every area shares: the harness and a provider pointed at
// nothing, for the areas that need no target.
type suite struct {
	h     Harness
	probe providers.Provider
	caps  providers.Capabilities
}

func newSuite(t *testing.T, h Harness) *suite {
	t.Helper()
	if h.Unreachable == "" {
		h.Unreachable = DefaultUnreachable
	}
	// A payload or a reader the features never send to is a harness
	// mistake that would otherwise pass as a skip.
	switch {
	case h.Features.RejectsPayload && h.RejectedPayload == nil:
		t.Fatal("Features.RejectsPayload is on but Harness.RejectedPayload is nil")
	case !h.Features.RejectsPayload && h.RejectedPayload != nil:
		t.Fatal("Harness.RejectedPayload is set but Features.RejectsPayload is off: it would never be sent")
	case h.Features.Reconciles && h.RecordedMetadata == nil:
		t.Fatal("Harness.RecordedMetadata is required for a provider that reconciles")
	}
	probe := h.NewProvider(t, h.Unreachable)
	return &suite{h: h, probe: probe, caps: probe.Capabilities()}
}

// requires skips t unless the harness has the named feature on.
func requires(t *testing.T, on bool, feature string) {
	t.Helper()
	if !on {
		t.Skipf("needs Features.%s, which this harness has off", feature)
	}
}

// request is the suite's request for intent id, its payload addressed to d
// (nil for a target that is not there).
func (s *suite) request(d Double, id int64) providers.Request {
	payload := s.h.ValidPayload
	if d != nil && s.h.ValidPayloadFor != nil {
		payload = s.h.ValidPayloadFor(d)
	}
	return providers.Request{
		IntentID:       id,
		Namespace:      Namespace,
		IdempotencyKey: "conformance-key-" + string(rune('a'+id)),
		KeyFirstUsedAt: time.Now(),
		Kind:           s.h.Kind,
		Payload:        payload,
		Attempt:        1,
	}
}

// perform performs req once with a fresh provider pointed at url.
func (s *suite) perform(t *testing.T, url string, req providers.Request) (providers.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return s.h.NewProvider(t, url).Perform(ctx, req)
}

// reconcile asks a fresh provider pointed at d about req.
func (s *suite) reconcile(t *testing.T, d Double, req providers.Request) (providers.Result, bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return s.h.NewProvider(t, d.URL()).Reconcile(ctx, req)
}

// notFound checks a Reconcile answer for an intent the provider never
// performed.
func (s *suite) notFound(t *testing.T, what string, found bool, err error) {
	t.Helper()
	if found {
		t.Fatalf("Reconcile(%s) found it", what)
	}
	if s.h.Features.ProvesAbsence {
		if err != nil {
			t.Fatalf("Reconcile(%s) = %v, want a proven absence (nil error)", what, err)
		}
		return
	}
	if !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("Reconcile(%s) = %v, want an error wrapping ErrAbsenceNotProven", what, err)
	}
}
