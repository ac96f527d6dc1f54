package sendgriddouble_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sendgrid/rest"
	"github.com/sendgrid/sendgrid-go"
	"github.com/sendgrid/sendgrid-go/helpers/mail"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

var fixedNow = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func start(t *testing.T, cfg sendgriddouble.Config) *sendgriddouble.Server {
	t.Helper()
	s, err := sendgriddouble.NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func client() *rest.Client {
	return &rest.Client{HTTPClient: &http.Client{Timeout: 10 * time.Second}}
}

// message builds an email with sendgrid-go's helpers, as an application
// using the SDK directly would.
func message(intentID string) *mail.SGMailV3 {
	m := mail.NewSingleEmail(
		mail.NewEmail("Shop", "shop@example.com"),
		"Your order",
		mail.NewEmail("Jane", "jane@example.com"),
		"plain body",
		"<p>html body</p>",
	)
	if intentID != "" {
		m.SetCustomArg("intent_id", intentID)
	}
	return m
}

func sendBody(t *testing.T, s *sendgriddouble.Server, key string, body []byte) (*rest.Response, error) {
	t.Helper()
	r := sendgrid.GetRequest(key, "/v3/mail/send", s.URL())
	r.Method = rest.Post
	r.Body = body
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client().SendWithContext(ctx, r)
}

func send(t *testing.T, s *sendgriddouble.Server, m *mail.SGMailV3) *rest.Response {
	t.Helper()
	resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, mail.GetRequestBody(m))
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return resp
}

type errorBody struct {
	Errors []struct {
		Message string  `json:"message"`
		Field   *string `json:"field"`
		Help    *string `json:"help"`
	} `json:"errors"`
}

func decodeErrors(t *testing.T, resp *rest.Response) errorBody {
	t.Helper()
	var b errorBody
	if err := json.Unmarshal([]byte(resp.Body), &b); err != nil || len(b.Errors) == 0 {
		t.Fatalf("error body %q: %v", resp.Body, err)
	}
	return b
}

func TestSendIsAcceptedWithMessageID(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{Now: func() time.Time { return fixedNow }})
	m := message("42")
	m.Personalizations[0].AddCCs(mail.NewEmail("", "cc@example.com"))
	m.Personalizations[0].AddBCCs(mail.NewEmail("", "bcc@example.com"))
	m.AddCategories("orders")
	resp := send(t, s, m)
	if resp.StatusCode != http.StatusAccepted || resp.Body != "" {
		t.Fatalf("got %d %q, want 202 with an empty body", resp.StatusCode, resp.Body)
	}
	h := http.Header(resp.Headers)
	id := h.Get("X-Message-Id")
	if len(id) != 22 {
		t.Fatalf("X-Message-Id = %q, want 22 characters", id)
	}
	if _, ok := resp.Headers["X-Message-Id"]; !ok {
		t.Error(`resp.Headers["X-Message-Id"] (the SDK's documented look-up) is missing`)
	}
	for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if h.Get(name) == "" {
			t.Errorf("missing header %s", name)
		}
	}
	if got, want := h.Get("X-RateLimit-Reset"), strconv.FormatInt(fixedNow.Add(time.Minute).Unix(), 10); got != want {
		t.Errorf("X-RateLimit-Reset = %s, want %s", got, want)
	}
	emails := s.Emails()
	if len(emails) != 1 {
		t.Fatalf("recorded %d emails, want 1", len(emails))
	}
	e := emails[0]
	if e.MessageID != id || e.From != "shop@example.com" || e.Subject != "Your order" ||
		strings.Join(e.To, ",") != "jane@example.com" || strings.Join(e.Cc, ",") != "cc@example.com" ||
		strings.Join(e.Bcc, ",") != "bcc@example.com" || e.CustomArgs["intent_id"] != "42" ||
		strings.Join(e.Categories, ",") != "orders" || !e.AcceptedAt.Equal(fixedNow) {
		t.Fatalf("recorded %+v", e)
	}
	if s.EffectsFor(42) != 1 || s.EffectsFor(43) != 0 {
		t.Fatalf("EffectsFor(42) = %d, EffectsFor(43) = %d", s.EffectsFor(42), s.EffectsFor(43))
	}
	// Emails returns a copy.
	emails[0].To[0] = "changed"
	emails[0].CustomArgs["intent_id"] = "changed"
	if s.Emails()[0].To[0] != "jane@example.com" || s.EffectsFor(42) != 1 {
		t.Fatal("Emails() shares memory with the double")
	}
}

