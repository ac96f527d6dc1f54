package sendgridprovider_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

const templateID = "d-4ad23ad40a0e47d0a0232b85f24ca5c2"

var (
	receiptPDF = base64.StdEncoding.EncodeToString([]byte("%PDF-1.4 receipt for order 1234"))
	logoPNG    = base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n logo"))
)

// receiptEmail is one intent with two personalizations: 2 to + 1 cc, and
// 1 to + 1 bcc; five emails at SendGrid.
var receiptEmail = `{
	"from": {"email": "shop@example.com", "name": "The Shop"},
	"template_id": "` + templateID + `",
	"dynamic_template_data": {"order": "1234", "greeting": "Hello", "total": {"amount": 1200, "currency": "usd"}},
	"personalizations": [
		{"to": [{"email": "ann@example.com", "name": "Ann"}, {"email": "bob@example.com"}],
		 "cc": [{"email": "carol@example.org"}],
		 "dynamic_template_data": {"greeting": "Hi team"}},
		{"to": [{"email": "dora@example.net", "name": "Dora Diaz"}],
		 "bcc": [{"email": "audit@example.com"}],
		 "dynamic_template_data": {"greeting": "Dear Dora", "total": {"amount": 1500, "currency": "eur"}}}
	],
	"attachments": [
		{"content": "` + receiptPDF + `", "filename": "receipt-1234.pdf", "type": "application/pdf"},
		{"content": "` + logoPNG + `", "filename": "logo.png", "type": "image/png", "disposition": "inline", "content_id": "logo"}
	],
	"categories": ["receipts"]
}`

// TestTemplatedEmailReachesEveryRecipient: one intent, two
// personalizations, five recipients. The double counts five emails (one
// request, one effect of the intent), each rendered with its
// personalization's data over the top-level data, each with both files.
func TestTemplatedEmailReachesEveryRecipient(t *testing.T) {
	t.Parallel()
	d := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: d.URL()})
	if err := p.Validate(sendgridprovider.KindEmail, json.RawMessage(receiptEmail)); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	res, ae := perform(t, p, request(77, receiptEmail))
	if ae != nil {
		t.Fatalf("Perform: %v", ae)
	}
	if got := d.DeliveriesFor(77); got != 5 {
		t.Fatalf("the double sent %d emails for the intent, want 5", got)
	}
	if got := d.EffectsFor(77); got != 1 {
		t.Fatalf("the double accepted %d requests for the intent, want 1", got)
	}
	if st := d.Stats(); st.Emails != 1 || st.Deliveries != 5 {
		t.Fatalf("stats %+v", st)
	}
	team := map[string]any{"order": "1234", "greeting": "Hi team", "total": map[string]any{"amount": 1200.0, "currency": "usd"}}
	dora := map[string]any{"order": "1234", "greeting": "Dear Dora", "total": map[string]any{"amount": 1500.0, "currency": "eur"}}
	want := map[string]struct {
		personalization int
		field           string
		data            map[string]any
	}{
		"ann@example.com":   {0, "to", team},
		"bob@example.com":   {0, "to", team},
		"carol@example.org": {0, "cc", team},
		"dora@example.net":  {1, "to", dora},
		"audit@example.com": {1, "bcc", dora},
	}
	for _, del := range d.Deliveries() {
		w, ok := want[del.Recipient]
		if !ok {
			t.Errorf("email to %s, not a recipient", del.Recipient)
			continue
		}
		delete(want, del.Recipient)
		if del.MessageID != res.ProviderRef || del.TemplateID != templateID || del.Personalization != w.personalization || del.Field != w.field {
			t.Errorf("%s: %+v", del.Recipient, del)
		}
		if got := del.Data(); !reflect.DeepEqual(got, w.data) {
			t.Errorf("%s's template data = %v, want %v", del.Recipient, got, w.data)
		}
		if !reflect.DeepEqual(del.Attachments, []string{"receipt-1234.pdf", "logo.png"}) {
			t.Errorf("%s's attachments = %v", del.Recipient, del.Attachments)
		}
	}
	if len(want) != 0 {
		t.Errorf("no email to %v", want)
	}
}

