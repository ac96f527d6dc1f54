package testkit

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// ProviderKey returns the key the dispatcher will send a provider (at most
// limit bytes, 0 for no limit of the provider's own) for the intent with
// the given key, in its first key generation, in the database behind pool.
func ProviderKey(t testing.TB, pool *pgxpool.Pool, key string, limit int) (namespace, providerKey string) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT namespace FROM outbox_namespace`).Scan(&namespace); err != nil {
		t.Fatal(err)
	}
	return namespace, intenttype.ProviderKey(namespace, 0, key, limit)
}

// ForeignPaymentIntent creates, in a Stripe double, a succeeded
// PaymentIntent as another writer would: with the given amount and customer
// and with metadata carrying namespace, key and intent id (another
// deployment sharing the account, or a stray object with our key). It
// returns the PaymentIntent's id.
func ForeignPaymentIntent(t testing.TB, sd *stripedouble.Server, namespace, key string, intentID int64, amount int, customer string) string {
	t.Helper()
	form := url.Values{
		"amount": {strconv.Itoa(amount)}, "currency": {"usd"}, "customer": {customer},
		"payment_method": {"pm_card_visa"}, "confirm": {"true"},
		"automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"never"},
		"metadata[" + providers.MetadataNamespace + "]": {namespace},
		"metadata[" + providers.MetadataKey + "]":       {key},
		"metadata[" + providers.MetadataIntentID + "]":  {strconv.FormatInt(intentID, 10)},
	}
	req, err := http.NewRequest(http.MethodPost, sd.URL()+"/v1/payment_intents", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+stripedouble.DefaultAPIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the Stripe double answered %d to another writer's PaymentIntent", resp.StatusCode)
	}
	pis := sd.PaymentIntents()
	return pis[len(pis)-1].ID
}