func TestIdenticalSendsAreTwoEmails(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	first := send(t, s, message("7"))
	second := send(t, s, message("7"))
	if first.StatusCode != 202 || second.StatusCode != 202 {
		t.Fatalf("statuses %d, %d", first.StatusCode, second.StatusCode)
	}
	if http.Header(first.Headers).Get("X-Message-Id") == http.Header(second.Headers).Get("X-Message-Id") {
		t.Fatal("two sends got the same message id")
	}
	if n := s.EffectsFor(7); n != 2 {
		t.Fatalf("EffectsFor = %d, want 2: SendGrid has no idempotency", n)
	}
	if d := s.DuplicateEffects(); d != 1 {
		t.Fatalf("DuplicateEffects = %d, want 1", d)
	}
	if st := s.Stats(); st.Emails != 2 || st.Requests != 2 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestValidationErrors(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{Now: func() time.Time { return fixedNow }})
	many := func(n int) []map[string]string {
		out := make([]map[string]string, n)
		for i := range out {
			out[i] = map[string]string{"email": fmt.Sprintf("r%d@example.com", i)}
		}
		return out
	}
	base := func() map[string]any {
		return map[string]any{
			"personalizations": []any{map[string]any{"to": []any{map[string]string{"email": "jane@example.com"}}}},
			"from":             map[string]string{"email": "shop@example.com"},
			"subject":          "hi",
			"content":          []any{map[string]string{"type": "text/plain", "value": "body"}},
		}
	}
	cases := []struct {
		name   string
		mutate func(m map[string]any)
		field  string
	}{
		{"no personalizations", func(m map[string]any) { delete(m, "personalizations") }, "personalizations"},
		{"empty to", func(m map[string]any) { m["personalizations"] = []any{map[string]any{"to": []any{}}} }, "personalizations.0.to"},
		{"invalid to", func(m map[string]any) {
			m["personalizations"] = []any{map[string]any{"to": []any{map[string]string{"email": "nope"}}}}
		}, "personalizations.0.to.0.email"},
		{"duplicate recipient", func(m map[string]any) {
			m["personalizations"] = []any{map[string]any{
				"to":  []any{map[string]string{"email": "jane@example.com"}},
				"bcc": []any{map[string]string{"email": "JANE@example.com"}},
			}}
		}, "personalizations.0.bcc.0.email"},
		{"too many recipients", func(m map[string]any) {
			m["personalizations"] = []any{map[string]any{"to": many(600), "cc": many(601)[600:], "bcc": many(1001)[601:]}}
		}, "personalizations"},
		{"no from", func(m map[string]any) { delete(m, "from") }, "from.email"},
		{"invalid from", func(m map[string]any) { m["from"] = map[string]string{"email": "Shop <shop@example.com>"} }, "from.email"},
		{"no subject", func(m map[string]any) { delete(m, "subject") }, "subject"},
		{"no content", func(m map[string]any) { delete(m, "content") }, "content"},
		{"empty content value", func(m map[string]any) {
			m["content"] = []any{map[string]string{"type": "text/plain", "value": ""}}
		}, "content.0.value"},
		{"html before plain", func(m map[string]any) {
			m["content"] = []any{map[string]string{"type": "text/html", "value": "<p>x</p>"}, map[string]string{"type": "text/plain", "value": "x"}}
		}, "content.1.type"},
		{"too many categories", func(m map[string]any) {
			m["categories"] = []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}
		}, "categories"},
		{"custom_args too large", func(m map[string]any) {
			m["custom_args"] = map[string]string{"big": strings.Repeat("x", sendgriddouble.MaxCustomArgsBytes)}
		}, "custom_args"},
		{"custom_args not strings", func(m map[string]any) { m["custom_args"] = map[string]any{"n": 1} }, "custom_args"},
		{"send_at too far ahead", func(m map[string]any) { m["send_at"] = fixedNow.Add(73 * time.Hour).Unix() }, "send_at"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := base()
			c.mutate(m)
			body, _ := json.Marshal(m)
			resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d %s, want 400", resp.StatusCode, resp.Body)
			}
			b := decodeErrors(t, resp)
			var fields []string
			for _, e := range b.Errors {
				if e.Help != nil {
					t.Errorf("help = %q, want null", *e.Help)
				}
				if e.Message == "" {
					t.Error("empty message")
				}
				if e.Field != nil {
					fields = append(fields, *e.Field)
				}
			}
			if !contains(fields, c.field) {
				t.Fatalf("errors name fields %v, want %q (body %s)", fields, c.field, resp.Body)
			}
		})
	}
	t.Run("every personalization has a subject", func(t *testing.T) {
		m := base()
		delete(m, "subject")
		m["personalizations"] = []any{map[string]any{"to": []any{map[string]string{"email": "jane@example.com"}}, "subject": "per-recipient"}}
		body, _ := json.Marshal(m)
		resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, body)
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("got %v %v, want 202", resp, err)
		}
	})
	t.Run("malformed JSON", func(t *testing.T) {
		resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, []byte(`{"from":`))
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("got %v %v, want 400", resp, err)
		}
		decodeErrors(t, resp)
	})
	if n := s.Stats().Emails; n != 1 {
		t.Fatalf("recorded %d emails, want only the valid one", n)
	}
}

