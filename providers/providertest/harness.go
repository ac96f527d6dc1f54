package providertest

import (
	"encoding/json"
	"testing"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
)

// Namespace is the deployment namespace of the suite's requests.
const Namespace = "conformance-ns"

// DefaultUnreachable is Harness.Unreachable's default: an HTTP address on
// which nothing listens.
const DefaultUnreachable = "http://127.0.0.1:1"

// Double is the target the suite performs against: a provider's test
// double, or a throwaway queue or stream on a real broker. It asks no more
// than a real broker can answer, so that the broker adapters run the suite
// against the real thing.
type Double interface {
	// URL is what Harness.NewProvider points the adapter at: the double's
	// base URL, or the broker's.
	URL() string
	// EffectsFor counts the effects performed for an intent id, read from
	// what the adapter sent (metadata, a message header). The suite asks
	// as soon as Perform has returned, without waiting, so the count must
	// include every effect performed by then.
	EffectsFor(intentID int64) int
}

// FaultDouble is a Double whose answers can be replaced by the faults of
// package fault. Harness.NewDouble must return one when
// Features.HTTPFaults is on.
type FaultDouble interface {
	Double
	// Faults is the double's fault injector.
	Faults() *fault.Injector
}

// Features says what the adapter and its target support. A subtest that
// needs a feature that is off is skipped, naming it.
type Features struct {
	// HTTPFaults: the double is a FaultDouble that answers over HTTP, so a
	// 429, a 500 after acting and a response lost after acting can be
	// injected. A real broker cannot be made to answer any of these; its
	// adapter's own tests cut the connection instead.
	HTTPFaults bool
	// Reconciles: the adapter declares Capabilities.CanReconcile
	// (Declaration fails when the two disagree, so an adapter that stops
	// reconciling cannot skip the identity checks unnoticed), and
	// Harness.RecordedMetadata reads what its double recorded.
	Reconciles bool
	// ProvesAbsence: the provider's Reconcile reads consistently and so
	// answers an unknown intent with found=false and a nil error;
	// otherwise it must answer with an error wrapping
	// providers.ErrAbsenceNotProven. Read only when Reconciles is on.
	ProvesAbsence bool
	// RejectsPayload: Harness.RejectedPayload is a payload the target
	// refuses for good.
	RejectsPayload bool
}

// Harness describes one adapter under test.
type Harness struct {
	// NewDouble starts a fresh target for one subtest; the suite closes
	// nothing, so register cleanup with t.Cleanup.
	NewDouble func(t *testing.T) Double
	// NewProvider returns the adapter pointed at url (a Double's URL, or
	// Unreachable) with credentials the target accepts. Every provider it
	// returns for one Harness must declare the same Capabilities.
	NewProvider func(t *testing.T, url string) providers.Provider
	// Unreachable is a url for NewProvider at which nothing answers, in the
	// adapter's scheme. The provider the suite asks for its declaration,
	// validation and redaction is pointed at it, so those areas need no
	// target; and a request sent there never leaves, which must be
	// retried. Defaults to DefaultUnreachable.
	Unreachable string
	// Features says which areas the adapter and its target can exercise.
	Features Features
	// Kind is the intent kind to exercise.
	Kind string
	// ValidPayload is a payload of Kind that the provider performs.
	ValidPayload json.RawMessage
	// ValidPayloadFor returns ValidPayload addressed to d, for a target
	// whose address is part of the payload (the queue a message is routed
	// to, the subject a stream captures). Optional: without it, every
	// double is sent ValidPayload. Validation and redaction always see
	// ValidPayload.
	ValidPayloadFor func(d Double) json.RawMessage
	// InvalidPayloads maps payloads of Kind to the field their validation
	// error must name.
	InvalidPayloads map[string]string
	// RejectedPayload passes Validate but the provider refuses it for good
	// (a declined card, a message no queue is bound for, say). Required
	// when Features.RejectsPayload is on, and only then.
	RejectedPayload json.RawMessage
	// SensitiveValues are strings in ValidPayload that Redact must hide.
	SensitiveValues []string
	// RecordedMetadata returns the metadata (Stripe metadata, SendGrid
	// custom_args) of every effect the double performed, in order.
	// Required when Features.Reconciles is on.
	RecordedMetadata func(d Double) []map[string]string
}
