package sendgridprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

const welcome = `{"from":{"email":"shop@example.com"},"to":[{"email":"jane@example.com"}],"subject":"Welcome","text":"Hello"}`

func nsRequest(namespace string, intentID int64, payload string) providers.Request {
	key := "signup:msg-1"
	if namespace != "" {
		key = namespace + ":" + key
	}
	return providers.Request{IntentID: intentID, Namespace: namespace, IdempotencyKey: key, Kind: sendgridprovider.KindEmail, Payload: json.RawMessage(payload), Attempt: 1}
}

// TestReconcileTwoDeploymentsShareAnAccount: deployments A and B send
// through one SendGrid account and both have intent 1 for the same message.
// B's email was sent; A's attempt ended ambiguous before SendGrid queued
// it. A's lookup must not take B's email for its own.
func TestReconcileTwoDeploymentsShareAnAccount(t *testing.T) {
	t.Parallel()
	s := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), Reconcile: true})
	ctx := context.Background()
	a, b := nsRequest("ns-a", 1, welcome), nsRequest("ns-b", 1, welcome)

	s.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 500})
	if _, ae := perform(t, p, a); ae == nil || ae.Outcome != providers.OutcomeAmbiguous {
		t.Fatalf("A's attempt: %v", ae)
	}
	bRes, ae := perform(t, p, b)
	if ae != nil {
		t.Fatal(ae)
	}
	res, found, err := p.Reconcile(ctx, a)
	if found || res.ProviderRef != "" || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("A's Reconcile = %+v, %v, %v; want not found (unproven), not B's %s", res, found, err, bRes.ProviderRef)
	}
	emails := s.Emails()
	if len(emails) != 1 || emails[0].MessageID != bRes.ProviderRef || emails[0].CustomArgs["outbox_namespace"] != "ns-b" ||
		emails[0].CustomArgs["outbox_key"] != b.IdempotencyKey || emails[0].CustomArgs["intent_id"] != "1" {
		t.Fatalf("double's records %+v", emails)
	}
	if res, found, err := p.Reconcile(ctx, b); err != nil || !found || res.ProviderRef != bRes.ProviderRef {
		t.Fatalf("B's Reconcile = %+v, %v, %v", res, found, err)
	}
	// The very same key under another namespace is not A's either.
	sameKey := b
	sameKey.Namespace = "ns-a"
	if _, found, err := p.Reconcile(ctx, sameKey); found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("same key, other namespace: %v, %v", found, err)
	}
}

func TestReconcileChecksTheRecipient(t *testing.T) {
	t.Parallel()
	s := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), Reconcile: true})
	ctx := context.Background()
	r := nsRequest("ns-a", 1, welcome)
	res, ae := perform(t, p, r)
	if ae != nil {
		t.Fatal(ae)
	}
	other := r
	other.Payload = json.RawMessage(strings.Replace(welcome, "jane@example.com", "john@example.org", 1))
	_, found, err := p.Reconcile(ctx, other)
	var mm *providers.MismatchError
	if found || !errors.As(err, &mm) || mm.Field != "recipient" || mm.ProviderRef != res.ProviderRef {
		t.Fatalf("Reconcile with another recipient = %v, %v; want a *MismatchError", found, err)
	}
	if strings.Contains(err.Error(), "jane@") || strings.Contains(err.Error(), "john@") {
		t.Fatalf("the mismatch leaks addresses: %v", err)
	}
	// Recipients match case-insensitively, cc and bcc included.
	cc := r
	cc.Payload = json.RawMessage(`{"from":{"email":"shop@example.com"},"to":[{"email":"x@example.com"}],"cc":[{"email":"JANE@example.com"}],"subject":"Welcome","text":"Hello"}`)
	if got, found, err := p.Reconcile(ctx, cc); err != nil || !found || got.ProviderRef != res.ProviderRef {
		t.Fatalf("Reconcile with the recipient in cc = %v, %v", found, err)
	}
}

func TestReconcileLegacyIntent(t *testing.T) {
	t.Parallel()
	s := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), Reconcile: true})
	ctx := context.Background()
	legacy := nsRequest("", 1, welcome)
	if _, found, err := p.Reconcile(ctx, legacy); found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("legacy Reconcile of nothing = %v, %v", found, err)
	}
	// Another deployment's intent 1, other key: not ours.
	if _, ae := perform(t, p, nsRequest("ns-b", 1, welcome)); ae != nil {
		t.Fatal(ae)
	}
	if _, found, err := p.Reconcile(ctx, legacy); found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("legacy Reconcile = %v, %v", found, err)
	}
	res, ae := perform(t, p, legacy)
	if ae != nil {
		t.Fatal(ae)
	}
	if e := s.Emails()[1]; e.CustomArgs["outbox_key"] != legacy.IdempotencyKey {
		t.Fatalf("custom_args %v", e.CustomArgs)
	} else if _, ok := e.CustomArgs["outbox_namespace"]; ok {
		t.Fatalf("an intent without a namespace was sent one: %v", e.CustomArgs)
	}
	if got, found, err := p.Reconcile(ctx, legacy); err != nil || !found || got.ProviderRef != res.ProviderRef {
		t.Fatalf("legacy Reconcile of ours = %v, %v", found, err)
	}
}

func TestIdentityMustFitCustomArgs(t *testing.T) {
	t.Parallel()
	s := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), Reconcile: true})
	r := nsRequest("ns-a", 1, welcome)
	r.IdempotencyKey = strings.Repeat("k", sendgridprovider.MaxIdentityBytes)
	_, ae := perform(t, p, r)
	if ae == nil || ae.Outcome != providers.OutcomeFailed || !ae.DidNotAct {
		t.Fatalf("over-long identity: %v", ae)
	}
	if n := len(s.Emails()); n != 0 {
		t.Fatalf("double accepted %d emails", n)
	}
	// A key the activity query cannot quote is never found, and says why.
	q := nsRequest("ns-a", 2, welcome)
	q.IdempotencyKey = `a"b`
	if _, found, err := p.Reconcile(context.Background(), q); found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("unquotable key: %v, %v", found, err)
	}
}
