package webhookprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/webhookprovider"
	"github.com/outboxkit/outbox/providers/webhookprovider/webhookdouble"
)

// Deliver one event twice with the same key to a receiver that honours
// Idempotency-Key: the second attempt is answered from the receiver's store,
// so it acts once.
func Example() {
	receiver, err := webhookdouble.NewServer(webhookdouble.Config{Secret: "whsec_example", IdempotencyHeader: "Idempotency-Key"})
	if err != nil {
		log.Fatal(err)
	}
	defer receiver.Close()

	p, err := webhookprovider.New(webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{
		"billing": {
			URL:               receiver.URL() + "/hooks/billing",
			Secret:            "whsec_example", // load it with secret.Load in real code
			IdempotencyHeader: "Idempotency-Key",
			KeyWindow:         24 * time.Hour,
		},
	}})
	if err != nil {
		log.Fatal(err)
	}
	req := providers.Request{
		IntentID:       42,
		IdempotencyKey: "billing-consumer:msg-42",
		Kind:           webhookprovider.KindPost,
		Payload:        json.RawMessage(`{"endpoint": "billing", "event": "invoice.paid", "data": {"invoice": "in_42"}}`),
	}
	for attempt := 1; attempt <= 2; attempt++ {
		req.Attempt = attempt
		res, err := p.Perform(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("attempt %d: HTTP %d, replayed %v\n", attempt, res.HTTPStatus, res.Replayed)
	}
	fmt.Println("deliveries acted on for intent 42:", receiver.EffectsFor(42))
	// Output:
	// attempt 1: HTTP 200, replayed false
	// attempt 2: HTTP 200, replayed true
	// deliveries acted on for intent 42: 1
}

// A receiver checks the signature on the raw body before it decodes or acts
// on anything, and answers 401 when it does not verify.
func ExampleVerify() {
	const secret = "whsec_example"
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "cannot read body", http.StatusBadRequest)
			return
		}
		if err := webhookprovider.Verify(secret, r.Header.Get(webhookprovider.SignatureHeader), body, 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var event struct {
			ID    string          `json:"id"` // the idempotency key: deduplicate on it
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &event); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		fmt.Printf("verified %s %s %s\n", event.ID, event.Event, event.Data)
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(handler)
	defer srv.Close()

	p, err := webhookprovider.New(webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{
		"notes": {URL: srv.URL, Secret: secret},
	}})
	if err != nil {
		log.Fatal(err)
	}
	res, err := p.Perform(context.Background(), providers.Request{
		IntentID: 1, IdempotencyKey: "notes:msg-1", Kind: webhookprovider.KindPost,
		Payload: json.RawMessage(`{"endpoint": "notes", "event": "note.created", "data": {"id": 1}}`),
	})
	fmt.Println(res.ProviderRef, err)

	forged, _ := http.Post(srv.URL, "application/json", nil)
	fmt.Println("unsigned request:", forged.StatusCode)
	forged.Body.Close()
	// Output:
	// verified notes:msg-1 note.created {"id":1}
	// status:204 <nil>
	// unsigned request: 401
}
