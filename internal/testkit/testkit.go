// Package testkit holds small helpers shared by tests across packages, so
// each test states what it checks rather than how to set up the outbox.
package testkit

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// Registry returns the Stripe and SendGrid adapters without credentials:
// enough to validate, record and redact intents, not to perform them.
func Registry(t testing.TB) *providers.Registry {
	t.Helper()
	sp, err := stripeprovider.New(stripeprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gp, err := sendgridprovider.New(sendgridprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := providers.NewRegistry(sp, gp)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// Client returns an intents.Client on pool that records with Registry.
func Client(t testing.TB, pool *pgxpool.Pool) (*intents.Client, *providers.Registry) {
	t.Helper()
	reg := Registry(t)
	client, err := intents.NewClient(pool, &intents.Config{Providers: reg})
	if err != nil {
		t.Fatal(err)
	}
	return client, reg
}