// TestTemplateDataOnlyAtTheTop: without per-personalization data, every
// personalization gets the top-level data (SendGrid has no top-level data
// of its own: the adapter must copy it).
func TestTemplateDataOnlyAtTheTop(t *testing.T) {
	t.Parallel()
	d := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: d.URL()})
	payload := `{"from":{"email":"shop@example.com"},"template_id":"` + templateID + `","subject":"Your receipt",
		"to":[{"email":"a@example.com"}],"cc":[{"email":"b@example.com"}],"dynamic_template_data":{"name":"Ann"}}`
	if _, ae := perform(t, p, request(5, payload)); ae != nil {
		t.Fatal(ae)
	}
	dels := d.Deliveries()
	if len(dels) != 2 {
		t.Fatalf("%d emails", len(dels))
	}
	for _, del := range dels {
		if got := del.Data(); !reflect.DeepEqual(got, map[string]any{"name": "Ann"}) {
			t.Errorf("%s: data %v", del.Recipient, got)
		}
	}
	if e := d.Emails()[0]; e.Subject != "Your receipt" || e.TemplateID != templateID {
		t.Errorf("email %+v", e)
	}
}

func TestValidateTemplatesAttachmentsPersonalizations(t *testing.T) {
	t.Parallel()
	d := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: d.URL()})
	from := `"from":{"email":"shop@example.com"}`
	tmpl := from + `,"template_id":"` + templateID + `"`
	plain := from + `,"subject":"s","text":"t"`
	one := `"to":[{"email":"a@example.com"}]`
	att := func(fields string) string { return plain + `,` + one + `,"attachments":[` + fields + `]` }
	var many []string
	for i := 0; i < sendgridprovider.MaxRecipients; i++ {
		many = append(many, fmt.Sprintf(`{"to":[{"email":"r%d@example.com"}]}`, i))
	}
	tooMany := strings.Join(many, ",") + `,{"to":[{"email":"one-more@example.com"}]}`
	// {"k":"…"} is 8 bytes of JSON around the value: data(n) is n bytes.
	data := func(n int) string { return `{"k":"` + strings.Repeat("x", n-8) + `"}` }
	refused := map[string]string{
		// templates
		`{` + from + `,"template_id":"12345678-1234-1234-1234-123456789012",` + one + `}`:                          "template_id",
		`{` + from + `,"template_id":"d-",` + one + `}`:                                                            "template_id",
		`{` + from + `,"template_id":"d-abc def",` + one + `}`:                                                     "template_id",
		`{` + tmpl + `,"text":"ignored",` + one + `}`:                                                              "text",
		`{` + tmpl + `,"html":"<p>ignored</p>",` + one + `}`:                                                       "html",
		`{` + tmpl + `,"subject":" ",` + one + `}`:                                                                 "subject",
		`{` + plain + `,` + one + `,"dynamic_template_data":{"a":1}}`:                                              "dynamic_template_data",
		`{` + plain + `,"personalizations":[{"to":[{"email":"a@example.com"}],"dynamic_template_data":{"a":1}}]}`:  "personalizations[0].dynamic_template_data",
		`{` + tmpl + `,` + one + `,"dynamic_template_data":["not","an","object"]}`:                                 "dynamic_template_data",
		`{` + tmpl + `,` + one + `,"dynamic_template_data":` + data(sendgridprovider.MaxTemplateDataBytes+1) + `}`: "dynamic_template_data",
		`{` + tmpl + `,"personalizations":[{"to":[{"email":"a@example.com"}]},{"to":[{"email":"b@example.com"}],"dynamic_template_data":` + data(sendgridprovider.MaxTemplateDataBytes+1) + `}]}`: "personalizations[1].dynamic_template_data",
		// personalizations
		`{` + tmpl + `,` + one + `,"personalizations":[{"to":[{"email":"b@example.com"}]}]}`:                                                         "to",
		`{` + tmpl + `,"bcc":[{"email":"x@example.com"}],"personalizations":[{"to":[{"email":"b@example.com"}]}]}`:                                   "bcc",
		`{` + tmpl + `,"personalizations":[{"to":[{"email":"a@example.com"}]},{"cc":[{"email":"b@example.com"}]}]}`:                                  "personalizations[1].to",
		`{` + tmpl + `,"personalizations":[{"to":[{"email":"a@example.com"}]},{"to":[{"email":"b@example.com"}],"cc":[{"email":"A@example.com"}]}]}`: "personalizations[1].cc[0].email",
		`{` + tmpl + `,"personalizations":[{"to":[{"email":"a@example.com"}],"bcc":[{"email":"a@example.com"}]}]}`:                                   "personalizations[0].bcc[0].email",
		`{` + tmpl + `,"personalizations":[{"to":[{"email":"a@example.com"}]},{"to":[{"email":"Bob <b@example.com>"}]}]}`:                            "personalizations[1].to[0].email",
		`{` + tmpl + `,"personalizations":[{"to":[{"email":"a@example.com"}],"cc":[{"email":"c@example.com","name":"Doe, Jane"}]}]}`:                 "personalizations[0].cc[0].name",
		`{` + tmpl + `,"personalizations":[` + tooMany + `]}`:                                                                                        "personalizations",
		// attachments
		`{` + att(`{"content":"","filename":"a.pdf"}`) + `}`:                                                    "attachments[0].content",
		`{` + att(`{"filename":"a.pdf"}`) + `}`:                                                                 "attachments[0].content",
		`{` + att(`{"content":"not base64!","filename":"a.pdf"}`) + `}`:                                         "attachments[0].content",
		`{` + att(`{"content":"aGVsbG8","filename":"a.pdf"}`) + `}`:                                             "attachments[0].content",
		`{` + att(`{"content":"aGVs\nbG8=","filename":"a.pdf"}`) + `}`:                                          "attachments[0].content",
		`{` + att(`{"content":"aGVsbG8=","filename":"a.pdf"},{"content":"aGVsbG8="}`) + `}`:                     "attachments[1].filename",
		`{` + att(`{"content":"aGVsbG8=","filename":"a;b.pdf"}`) + `}`:                                          "attachments[0].filename",
		`{` + att(`{"content":"aGVsbG8=","filename":"a.pdf\r\nX-Evil: 1"}`) + `}`:                               "attachments[0].filename",
		`{` + att(`{"content":"aGVsbG8=","filename":"a.pdf","type":"application/pdf; name=a"}`) + `}`:           "attachments[0].type",
		`{` + att(`{"content":"aGVsbG8=","filename":"a.pdf","type":"pdf"}`) + `}`:                               "attachments[0].type",
		`{` + att(`{"content":"aGVsbG8=","filename":"a.pdf","disposition":"embedded"}`) + `}`:                   "attachments[0].disposition",
		`{` + att(`{"content":"aGVsbG8=","filename":"a.png","disposition":"inline"}`) + `}`:                     "attachments[0].content_id",
		`{` + att(`{"content":"aGVsbG8=","filename":"a.png","disposition":"inline","content_id":"a\nb"}`) + `}`: "attachments[0].content_id",
	}
	for payload, field := range refused {
		err := p.Validate(sendgridprovider.KindEmail, json.RawMessage(payload))
		var pe *providers.PayloadError
		if !errors.As(err, &pe) || pe.Field != field || pe.Reason == "" {
			t.Errorf("Validate(%.120s) = %v, want a PayloadError naming %q", payload, err, field)
			continue
		}
		if _, ae := perform(t, p, request(1, payload)); ae == nil || ae.Outcome != providers.OutcomeFailed || !ae.DidNotAct || ae.HTTPStatus != 0 {
			t.Errorf("Perform(%.120s) = %v", payload, ae)
		}
	}
	if st := d.Stats(); st.Requests != 0 {
		t.Fatalf("refused payloads reached the double: %+v", st)
	}
	// The limits themselves, and what a template makes optional.
	accepted := []string{
		`{` + tmpl + `,` + one + `}`,
		`{` + tmpl + `,"subject":"Fallback subject",` + one + `,"dynamic_template_data":{"items":[{"sku":"A","qty":2}],"vip":true,"note":null}}`,
		`{` + tmpl + `,"personalizations":[` + strings.Join(many, ",") + `]}`,
		`{` + tmpl + `,` + one + `,"dynamic_template_data":` + data(sendgridprovider.MaxTemplateDataBytes) + `}`,
		`{` + tmpl + `,"personalizations":[{"to":[{"email":"a@example.com"}]},{"to":[{"email":"b@example.com"}],"dynamic_template_data":{"x":"y"}}]}`,
		`{` + att(`{"content":"aGVsbG8=","filename":"a.pdf"},{"content":"aGk=","filename":"logo.png","type":"image/png","disposition":"inline","content_id":"logo"}`) + `}`,
		`{` + att(`{"content":"aGVsbG8=","filename":"notes.txt","type":"text/plain","disposition":"attachment"}`) + `}`,
	}
	for _, payload := range accepted {
		if err := p.Validate(sendgridprovider.KindEmail, json.RawMessage(payload)); err != nil {
			t.Errorf("Validate(%.120s) = %v", payload, err)
			continue
		}
		if _, ae := perform(t, p, request(2, payload)); ae != nil {
			t.Errorf("Perform(%.120s) = %v: the double refused what Validate accepted", payload, ae)
		}
	}
}

