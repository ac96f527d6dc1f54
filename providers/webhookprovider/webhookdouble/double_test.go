package webhookdouble_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/webhookprovider"
	"github.com/outboxkit/outbox/providers/webhookprovider/webhookdouble"
)

func newServer(t *testing.T, cfg webhookdouble.Config) *webhookdouble.Server {
	t.Helper()
	s, err := webhookdouble.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type response struct {
	status int
	header http.Header
	body   string
}

// post sends body to the double signed with secret at signedAt, with the
// given extra headers. It may run outside the test's goroutine.
func post(ctx context.Context, s *webhookdouble.Server, secret string, signedAt time.Time, body string, header map[string]string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/in", strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	if secret != "" {
		req.Header.Set(webhookprovider.SignatureHeader, webhookprovider.Sign(secret, signedAt, []byte(body)))
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}, nil
}

func mustPost(t *testing.T, s *webhookdouble.Server, body string, header map[string]string) response {
	t.Helper()
	r, err := post(context.Background(), s, webhookdouble.DefaultSecret, time.Now(), body, header)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const body = `{"id":"k1","event":"note.created","data":{"n":1},"created_at":"2024-05-01T12:00:00Z"}`

func TestSignatureIsRequired(t *testing.T) {
	t.Parallel()
	s := newServer(t, webhookdouble.Config{})
	ctx := context.Background()
	for name, send := range map[string]func() (response, error){
		"Unsigned":    func() (response, error) { return post(ctx, s, "", time.Now(), body, nil) },
		"WrongSecret": func() (response, error) { return post(ctx, s, "whsec_wrong", time.Now(), body, nil) },
		"Stale": func() (response, error) {
			return post(ctx, s, webhookdouble.DefaultSecret, time.Now().Add(-time.Hour), body, nil)
		},
		"Tampered": func() (response, error) {
			req, _ := http.NewRequest(http.MethodPost, s.URL(), strings.NewReader(strings.Replace(body, `"n":1`, `"n":2`, 1)))
			req.Header.Set(webhookprovider.SignatureHeader, webhookprovider.Sign(webhookdouble.DefaultSecret, time.Now(), []byte(body)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return response{}, err
			}
			resp.Body.Close()
			return response{status: resp.StatusCode}, nil
		},
	} {
		r, err := send()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.status != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, r.status)
		}
	}
	if st := s.Stats(); st.Deliveries != 0 || st.Unauthorized != 4 {
		t.Fatalf("stats %+v: want no deliveries and 4 refused", st)
	}
}

func TestUnkeyedDoubleActsOnEveryDelivery(t *testing.T) {
	t.Parallel()
	s := newServer(t, webhookdouble.Config{})
	h := map[string]string{webhookprovider.IntentIDHeader: "9"}
	first := mustPost(t, s, body, h)
	second := mustPost(t, s, body, h)
	if first.status != 200 || second.status != 200 || first.header.Get("X-Request-Id") == second.header.Get("X-Request-Id") {
		t.Fatalf("answers %+v / %+v", first, second)
	}
	if s.EffectsFor(9) != 2 || s.DuplicateEffects() != 1 {
		t.Fatalf("EffectsFor = %d, duplicates %d; want 2 and 1", s.EffectsFor(9), s.DuplicateEffects())
	}
	ds := s.Deliveries()
	if len(ds) != 2 || ds[0].IntentID != "9" || ds[0].ID != "k1" || ds[0].Event != "note.created" || string(ds[0].Data) != `{"n":1}` ||
		ds[0].Path != "/in" || ds[0].CreatedAt != "2024-05-01T12:00:00Z" || ds[0].Ref != first.header.Get("X-Request-Id") {
		t.Fatalf("deliveries %+v", ds)
	}
}

