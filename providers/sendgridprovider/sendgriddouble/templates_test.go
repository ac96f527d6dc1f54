package sendgriddouble_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/sendgrid/sendgrid-go/helpers/mail"

	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

const tmplID = "d-4ad23ad40a0e47d0a0232b85f24ca5c2"

// TestOneDeliveryPerRecipient: a request is one email per recipient of
// every personalization, each rendered with its own personalization's
// dynamic_template_data only; a top-level dynamic_template_data is not
// SendGrid's and is not read.
func TestOneDeliveryPerRecipient(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	b := []byte(`{"from":{"email":"shop@example.com"},"template_id":"` + tmplID + `",
		"dynamic_template_data":{"shared":"never read"},
		"custom_args":{"intent_id":"4"},
		"personalizations":[
			{"to":[{"email":"a@example.com"},{"email":"b@example.com"}],"cc":[{"email":"c@example.com"}],"dynamic_template_data":{"name":"Team","n":1}},
			{"to":[{"email":"d@example.com"}],"bcc":[{"email":"e@example.com"}],"custom_args":{"intent_id":"5"}}],
		"attachments":[{"content":"aGVsbG8=","filename":"a.pdf","type":"application/pdf"},{"content":"aGk=","filename":"logo.png","disposition":"inline","content_id":"logo"}]}`)
	resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, b)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %v %v", resp, err)
	}
	id := http.Header(resp.Headers).Get("X-Message-Id")
	type row struct {
		p                       int
		field, to, intent, data string
	}
	var got []row
	for _, d := range s.Deliveries() {
		if d.MessageID != id || d.TemplateID != tmplID || !reflect.DeepEqual(d.Attachments, []string{"a.pdf", "logo.png"}) {
			t.Errorf("delivery %+v", d)
		}
		got = append(got, row{d.Personalization, d.Field, d.Recipient, d.IntentID, string(d.DynamicTemplateData)})
	}
	want := []row{
		{0, "to", "a@example.com", "4", `{"n":1,"name":"Team"}`},
		{0, "to", "b@example.com", "4", `{"n":1,"name":"Team"}`},
		{0, "cc", "c@example.com", "4", `{"n":1,"name":"Team"}`},
		{1, "to", "d@example.com", "5", ""},
		{1, "bcc", "e@example.com", "5", ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("deliveries\n got %v\nwant %v", got, want)
	}
	if s.DeliveriesFor(4) != 3 || s.DeliveriesFor(5) != 2 || s.Stats().Deliveries != 5 || s.Stats().Emails != 1 {
		t.Fatalf("counts: %d %d %+v", s.DeliveriesFor(4), s.DeliveriesFor(5), s.Stats())
	}
	if e := s.Emails()[0]; e.TemplateID != tmplID || len(e.Deliveries) != 5 || !reflect.DeepEqual(e.Attachments, []string{"a.pdf", "logo.png"}) {
		t.Fatalf("email %+v", e)
	}
	// An email built with sendgrid-go's helpers reaches the same records.
	m := mail.NewV3Mail()
	m.SetFrom(mail.NewEmail("Shop", "shop@example.com"))
	m.SetTemplateID(tmplID)
	p := mail.NewPersonalization()
	p.AddTos(mail.NewEmail("Jo", "jo@example.com"))
	p.SetDynamicTemplateData("order", map[string]any{"id": "42"})
	m.AddPersonalizations(p)
	if resp := send(t, s, m); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("SDK email: %d %s", resp.StatusCode, resp.Body)
	}
	last := s.Deliveries()[5]
	if last.Recipient != "jo@example.com" || !reflect.DeepEqual(last.Data(), map[string]any{"order": map[string]any{"id": "42"}}) {
		t.Fatalf("SDK delivery %+v", last)
	}
}

// TestActivityRowsFollowPersonalizationArgs: the feed lists a recipient
// under the custom_args of its own personalization.
func TestActivityRowsFollowPersonalizationArgs(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	b := []byte(`{"from":{"email":"shop@example.com"},"subject":"s","content":[{"type":"text/plain","value":"t"}],
		"custom_args":{"outbox_key":"k"},
		"personalizations":[{"to":[{"email":"a@example.com"}],"custom_args":{"group":"1"}},{"to":[{"email":"b@example.com"}],"cc":[{"email":"c@example.com"}],"custom_args":{"group":"2"}}]}`)
	if resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, b); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %v %v", resp, err)
	}
	for q, want := range map[string][]string{
		`unique_args['outbox_key']="k"`:                              {"a@example.com", "b@example.com", "c@example.com"},
		`unique_args['outbox_key']="k" AND unique_args['group']="2"`: {"b@example.com", "c@example.com"},
		`unique_args['group']="1"`:                                   {"a@example.com"},
	} {
		rows := activity(t, s, q)
		var got []string
		for _, r := range rows {
			got = append(got, r.ToEmail)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("query %s: rows for %v, want %v", q, got, want)
		}
	}
}