func TestUnverifiedSenderIsForbidden(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	m := message("1")
	m.SetFrom(mail.NewEmail("", sendgriddouble.UnverifiedSender))
	resp := send(t, s, m)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want 403", resp.StatusCode)
	}
	if msg := decodeErrors(t, resp).Errors[0].Message; !strings.Contains(msg, "verified Sender Identity") {
		t.Fatalf("message %q", msg)
	}
	if s.EffectsFor(1) != 0 {
		t.Fatal("a refused email was recorded")
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{APIKey: "SG.right"})
	for _, key := range []string{"", "SG.wrong", sendgriddouble.DefaultAPIKey} {
		resp, err := sendBody(t, s, key, mail.GetRequestBody(message("1")))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("key %q: status %d, want 401", key, resp.StatusCode)
		}
		e := decodeErrors(t, resp).Errors[0]
		if e.Message != "The provided authorization grant is invalid, expired, or revoked" || e.Field != nil {
			t.Fatalf("key %q: error %+v", key, e)
		}
	}
	resp, err := sendBody(t, s, "SG.right", mail.GetRequestBody(message("1")))
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("right key: %v %v", resp, err)
	}
	if s.Stats().Emails != 1 {
		t.Fatal("unauthorized requests were recorded")
	}
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	req := httptest.NewRequest(http.MethodPost, "/v3/mail/send", strings.NewReader("{}"))
	req.ContentLength = sendgriddouble.MaxBodyBytes
	req.Header.Set("Authorization", "Bearer "+sendgriddouble.DefaultAPIKey)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", rec.Code)
	}
}

