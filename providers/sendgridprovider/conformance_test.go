package sendgridprovider_test

import (
	"encoding/json"
	"testing"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/providertest"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

const validPayload = `{
	"from": {"email": "shop@example.com", "name": "The Shop"},
	"to": [{"email": "alice.smith@example.com", "name": "Alice Smith"}],
	"cc": [{"email": "bob.jones@example.org"}],
	"subject": "Your order has shipped",
	"text": "Hello Alice, order 1234 is on its way.",
	"html": "<p>Hello Alice, order 1234 is on its way.</p>",
	"categories": ["orders"],
	"custom_args": {"order_id": "1234", "session_token": "tok_live_secret"}
}`

func newDouble(t *testing.T) *sendgriddouble.Server {
	t.Helper()
	s, err := sendgriddouble.NewServer(sendgriddouble.Config{})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func harness(reconcile bool) providertest.Harness {
	return harnessFor(reconcile, validPayload, "alice.smith@example.com", "bob.jones@example.org", "Alice Smith", "order 1234 is on its way", "tok_live_secret")
}

// harnessFor is the suite's harness for one valid payload, whose sensitive
// values Redact must hide.
func harnessFor(reconcile bool, valid string, sensitive ...string) providertest.Harness {
	return providertest.Harness{
		NewDouble: func(t *testing.T) providertest.Double { return newDouble(t) },
		NewProvider: func(t *testing.T, baseURL string) providers.Provider {
			p, err := sendgridprovider.New(sendgridprovider.Config{
				APIKey:    sendgriddouble.DefaultAPIKey,
				BaseURL:   baseURL,
				Reconcile: reconcile,
			})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return p
		},
		Features: providertest.Features{
			HTTPFaults: true,
			Reconciles: reconcile,
			// The activity feed is eventually consistent: it never proves
			// an email absent.
			ProvesAbsence:  false,
			RejectsPayload: true,
		},
		Kind:         sendgridprovider.KindEmail,
		ValidPayload: json.RawMessage(valid),
		InvalidPayloads: map[string]string{
			`{"from":{"email":""},"to":[{"email":"a@example.com"}],"subject":"s","text":"t"}`:                                                                                           "from.email",
			`{"from":{"email":"not-an-address"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t"}`:                                                                             "from.email",
			`{"from":{"email":"s@example.com"},"to":[],"subject":"s","text":"t"}`:                                                                                                       "to",
			`{"from":{"email":"s@example.com"},"subject":"s","text":"t"}`:                                                                                                               "to",
			`{"from":{"email":"s@example.com"},"to":[{"email":"Alice <a@example.com>"}],"subject":"s","text":"t"}`:                                                                      "to[0].email",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"subject":"","text":"t"}`:                                                                               "subject",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"subject":"s"}`:                                                                                         "text",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t","custom_args":{"intent_id":"9"}}`:                                              "custom_args.intent_id",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"bcc":[{"email":"A@example.com"}],"subject":"s","text":"t"}`:                                            "bcc[0].email",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t","categories":["1","2","3","4","5","6","7","8","9","10","11"]}`:                 "categories",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"template_id":"legacy-1234"}`:                                                                           "template_id",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"template_id":"d-1234","text":"t"}`:                                                                     "text",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t","dynamic_template_data":{"a":"b"}}`:                                            "dynamic_template_data",
			`{"from":{"email":"s@example.com"},"template_id":"d-1234","personalizations":[{"to":[{"email":"a@example.com"}]},{"bcc":[{"email":"b@example.com"}]}]}`:                     "personalizations[1].to",
			`{"from":{"email":"s@example.com"},"template_id":"d-1234","personalizations":[{"to":[{"email":"a@example.com"}]},{"to":[{"email":"A@example.com"}]}]}`:                      "personalizations[1].to[0].email",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t","attachments":[{"content":"%%%","filename":"a.pdf"}]}`:                         "attachments[0].content",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t","attachments":[{"content":"aGk="}]}`:                                           "attachments[0].filename",
			`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t","attachments":[{"content":"aGk=","filename":"a.png","disposition":"inline"}]}`: "attachments[0].content_id",
		},
		RejectedPayload: json.RawMessage(`{"from":{"email":"` + sendgriddouble.UnverifiedSender + `"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t"}`),
		SensitiveValues: sensitive,
		RecordedMetadata: func(d providertest.Double) []map[string]string {
			var out []map[string]string
			for _, e := range d.(*sendgriddouble.Server).Emails() {
				out = append(out, e.CustomArgs)
			}
			return out
		},
	}
}

func TestConformance(t *testing.T) {
	providertest.Run(t, harness(false))
}

func TestConformanceWithReconcile(t *testing.T) {
	providertest.Run(t, harness(true))
}

// TestConformanceTemplated runs the suite with a dynamic template, its data
// at the top and per personalization, several personalizations and
// attachments.
func TestConformanceTemplated(t *testing.T) {
	sensitive := []string{receiptPDF, logoPNG, "Hi team", "Dear Dora", "ann@example.com", "carol@example.org", "audit@example.com", "Dora Diaz"}
	providertest.Run(t, harnessFor(true, receiptEmail, sensitive...))
}