func activity(t *testing.T, s *sendgriddouble.Server, query string) []sendgriddouble.ActivityMessage {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"/v3/messages?limit=100&query="+url.QueryEscape(query), nil)
	req.Header.Set("Authorization", "Bearer "+sendgriddouble.DefaultAPIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body sendgriddouble.ActivityResponse
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("activity %s: %d %v", query, resp.StatusCode, err)
	}
	return body.Messages
}

// TestRefusesBadTemplatesAndAttachments: SendGrid's 400s, with its
// messages and field names, and nothing sent.
func TestRefusesBadTemplatesAndAttachments(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	att := func(a string) []byte { return body(onePersonalization, `,"attachments":[`+a+`]`) }
	noContent := func(extra string) []byte {
		return []byte(`{"personalizations":` + onePersonalization + `,"from":{"email":"shop@example.com"}` + extra + `}`)
	}
	for _, tc := range []struct {
		name  string
		body  []byte
		field string
		says  string
	}{
		{"UnknownTemplate", noContent(`,"template_id":"` + sendgriddouble.UnknownTemplateID + `"`), "template_id", "must be a valid template id for your account"},
		{"LegacyTemplate", noContent(`,"template_id":"12345678-1234-1234-1234-123456789012"`), "template_id", "valid template id"},
		{"NoTemplateNoContent", noContent(`,"subject":"s"`), "content", "template_id"},
		{"EmptyContent", att(`{"content":"","filename":"a.pdf"}`), "attachments.0.content", "at least one character"},
		{"NotBase64", att(`{"content":"not base64!","filename":"a.pdf"}`), "attachments.0.content", "must be base64 encoded"},
		{"Base64WithLineBreaks", att(`{"content":"aGVs\nbG8=","filename":"a.pdf"}`), "attachments.0.content", "must be base64 encoded"},
		{"NoFilename", att(`{"content":"aGVsbG8="},{"content":"aGk=","filename":"b.pdf"}`), "attachments.0.filename", "filename is required"},
		{"FilenameCRLF", att(`{"content":"aGVsbG8=","filename":"a\r\n.pdf"}`), "attachments.0.filename", "CRLF"},
		{"EmptyType", att(`{"content":"aGVsbG8=","filename":"a.pdf","type":""}`), "attachments.0.type", "at least one character"},
		{"TypeWithSemicolon", att(`{"content":"aGVsbG8=","filename":"a.pdf","type":"text/plain; charset=utf-8"}`), "attachments.0.type", "can't contain ';'"},
		{"BadDisposition", att(`{"content":"aGVsbG8=","filename":"a.pdf","disposition":"embedded"}`), "attachments.0.disposition", `either "inline" or "attachment"`},
		{"TemplateDataTooLong", []byte(`{"personalizations":[{"to":[{"email":"a@example.com"}],"dynamic_template_data":{"k":"` + strings.Repeat("x", sendgriddouble.MaxTemplateDataBytes-7) + `"}}],"from":{"email":"shop@example.com"},"template_id":"` + tmplID + `"}`), "personalizations.0.dynamic_template_data", "no more than 10000 bytes"},
		{"ContentIDCRLF", att(`{"content":"aGVsbG8=","filename":"a.png","disposition":"inline","content_id":"a\nb"}`), "attachments.0.content_id", "CRLF"},
	} {
		resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		if resp.StatusCode == http.StatusBadRequest {
			for _, e := range decodeErrors(t, resp).Errors {
				if e.Field != nil && *e.Field == tc.field && strings.Contains(e.Message, tc.says) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s: %d %s", tc.name, resp.StatusCode, resp.Body)
		}
	}
	if st := s.Stats(); st.Emails != 0 || st.Deliveries != 0 {
		t.Fatalf("refused requests sent emails: %+v", st)
	}
	// A dynamic template needs neither subject nor content; an inline file
	// without a content id is SendGrid's to accept.
	for _, b := range [][]byte{
		noContent(`,"template_id":"` + tmplID + `"`),
		att(`{"content":"aGVsbG8=","filename":"a.png","type":"image/png","disposition":"inline"}`),
	} {
		if resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, b); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Errorf("%s: %v %v", b, resp, err)
		}
	}
}