func TestGzipBodyAndSandboxMode(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})

	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(mail.GetRequestBody(message("5")))
	_ = zw.Close()
	r := sendgrid.GetRequest(sendgriddouble.DefaultAPIKey, "/v3/mail/send", s.URL())
	r.Method = rest.Post
	r.Headers["Content-Encoding"] = "gzip"
	r.Body = buf.Bytes()
	resp, err := client().SendWithContext(context.Background(), r)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("gzipped send: %v %v", resp, err)
	}

	m := message("6")
	m.SetMailSettings(mail.NewMailSettings().SetSandboxMode(mail.NewSetting(true)))
	if resp := send(t, s, m); resp.StatusCode != http.StatusOK {
		t.Fatalf("sandbox send: status %d, want 200", resp.StatusCode)
	}
	if s.EffectsFor(5) != 1 || s.EffectsFor(6) != 0 {
		t.Fatalf("EffectsFor(5) = %d, EffectsFor(6) = %d, want 1 and 0", s.EffectsFor(5), s.EffectsFor(6))
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()

	t.Run("RateLimit", func(t *testing.T) {
		t.Parallel()
		s := start(t, sendgriddouble.Config{Now: func() time.Time { return fixedNow.Add(300 * time.Millisecond) }})
		s.Faults().Push(fault.Fault{Kind: fault.RateLimit, RetryAfter: 3 * time.Second})
		resp := send(t, s, message("1"))
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", resp.StatusCode)
		}
		h := http.Header(resp.Headers)
		if h.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("X-RateLimit-Remaining = %q, want 0", h.Get("X-RateLimit-Remaining"))
		}
		// 12:00:00.3 + 3s rounds up to 12:00:04.
		if got, want := h.Get("X-RateLimit-Reset"), strconv.FormatInt(fixedNow.Unix()+4, 10); got != want {
			t.Errorf("X-RateLimit-Reset = %s, want %s", got, want)
		}
		if e := decodeErrors(t, resp).Errors[0]; e.Message != "too many requests" || e.Field != nil {
			t.Errorf("error %+v", e)
		}
		if s.EffectsFor(1) != 0 {
			t.Fatal("a rate-limited email was recorded")
		}
	})

	t.Run("ErrorBefore", func(t *testing.T) {
		t.Parallel()
		s := start(t, sendgriddouble.Config{})
		s.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 503})
		resp := send(t, s, message("1"))
		if resp.StatusCode != 503 {
			t.Fatalf("status %d, want 503", resp.StatusCode)
		}
		decodeErrors(t, resp)
		if s.EffectsFor(1) != 0 {
			t.Fatal("recorded before an error-before fault")
		}
	})

	t.Run("ErrorAfter", func(t *testing.T) {
		t.Parallel()
		s := start(t, sendgriddouble.Config{})
		s.Faults().Push(fault.Fault{Kind: fault.ErrorAfter})
		resp := send(t, s, message("1"))
		if resp.StatusCode != 500 {
			t.Fatalf("status %d, want 500", resp.StatusCode)
		}
		decodeErrors(t, resp)
		if s.EffectsFor(1) != 1 {
			t.Fatal("an error-after fault did not record the email")
		}
	})

	t.Run("LoseResponse", func(t *testing.T) {
		t.Parallel()
		s := start(t, sendgriddouble.Config{})
		s.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
		resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, mail.GetRequestBody(message("1")))
		if err == nil {
			t.Fatalf("got a response (%d) despite a lost response", resp.StatusCode)
		}
		if s.EffectsFor(1) != 1 {
			t.Fatal("a lost response did not record the email")
		}
		// The next request is answered normally.
		if resp := send(t, s, message("2")); resp.StatusCode != 202 {
			t.Fatalf("after the fault: status %d", resp.StatusCode)
		}
	})

	t.Run("Delay", func(t *testing.T) {
		t.Parallel()
		s := start(t, sendgriddouble.Config{})
		s.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: 20 * time.Millisecond})
		if resp := send(t, s, message("1")); resp.StatusCode != 202 {
			t.Fatalf("status %d, want 202 after the delay", resp.StatusCode)
		}
		if s.EffectsFor(1) != 1 {
			t.Fatal("not recorded")
		}
	})

	t.Run("DelayedClientGivesUpAfterTheDoubleActed", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := start(t, sendgriddouble.Config{OnAccept: func(sendgriddouble.Email) { cancel() }})
		s.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: time.Hour})
		r := sendgrid.GetRequest(sendgriddouble.DefaultAPIKey, "/v3/mail/send", s.URL())
		r.Method = rest.Post
		r.Body = mail.GetRequestBody(message("1"))
		if _, err := client().SendWithContext(ctx, r); err == nil {
			t.Fatal("the request succeeded despite its context ending")
		}
		if s.EffectsFor(1) != 1 {
			t.Fatal("not recorded")
		}
		st := s.Stats()
		if st.Faults[fault.Delay] != 1 {
			t.Fatalf("Stats.Faults = %v", st.Faults)
		}
	})

	t.Run("StatsCountAppliedFaults", func(t *testing.T) {
		t.Parallel()
		s := start(t, sendgriddouble.Config{})
		s.Faults().Push(fault.Fault{Kind: fault.ErrorBefore}, fault.Fault{Kind: fault.ErrorAfter}, fault.Fault{Kind: fault.RateLimit})
		for i := range 4 {
			send(t, s, message(strconv.Itoa(i)))
		}
		st := s.Stats()
		if st.Requests != 4 || st.Emails != 2 || st.Faults[fault.ErrorBefore] != 1 || st.Faults[fault.ErrorAfter] != 1 || st.Faults[fault.RateLimit] != 1 {
			t.Fatalf("Stats = %+v", st)
		}
	})
}

