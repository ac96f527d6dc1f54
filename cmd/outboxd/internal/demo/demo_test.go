package demo

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

func TestDemoDeliversEveryEffectOnceUnderFaults(t *testing.T) {
	t.Parallel()
	report, err := Run(context.Background(), Config{ServerURL: pgtest.ServerURL(), Orders: 60, Consumers: 6, Seed: 3, Faults: true, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("Run: %v (report %+v)", err, report)
	}
	if !report.OK() || report.DuplicateEffects != 0 || report.Lost != 0 {
		t.Fatalf("report = %+v, want no duplicate effect and nothing lost", report)
	}
	// Each order records a payment and a receipt, and some a refund (fill
	// checks each order's count against its refund).
	if report.IntentsRecorded < 2*report.Orders+report.RefundsAtStripe || report.IntentsRecorded > 3*report.Orders {
		t.Fatalf("%d intents recorded for %d orders and %d refunds", report.IntentsRecorded, report.Orders, report.RefundsAtStripe)
	}
	if report.RefundsAtStripe == 0 || report.AmountRefunded == 0 {
		t.Fatalf("no refund reached the double: %+v", report)
	}
	if report.DuplicatesDelivered == 0 || report.DuplicatesAbsorbed != report.DuplicatesDelivered {
		t.Fatalf("duplicates delivered %d, absorbed %d: every duplicate must be absorbed", report.DuplicatesDelivered, report.DuplicatesAbsorbed)
	}
	if report.PaymentsAtStripe > report.Orders || report.EmailsAtSendGrid > report.Orders {
		t.Fatalf("%d payments and %d emails for %d orders", report.PaymentsAtStripe, report.EmailsAtSendGrid, report.Orders)
	}
	if report.Succeeded+report.InDoubt+report.Failed+report.Cancelled+report.Waiting != report.IntentsRecorded {
		t.Fatalf("states do not add up: %+v", report)
	}
	faults := 0
	for _, n := range report.FaultsInjected {
		faults += n
	}
	if faults == 0 {
		t.Fatal("no fault was injected: the run proved nothing")
	}
}

func TestReportCatchesADuplicateEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	if _, err := pool.Exec(ctx, createOrdersSQL); err != nil {
		t.Fatal(err)
	}
	env, err := startDoubles(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	// Two PaymentIntents for one intent, as a dispatcher that repeated an
	// ambiguous call without its key would cause.
	for range 2 {
		form := url.Values{"amount": {"500"}, "currency": {"usd"}, "metadata[intent_id]": {"1"}}
		req, _ := http.NewRequest(http.MethodPost, env.Stripe().URL()+"/v1/payment_intents", strings.NewReader(form.Encode()))
		req.Header.Set("Authorization", "Bearer "+stripedouble.DefaultAPIKey)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	report := &Report{}
	if err := fill(ctx, pool, env, report); err != nil {
		t.Fatal(err)
	}
	if report.OK() || report.DuplicateEffects != 1 {
		t.Fatalf("report = %+v, want the duplicate effect flagged", report)
	}
}