// TestMessageSizeLimit: SendGrid takes less than 30MB per email,
// attachments included. Validate (which Perform runs first) refuses a
// payload whose request would reach it, naming the attachments; see also
// TestCheckSizeKeepsRoomForTheIdentity.
func TestMessageSizeLimit(t *testing.T) {
	t.Parallel()
	d := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: d.URL()})
	withFile := func(rawBytes int) string {
		content := base64.StdEncoding.EncodeToString(make([]byte, rawBytes))
		return email(`,"attachments":[{"content":"` + content + `","filename":"big.bin"}]`)
	}
	over := email(`,"attachments":[{"content":"` + strings.Repeat("A", sendgridprovider.MaxMessageBytes) + `","filename":"big.bin"}]`)
	err := p.Validate(sendgridprovider.KindEmail, json.RawMessage(over))
	var pe *providers.PayloadError
	if !errors.As(err, &pe) || pe.Field != "attachments" || !strings.Contains(pe.Reason, "30MB") {
		t.Fatalf("Validate(30MB attachment) = %v", err)
	}
	under := withFile(1 << 20)
	if _, ae := perform(t, p, request(2, under)); ae != nil {
		t.Fatalf("Perform(1.4MB request) = %v", ae)
	}
	if dels := d.Deliveries(); len(dels) != 1 || dels[0].Attachments[0] != "big.bin" {
		t.Fatalf("deliveries %+v", dels)
	}
}