func TestActivityLookUp(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{Now: func() time.Time { return fixedNow }})
	m7 := message("7")
	m7.SetCustomArg("outbox_key", "k7")
	first := send(t, s, m7)
	m := message("8")
	m.SetCustomArg("outbox_key", "k8")
	m.Personalizations[0].AddCCs(mail.NewEmail("", "cc@example.com"))
	second := send(t, s, m)

	lookUp := func(t *testing.T, key string, params map[string]string) (*rest.Response, sendgriddouble.ActivityResponse) {
		t.Helper()
		r := sendgrid.GetRequest(key, "/v3/messages", s.URL())
		r.Method = rest.Get
		r.QueryParams = params
		resp, err := client().SendWithContext(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		var body sendgriddouble.ActivityResponse
		if resp.StatusCode == 200 {
			if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
				t.Fatal(err)
			}
		}
		return resp, body
	}

	for _, q := range []string{`unique_args['intent_id']="7"`, `(unique_args['intent_id']="7")`} {
		resp, body := lookUp(t, sendgriddouble.DefaultAPIKey, map[string]string{"query": q, "limit": "10"})
		if resp.StatusCode != 200 || len(body.Messages) != 1 {
			t.Fatalf("query %s: %d %s", q, resp.StatusCode, resp.Body)
		}
		msg := body.Messages[0]
		id := http.Header(first.Headers).Get("X-Message-Id")
		if !strings.HasPrefix(msg.MsgID, id+".") || msg.ToEmail != "jane@example.com" || msg.FromEmail != "shop@example.com" ||
			msg.Subject != "Your order" || msg.Status != "delivered" || msg.LastEventTime != fixedNow.Format(time.RFC3339) {
			t.Fatalf("message %+v (X-Message-Id %s)", msg, id)
		}
	}
	_, body := lookUp(t, sendgriddouble.DefaultAPIKey, map[string]string{"query": `unique_args['intent_id']="8"`})
	if len(body.Messages) != 2 || !strings.HasPrefix(body.Messages[1].MsgID, http.Header(second.Headers).Get("X-Message-Id")) {
		t.Fatalf("one row per recipient expected: %+v", body.Messages)
	}
	if _, body := lookUp(t, sendgriddouble.DefaultAPIKey, map[string]string{"query": `unique_args['intent_id']="9"`}); len(body.Messages) != 0 {
		t.Fatalf("unknown intent: %+v", body.Messages)
	}
	// Conditions joined by AND must all hold, custom arguments on the same
	// email; to_email keeps only that recipient's rows.
	for q, want := range map[string]int{
		`unique_args['intent_id']="8" AND unique_args['outbox_key']="k8"`:                                 2,
		`(unique_args['intent_id']="8") AND (unique_args['outbox_key']="k8")`:                             2,
		`unique_args['intent_id']="8" AND unique_args['outbox_key']="k7"`:                                 0,
		`unique_args['intent_id']="7" AND unique_args['outbox_key']="k8"`:                                 0,
		`unique_args['outbox_key']="k8" AND to_email="cc@example.com"`:                                    1,
		`unique_args['outbox_key']="k8" AND to_email="nobody@example.com"`:                                0,
		`unique_args['intent_id']="8" AND unique_args['outbox_key']="k8" AND to_email="JANE@example.com"`: 1,
	} {
		resp, body := lookUp(t, sendgriddouble.DefaultAPIKey, map[string]string{"query": q})
		if resp.StatusCode != 200 || len(body.Messages) != want {
			t.Errorf("query %s: %d, %d rows, want %d", q, resp.StatusCode, len(body.Messages), want)
		}
	}
	if resp, _ := lookUp(t, sendgriddouble.DefaultAPIKey, map[string]string{"query": `subject="Your order"`}); resp.StatusCode != 400 {
		t.Fatalf("unsupported query: status %d, want 400", resp.StatusCode)
	}
	if resp, _ := lookUp(t, sendgriddouble.DefaultAPIKey, map[string]string{"query": `unique_args['intent_id']="7"`, "limit": "0"}); resp.StatusCode != 400 {
		t.Fatalf("limit 0: status %d, want 400", resp.StatusCode)
	}
	if resp, _ := lookUp(t, "SG.wrong", map[string]string{"query": `unique_args['intent_id']="7"`}); resp.StatusCode != 401 {
		t.Fatalf("wrong key: status %d, want 401", resp.StatusCode)
	}
}