func TestKeyedDoubleReplays(t *testing.T) {
	t.Parallel()
	const hdr = "Idempotency-Key"

	t.Run("MissingKeyIsRefused", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, webhookdouble.Config{IdempotencyHeader: hdr})
		if r := mustPost(t, s, body, nil); r.status != 400 || !strings.Contains(r.body, hdr) {
			t.Fatalf("answer %+v", r)
		}
	})

	t.Run("SuccessIsReplayed", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, webhookdouble.Config{IdempotencyHeader: hdr})
		h := map[string]string{hdr: "k1", webhookprovider.IntentIDHeader: "1"}
		first := mustPost(t, s, body, h)
		again := mustPost(t, s, body, h)
		if first.status != 200 || again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" ||
			again.header.Get("X-Request-Id") != first.header.Get("X-Request-Id") || again.body != first.body {
			t.Fatalf("answers %+v / %+v", first, again)
		}
		if s.EffectsFor(1) != 1 || s.Stats().Replays != 1 {
			t.Fatalf("EffectsFor = %d, stats %+v", s.EffectsFor(1), s.Stats())
		}
	})

	t.Run("ErrorAfterActing", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, webhookdouble.Config{IdempotencyHeader: hdr})
		s.Faults().Push(fault.Fault{Kind: fault.ErrorAfter}, fault.Fault{Kind: fault.ErrorAfter, Status: 503})
		// The 500 is saved and replayed.
		h := map[string]string{hdr: "k500", webhookprovider.IntentIDHeader: "1"}
		if r := mustPost(t, s, body, h); r.status != 500 {
			t.Fatalf("first answer %+v", r)
		}
		// A 503 is not saved: the success is.
		h503 := map[string]string{hdr: "k503", webhookprovider.IntentIDHeader: "2"}
		if r := mustPost(t, s, body, h503); r.status != 503 {
			t.Fatalf("first answer %+v", r)
		}
		if r := mustPost(t, s, body, h); r.status != 500 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after 500: %+v", r)
		}
		if r := mustPost(t, s, body, h503); r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after 503: %+v", r)
		}
		if s.EffectsFor(1) != 1 || s.EffectsFor(2) != 1 {
			t.Fatalf("effects %d, %d", s.EffectsFor(1), s.EffectsFor(2))
		}
	})

	t.Run("ErrorBeforeActingIsNotSaved", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, webhookdouble.Config{IdempotencyHeader: hdr})
		s.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 503}, fault.Fault{Kind: fault.RateLimit, RetryAfter: 2 * time.Second})
		h := map[string]string{hdr: "k", webhookprovider.IntentIDHeader: "1"}
		if r := mustPost(t, s, body, h); r.status != 503 {
			t.Fatalf("answer %+v", r)
		}
		if r := mustPost(t, s, body, h); r.status != 429 || r.header.Get("Retry-After") != "2" {
			t.Fatalf("answer %+v", r)
		}
		if s.EffectsFor(1) != 0 {
			t.Fatal("acted on a refused delivery")
		}
		if r := mustPost(t, s, body, h); r.status != 200 || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("answer %+v", r)
		}
		if s.EffectsFor(1) != 1 {
			t.Fatalf("EffectsFor = %d", s.EffectsFor(1))
		}
	})

	t.Run("KeyInFlightIsAConflict", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, webhookdouble.Config{IdempotencyHeader: hdr})
		s.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: time.Minute})
		h := map[string]string{hdr: "k", webhookprovider.IntentIDHeader: "1"}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := post(ctx, s, webhookdouble.DefaultSecret, time.Now(), body, h)
			done <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for s.Stats().Deliveries == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the delayed delivery was never acted on")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if r := mustPost(t, s, body, h); r.status != http.StatusConflict {
			t.Fatalf("concurrent answer %+v, want 409", r)
		}
		cancel()
		<-done
		// The first request's answer is saved even though its client left,
		// once its handler notices.
		r := mustPost(t, s, body, h)
		for r.status == http.StatusConflict && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			r = mustPost(t, s, body, h)
		}
		if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("answer after the first finished: %+v", r)
		}
		if s.EffectsFor(1) != 1 {
			t.Fatalf("EffectsFor = %d", s.EffectsFor(1))
		}
	})
}

func TestRejectedEventAndBadRequests(t *testing.T) {
	t.Parallel()
	s := newServer(t, webhookdouble.Config{})
	rejected := strings.Replace(body, "note.created", webhookdouble.RejectedEvent, 1)
	if r := mustPost(t, s, rejected, nil); r.status != 422 || !strings.Contains(r.body, "not accepted") {
		t.Fatalf("answer %+v", r)
	}
	if r := mustPost(t, s, `{"event":"a"}`, nil); r.status != 400 {
		t.Fatalf("answer %+v", r)
	}
	big := `{"id":"k","event":"e","data":"` + strings.Repeat("x", webhookdouble.MaxBodyBytes) + `"}`
	if r := mustPost(t, s, big, nil); r.status != 413 {
		t.Fatalf("answer %d", r.status)
	}
	resp, err := http.Get(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	if n := len(s.Deliveries()); n != 0 {
		t.Fatalf("%d deliveries recorded", n)
	}
	var m map[string]string
	if err := json.NewDecoder(bytes.NewReader([]byte(mustPost(t, s, rejected, nil).body))).Decode(&m); err != nil || m["message"] == "" {
		t.Fatalf("error body is not {\"message\": ...}: %v", err)
	}
}