func TestRedactTemplatedEmail(t *testing.T) {
	t.Parallel()
	p := newProvider(t, sendgridprovider.Config{})
	redacted := string(p.Redact(sendgridprovider.KindEmail, json.RawMessage(receiptEmail)))
	for _, secret := range []string{
		receiptPDF, logoPNG, "Hi team", "Dear Dora", "1500", `"1234"`,
		"ann@example.com", "bob@example.com", "carol@example.org", "dora@example.net", "audit@example.com", "Dora Diaz",
	} {
		if strings.Contains(redacted, secret) {
			t.Errorf("Redact left %q in %s", secret, redacted)
		}
	}
	var view struct {
		TemplateID          string            `json:"template_id"`
		DynamicTemplateData map[string]string `json:"dynamic_template_data"`
		Personalizations    []struct {
			To                  []sendgridprovider.Address `json:"to"`
			DynamicTemplateData map[string]string          `json:"dynamic_template_data"`
		} `json:"personalizations"`
		Attachments []sendgridprovider.Attachment `json:"attachments"`
	}
	if err := json.Unmarshal([]byte(redacted), &view); err != nil {
		t.Fatalf("redacted payload %s: %v", redacted, err)
	}
	if view.TemplateID != templateID || len(view.Personalizations) != 2 || view.Personalizations[1].To[0].Email != "d***@example.net" {
		t.Errorf("redacted view %+v", view)
	}
	// The template's variable names stay, their values go.
	if got := view.DynamicTemplateData; len(got) != 3 || got["order"] != "[redacted 6 bytes]" || !strings.HasPrefix(got["total"], "[redacted ") {
		t.Errorf("top-level data %v", got)
	}
	if got := view.Personalizations[1].DynamicTemplateData["greeting"]; got != "[redacted 11 bytes]" {
		t.Errorf("personalization data %q", got)
	}
	pdf := sendgridprovider.Attachment{Content: "[redacted 31 bytes]", Filename: "receipt-1234.pdf", Type: "application/pdf"}
	if len(view.Attachments) != 2 || view.Attachments[0] != pdf || view.Attachments[1].Filename != "logo.png" || view.Attachments[1].ContentID != "logo" {
		t.Errorf("attachments %+v", view.Attachments)
	}
}

