package stripedouble_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

func refundParams(ctx context.Context, key, pi string, amount int64, intentID string) *stripe.RefundParams {
	rp := &stripe.RefundParams{PaymentIntent: stripe.String(pi)}
	if amount > 0 {
		rp.Amount = stripe.Int64(amount)
	}
	rp.Context = ctx
	if key != "" {
		rp.SetIdempotencyKey(key)
	}
	if intentID != "" {
		rp.AddMetadata("intent_id", intentID)
	}
	return rp
}

func TestRefundsKeepTheMoneyStraight(t *testing.T) {
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()
	pi, err := api.PaymentIntents.New(params(ctx, "charge", 1, 2000))
	if err != nil {
		t.Fatal(err)
	}
	rf, err := api.Refunds.New(refundParams(ctx, "refund-1", pi.ID, 1500, "10"))
	if err != nil || rf.Amount != 1500 || rf.Status != stripe.RefundStatusSucceeded || rf.PaymentIntent.ID != pi.ID || rf.Metadata["intent_id"] != "10" {
		t.Fatalf("refund: %+v, %v", rf, err)
	}
	// Beyond what is left: a 400, not saved, nothing refunded.
	_, err = api.Refunds.New(refundParams(ctx, "refund-2", pi.ID, 501, "11"))
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Code != "amount_too_large" || se.Param != "amount" {
		t.Fatalf("over-refund: %+v", se)
	}
	// The key was not saved: with what is left it refunds.
	rest, err := api.Refunds.New(refundParams(ctx, "refund-2", pi.ID, 500, "11"))
	if err != nil || rest.Amount != 500 {
		t.Fatalf("the rest: %+v, %v", rest, err)
	}
	// Nothing left: charge_already_refunded.
	_, err = api.Refunds.New(refundParams(ctx, "refund-3", pi.ID, 0, "12"))
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Code != "charge_already_refunded" {
		t.Fatalf("refund of a refunded charge: %+v", se)
	}
	if d.Refunded(pi.ID) != 2000 || len(d.Refunds()) != 2 || d.RefundsFor(10) != 1 || d.RefundsFor(11) != 1 || d.RefundsFor(12) != 0 {
		t.Fatalf("refunded %d, refunds %+v", d.Refunded(pi.ID), d.Refunds())
	}
	if d.EffectsFor(10) != 1 || d.Stats().Refunds != 2 {
		t.Fatalf("effects %d, stats %+v", d.EffectsFor(10), d.Stats())
	}

	// Only a succeeded PaymentIntent has a charge to refund.
	manual := params(ctx, "auth", 2, 2000)
	manual.CaptureMethod = stripe.String("manual")
	auth, err := api.PaymentIntents.New(manual)
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.Refunds.New(refundParams(ctx, "refund-4", auth.ID, 0, "13"))
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || !strings.Contains(se.Msg, "requires_capture") {
		t.Fatalf("refund of an authorisation: %+v", se)
	}
	_, err = api.Refunds.New(refundParams(ctx, "refund-5", "pi_missing", 0, "14"))
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Code != "resource_missing" {
		t.Fatalf("refund of no PaymentIntent: %+v", se)
	}
	for name, form := range map[string]string{
		"NoPaymentIntent": "amount=100",
		"BadReason":       "payment_intent=" + pi.ID + "&reason=because",
		"ZeroAmount":      "payment_intent=" + pi.ID + "&amount=0",
		"Unknown":         "payment_intent=" + pi.ID + "&currency_please=usd",
	} {
		resp, body := postTo(t, d, "/v1/refunds", "bad-"+name, form)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
}

func postTo(t *testing.T, d *stripedouble.Server, path, idemKey, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+stripedouble.DefaultAPIKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, sb.String()
}

func TestRefundIdempotency(t *testing.T) {
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()
	pi, err := api.PaymentIntents.New(params(ctx, "charge", 1, 2000))
	if err != nil {
		t.Fatal(err)
	}

	// A lost response: the refund was made and saved; the retry replays it.
	// (On a fresh connection: net/http resends a keyed request that failed
	// on a reused one, and the resend would be answered.)
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	d.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
	if _, err := api.Refunds.New(refundParams(ctx, "lost", pi.ID, 700, "21")); err == nil {
		t.Fatal("the lost response was answered")
	}
	again, err := api.Refunds.New(refundParams(ctx, "lost", pi.ID, 700, "21"))
	if err != nil || again.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %+v, %v", again, err)
	}
	// Other parameters under the key: idempotency_error.
	_, err = api.Refunds.New(refundParams(ctx, "lost", pi.ID, 800, "21"))
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Type != stripe.ErrorTypeIdempotency {
		t.Fatalf("changed parameters: %+v", se)
	}
	// A key first used for a create is not a refund's.
	_, err = api.Refunds.New(refundParams(ctx, "charge", pi.ID, 700, "21"))
	if se := stripeErr(t, err); se.Type != stripe.ErrorTypeIdempotency {
		t.Fatalf("a create's key: %+v", se)
	}
	// A saved 500: nothing refunded, replayed to the retry.
	d.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 500})
	for i := 0; i < 2; i++ {
		_, err = api.Refunds.New(refundParams(ctx, "five-hundred", pi.ID, 100, "22"))
		if se := stripeErr(t, err); se.HTTPStatusCode != 500 {
			t.Fatalf("attempt %d: %+v", i, se)
		}
	}
	// In flight: 409.
	d.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: 500 * time.Millisecond})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = api.Refunds.New(refundParams(ctx, "slow", pi.ID, 100, "23"))
	}()
	testkit.Eventually(t, 10*time.Second, "the slow refund", func() bool { return len(d.Refunds()) == 2 })
	_, err = api.Refunds.New(refundParams(ctx, "slow", pi.ID, 100, "23"))
	if se := stripeErr(t, err); se.HTTPStatusCode != 409 || se.Code != "idempotency_key_in_use" {
		t.Fatalf("in flight: %+v", se)
	}
	wg.Wait()
	if d.Refunded(pi.ID) != 800 || d.RefundsFor(21) != 1 || d.RefundsFor(22) != 0 || d.RefundsFor(23) != 1 || d.DuplicateEffects() != 0 {
		t.Fatalf("refunded %d: %+v", d.Refunded(pi.ID), d.Refunds())
	}
}

