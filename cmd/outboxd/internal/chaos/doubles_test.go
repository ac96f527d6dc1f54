package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/chaos"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// serveDoubles runs ServeDoubles until the test ends and returns its
// addresses.
func serveDoubles(t *testing.T, cfg chaos.DoublesConfig) chaos.DoublesAddrs {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan chaos.DoublesAddrs, 1)
	done := make(chan error, 1)
	go func() { done <- chaos.ServeDoubles(ctx, cfg, func(a chaos.DoublesAddrs) { addrs <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeDoubles: %v", err)
		}
	})
	select {
	case a := <-addrs:
		return a
	case err := <-done:
		t.Fatalf("ServeDoubles returned before serving: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("ServeDoubles did not serve within 10s")
	}
	return chaos.DoublesAddrs{}
}

func wire(t *testing.T, base string) []chaos.WireRecord {
	t.Helper()
	resp, err := http.Get(base + chaos.WirePath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var recs []chaos.WireRecord
	if err := json.NewDecoder(resp.Body).Decode(&recs); err != nil {
		t.Fatal(err)
	}
	return recs
}

// The wire log attributes each effect-causing request to its intent and
// records what the client could see: the answer's status, or a dropped
// connection, or an answer slower than the client's timeout.
func TestServeDoublesKeepsAWireLogPerIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const callTimeout = 500 * time.Millisecond
	a := serveDoubles(t, chaos.DoublesConfig{Seed: 3, FaultRate: 1, DelayFor: callTimeout + 200*time.Millisecond})
	sg, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: a.SendGridURL})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: stripedouble.DefaultAPIKey, BaseURL: a.StripeURL})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		provider providers.Provider
		base     string
		kind     string
		payload  string
	}{
		{sg, a.SendGridURL, sendgridprovider.KindEmail, `{"from":{"email":"a@example.com"},"to":[{"email":"b@example.com"}],"subject":"s","text":"t"}`},
		{sp, a.StripeURL, stripeprovider.KindPaymentIntent, `{"amount":500,"currency":"usd","customer":"cus_1","payment_method":"pm_card_visa","confirm":true}`},
	} {
		seen := map[string]bool{}
		for id := int64(1); id <= 12; id++ {
			callCtx, cancel := context.WithTimeout(ctx, callTimeout)
			_, err := c.provider.Perform(callCtx, providers.Request{IntentID: id, IdempotencyKey: fmt.Sprintf("t:%d", id), Kind: c.kind, Attempt: 1, Payload: json.RawMessage(c.payload)})
			cancel()
			var attemptErr *providers.AttemptError
			status := 0
			if errors.As(err, &attemptErr) {
				status = attemptErr.HTTPStatus
			}
			// stripe-go retries a dropped connection itself, with the same
			// key: the client saw the last answer, whose record the double
			// adds only once it has written it, so possibly after the
			// client read it.
			recs := waitWire(t, c.base, id, err == nil || status != 0)
			r := recs[len(recs)-1]
			switch {
			case err == nil:
				seen["answered"] = true
				if r.Status/100 != 2 || r.Ambiguous(callTimeout) {
					t.Errorf("%s intent %d succeeded but its wire record is %+v", c.kind, id, r)
				}
			case status != 0:
				seen[fmt.Sprint(status)] = true
				if r.Status != status {
					t.Errorf("%s intent %d got HTTP %d but its wire record is %+v", c.kind, id, status, r)
				}
			default: // no answer: lost, or slower than the timeout
				seen["no answer"] = true
				if !r.Ambiguous(callTimeout) {
					t.Errorf("%s intent %d got no answer (%v) but its wire record %+v is not ambiguous", c.kind, id, err, r)
				}
			}
		}
		if !seen["no answer"] || !seen["500"] || !seen["429"] {
			t.Errorf("%s: the faults showed only %v; want lost answers, 500s and 429s among 12 requests", c.kind, seen)
		}
	}

	// The doubles' own records are served as they are, with effects per intent.
	var stats struct {
		EffectsByIntent map[string]int `json:"effects_by_intent"`
	}
	resp, err := http.Get(a.SendGridURL + "/_double/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		t.Fatal(err)
	}
	if len(stats.EffectsByIntent) == 0 {
		t.Fatalf("SendGrid /_double/stats has no effects by intent: %+v", stats)
	}
}

// waitWire polls the wire log until it holds a record for intent id (a
// handler whose client went away records when it returns) and, when
// answered, until the request sent last has its answer; it returns that
// intent's records in the order they were sent.
func waitWire(t *testing.T, base string, id int64, answered bool) []chaos.WireRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var recs []chaos.WireRecord
		for _, r := range wire(t, base) {
			if r.IntentID == id {
				recs = append(recs, r)
			}
		}
		// The log is in the order the requests ended; the client saw the
		// answer to the one it sent last. A dropped request can end after
		// the retry that followed it.
		sort.SliceStable(recs, func(i, j int) bool { return recs[i].Start.Before(recs[j].Start) })
		if len(recs) > 0 && (!answered || recs[len(recs)-1].Status != 0) {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wire log at %s has no record for intent %d (answered: %v) after 10s: %+v", base, id, answered, recs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServeDoublesRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []chaos.DoublesConfig{{FaultRate: 1.5}, {FaultRate: -1}, {FaultRate: 0.2}} {
		if err := chaos.ServeDoubles(context.Background(), cfg, func(chaos.DoublesAddrs) {}); err == nil {
			t.Errorf("ServeDoubles(%+v) = nil, want an error", cfg)
		}
	}
}
