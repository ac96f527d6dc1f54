package amqpprovider_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/amqpprovider"
	"github.com/outboxkit/outbox/providers/providertest"
)

// queueDouble is a throwaway queue on the real broker, standing where the
// HTTP adapters have a double: the adapter publishes to it through the
// default exchange, and every message that arrived is an effect, tied to
// its intent by the HeaderIntentID header.
type queueDouble struct {
	t     *testing.T
	queue string
	ch    *amqp.Channel
	// arrived keeps what was taken off the queue: a message is counted
	// again on every call, and a get removes it.
	arrived []amqp.Delivery
}

func newQueueDouble(t *testing.T) *queueDouble {
	t.Helper()
	queue := testkit.Rabbit(t).DeclareQueue(testkit.UniqueName(t, "conformance"))
	conn, err := amqp.Dial(testkit.RabbitURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	return &queueDouble{t: t, queue: queue, ch: ch}
}

func (d *queueDouble) URL() string { return testkit.RabbitURL() }

// EffectsFor drains the queue and counts the messages for intentID. A
// confirmed message is already in the queue, so the count is exact once
// Perform has returned.
func (d *queueDouble) EffectsFor(intentID int64) int {
	d.t.Helper()
	for {
		m, ok, err := d.ch.Get(d.queue, true)
		if err != nil {
			d.t.Fatalf("get from %s: %v", d.queue, err)
		}
		if !ok {
			break
		}
		d.arrived = append(d.arrived, m)
	}
	n := 0
	for _, m := range d.arrived {
		if m.Headers[amqpprovider.HeaderIntentID] == intentID {
			n++
		}
	}
	return n
}

// conformancePayload is a message routed to queue whose headers and body
// hold values Redact must hide.
func conformancePayload(queue string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"routing_key":%q,
		"body":{"order":"42","customer":{"email":"jane.doe@example.com","phone":"+15550100"}},
		"headers":{"authorization":"Bearer tok_conformance_secret","trace-id":"t-1"}}`, queue))
}

func TestConformance(t *testing.T) {
	t.Parallel()
	// No queue is declared under this name: the broker returns the
	// mandatory message, and a repeat would be returned again.
	unroutable := testkit.UniqueName(t, "nobody")
	long := strings.Repeat("k", amqpprovider.MaxNameLength+1)
	providertest.Run(t, providertest.Harness{
		NewDouble: func(t *testing.T) providertest.Double { return newQueueDouble(t) },
		NewProvider: func(t *testing.T, url string) providers.Provider {
			return newProvider(t, amqpprovider.Config{URL: url})
		},
		Unreachable: "amqp://guest:guest@127.0.0.1:1/",
		// RabbitMQ answers no HTTP and cannot be asked what it holds; the
		// lost confirm and the nack are this package's own tests.
		Features:     providertest.Features{RejectsPayload: true},
		Kind:         amqpprovider.KindPublish,
		ValidPayload: conformancePayload("conformance"),
		ValidPayloadFor: func(d providertest.Double) json.RawMessage {
			return conformancePayload(d.(*queueDouble).queue)
		},
		InvalidPayloads: map[string]string{
			`{"routing_key":"k","body":{},"extra":1}`: "extra",
			`{"body":{}}`:                                                        "routing_key",
			`{"routing_key":"","body":{}}`:                                       "routing_key",
			`{"routing_key":"` + long + `","body":{}}`:                           "routing_key",
			`{"exchange":"` + long + `","routing_key":"k","body":{}}`:            "exchange",
			`{"routing_key":"k"}`:                                                "body",
			`{"routing_key":"k","body":null}`:                                    "body",
			`{"routing_key":"k","body":{},"content_type":"not a type"}`:          "content_type",
			`{"routing_key":"k","body":{"a":1},"content_type":"text/plain"}`:     "body",
			`{"routing_key":"k","body":{},"headers":{"x-outbox-intent-id":"1"}}`: "headers.x-outbox-intent-id",
			`{"routing_key":"k","body":{},"headers":{"":"v"}}`:                   "headers",
			`{"routing_key":"k","body":{},"headers":{"a":1}}`:                    "headers",
			`{"routing_key":"k","body":{},"persistent":"yes"}`:                   "persistent",
			`{"routing_key":5,"body":{}}`:                                        "routing_key",
		},
		RejectedPayload: json.RawMessage(fmt.Sprintf(`{"routing_key":%q,"body":{}}`, unroutable)),
		SensitiveValues: []string{"jane.doe@example.com", "+15550100", "tok_conformance_secret"},
	})
}