func TestListRefunds(t *testing.T) {
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()
	a, _ := api.PaymentIntents.New(params(ctx, "a", 1, 2000))
	b, _ := api.PaymentIntents.New(params(ctx, "b", 2, 2000))
	for i, pi := range []string{a.ID, b.ID, a.ID} {
		if _, err := api.Refunds.New(refundParams(ctx, "r"+string(rune('0'+i)), pi, 100, "")); err != nil {
			t.Fatal(err)
		}
	}
	lp := &stripe.RefundListParams{PaymentIntent: stripe.String(a.ID)}
	lp.Limit = stripe.Int64(1)
	iter := api.Refunds.List(lp)
	var got []string
	for iter.Next() {
		got = append(got, iter.Refund().PaymentIntent.ID)
	}
	if iter.Err() != nil || len(got) != 2 || got[0] != a.ID || got[1] != a.ID {
		t.Fatalf("refunds of %s: %v, %v", a.ID, got, iter.Err())
	}
	resp, body := get(t, d, "/v1/refunds?payment_intent=pi_missing")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("refunds of no PaymentIntent: %d %s", resp.StatusCode, body)
	}
	resp, body = get(t, d, "/v1/refunds?metadata[outbox_key]=k")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown list parameter: %d %s", resp.StatusCode, body)
	}
}

func TestCancel(t *testing.T) {
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()
	charged, _ := api.PaymentIntents.New(params(ctx, "charge", 1, 2000))
	cp := &stripe.PaymentIntentCancelParams{}
	cp.SetIdempotencyKey("cancel-1")
	_, err := api.PaymentIntents.Cancel(charged.ID, cp)
	se := stripeErr(t, err)
	if se.HTTPStatusCode != 400 || se.Code != "payment_intent_unexpected_state" ||
		!strings.Contains(se.Msg, "You cannot cancel this PaymentIntent because it has a status of succeeded") || se.PaymentIntent == nil {
		t.Fatalf("cancel of a charge: %+v", se)
	}
	manual := params(ctx, "auth", 2, 2000)
	manual.CaptureMethod = stripe.String("manual")
	auth, _ := api.PaymentIntents.New(manual)
	cp = &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("abandoned")}
	cp.SetIdempotencyKey("cancel-2")
	canceled, err := api.PaymentIntents.Cancel(auth.ID, cp)
	if err != nil || canceled.Status != stripe.PaymentIntentStatusCanceled || canceled.CancellationReason != "abandoned" || canceled.AmountCapturable != 0 {
		t.Fatalf("cancel: %+v, %v", canceled, err)
	}
	if again, err := api.PaymentIntents.Cancel(auth.ID, cp); err != nil || again.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %v", err)
	}
	cp = &stripe.PaymentIntentCancelParams{}
	cp.SetIdempotencyKey("cancel-3")
	if _, err := api.PaymentIntents.Cancel(auth.ID, cp); stripeErr(t, err).PaymentIntent.Status != stripe.PaymentIntentStatusCanceled {
		t.Fatalf("second cancel: %v", err)
	}
	cc := &stripe.PaymentIntentCaptureParams{}
	cc.SetIdempotencyKey("capture-canceled")
	if _, err := api.PaymentIntents.Capture(auth.ID, cc); stripeErr(t, err).Code != "payment_intent_unexpected_state" {
		t.Fatalf("capture of a canceled PaymentIntent: %v", err)
	}
	if resp, body := postTo(t, d, "/v1/payment_intents/"+auth.ID+"/cancel", "bad-reason", "cancellation_reason=bored"); resp.StatusCode != 400 {
		t.Fatalf("bad reason: %d %s", resp.StatusCode, body)
	}
}