func TestActivityRateLimit(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{ActivityRequestsPerMinute: 2, Now: func() time.Time { return fixedNow }})
	var statuses []int
	for range 3 {
		r := sendgrid.GetRequest(sendgriddouble.DefaultAPIKey, "/v3/messages", s.URL())
		r.QueryParams = map[string]string{"query": `unique_args['intent_id']="1"`}
		resp, err := client().SendWithContext(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, resp.StatusCode)
	}
	if fmt.Sprint(statuses) != "[200 200 429]" {
		t.Fatalf("statuses %v, want [200 200 429]", statuses)
	}
}

func TestStatsEndpoint(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	s.Faults().Push(fault.Fault{Kind: fault.ErrorAfter})
	send(t, s, message("1"))
	send(t, s, message("2"))
	resp, err := http.Get(s.URL() + "/_double/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st sendgriddouble.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || st.Emails != 2 || st.Requests != 2 || st.Faults[fault.ErrorAfter] != 1 {
		t.Fatalf("GET /_double/stats = %d %+v", resp.StatusCode, st)
	}
}

func TestConcurrentSends(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	const n = 40
	var wg sync.WaitGroup
	ids := make([]string, n)
	for i := range n {
		wg.Go(func() {
			resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, mail.GetRequestBody(message(strconv.Itoa(i))))
			if err != nil || resp.StatusCode != 202 {
				t.Errorf("send %d: %v %v", i, resp, err)
				return
			}
			ids[i] = http.Header(resp.Headers).Get("X-Message-Id")
		})
	}
	testkit.WaitWithin(t, &wg, time.Minute)
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("message id %q handed out twice", id)
		}
		seen[id] = true
	}
	if st := s.Stats(); st.Emails != n || s.DuplicateEffects() != 0 {
		t.Fatalf("Stats = %+v, duplicates %d", st, s.DuplicateEffects())
	}
}

func TestWaitForEmails(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WaitForEmails(ctx, 1); err == nil {
		t.Fatal("WaitForEmails returned nil before any email and after ctx ended")
	}
	done := make(chan error, 1)
	go func() { done <- s.WaitForEmails(context.Background(), 1) }()
	send(t, s, message("1"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestUnknownPath(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	r := sendgrid.GetRequest(sendgriddouble.DefaultAPIKey, "/v3/nope", s.URL())
	resp, err := client().SendWithContext(context.Background(), r)
	if err != nil || resp.StatusCode != 404 {
		t.Fatalf("got %v %v, want 404", resp, err)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