// TestReconcileSeveralPersonalizations: SendGrid accepts or refuses a
// request whole, so after an ambiguous attempt any email of the intent's
// key proves it performed; an email under the key to other recipients is a
// mismatch, never adopted.
func TestReconcileSeveralPersonalizations(t *testing.T) {
	t.Parallel()
	d := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: d.URL(), Reconcile: true})
	req := nsRequest("ns-a", 9, receiptEmail)
	d.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 500})
	if _, ae := perform(t, p, req); ae == nil || ae.Outcome != providers.OutcomeAmbiguous {
		t.Fatalf("attempt: %v", ae)
	}
	if got := d.DeliveriesFor(9); got != 5 {
		t.Fatalf("the double sent %d emails", got)
	}
	res, found, err := p.Reconcile(context.Background(), req)
	if err != nil || !found || res.ProviderRef != d.Emails()[0].MessageID {
		t.Fatalf("Reconcile = %+v, %v, %v", res, found, err)
	}
	// The same key, but a payload whose recipients received nothing.
	other := req
	other.Payload = json.RawMessage(`{"from":{"email":"shop@example.com"},"template_id":"` + templateID + `",
		"personalizations":[{"to":[{"email":"zed@example.com"}]},{"to":[{"email":"yan@example.com"}]}]}`)
	_, found, err = p.Reconcile(context.Background(), other)
	var mismatch *providers.MismatchError
	if found || !errors.As(err, &mismatch) || mismatch.Field != "recipient" || mismatch.Want != "z***@example.com" {
		t.Fatalf("Reconcile(other recipients) = %v, %v", found, err)
	}
}

// TestDocumentedPayloadExample keeps docs/adapters.md's sendgrid.email
// example true: it validates, and it is the five emails the page says.
func TestDocumentedPayloadExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/adapters.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## The `sendgrid.email` payload")
	_, block, ok2 := strings.Cut(section, "```json\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/adapters.md has no sendgrid.email payload example")
	}
	d := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: d.URL()})
	if err := p.Validate(sendgridprovider.KindEmail, json.RawMessage(block)); err != nil {
		t.Fatalf("docs/adapters.md's example: %v", err)
	}
	if _, ae := perform(t, p, request(3, block)); ae != nil {
		t.Fatal(ae)
	}
	if n := d.DeliveriesFor(3); n != 5 {
		t.Fatalf("docs/adapters.md's example is %d emails, it says five", n)
	}
}
