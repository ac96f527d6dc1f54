package sendgridprovider_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sendgrid/rest"
	"github.com/sendgrid/sendgrid-go"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/internal/resetserver"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

var resetModes = []struct {
	name string
	mode resetserver.Mode
}{
	{"RefusedStream", resetserver.RefusedStream},
	{"GoAway", resetserver.GoAway},
}

func startResetServer(t *testing.T, mode resetserver.Mode) *resetserver.Server {
	t.Helper()
	s, err := resetserver.Start(resetserver.Config{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The bug, as reported: sendgrid-go's request over an HTTP/2 transport is
// read by the server, its stream reset, and re-sent by net/http; the
// caller sees one 202 for two emails. If this stops failing the old way,
// the test below proves less than it claims.
func TestSDKOverHTTP2SendsTwiceAfterAStreamReset(t *testing.T) {
	t.Parallel()
	for _, m := range resetModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s := startResetServer(t, m.mode)
			tr := providers.NewHTTPTransport()
			tr.TLSClientConfig = s.ClientTLSConfig()
			defer tr.CloseIdleConnections()
			r := sendgrid.GetRequest(sendgriddouble.DefaultAPIKey, "/v3/mail/send", s.URL())
			r.Method = rest.Post
			r.Body = []byte(`{"personalizations":[{"to":[{"email":"a@example.com"}]}]}`)
			resp, err := (&rest.Client{HTTPClient: &http.Client{Transport: tr}}).SendWithContext(ctx, r)
			if err != nil || resp.StatusCode != http.StatusAccepted {
				t.Fatalf("resp = %+v, err = %v; want the re-sent request's 202", resp, err)
			}
			if n := len(s.Deliveries()); n != 2 {
				t.Fatalf("the server read %d emails, want 2", n)
			}
		})
	}
}

// The fix: one Perform is one email at the server, whatever the transport
// under the adapter, and the reset attempt is ambiguous (the dispatcher
// holds it in_doubt rather than sending again).
func TestPerformSendsOnceWhenTheServerResets(t *testing.T) {
	t.Parallel()
	transports := []struct {
		name  string
		new   func() *http.Transport
		proto string
	}{
		// The default client's transport (made to trust the server).
		{"DefaultTransport", providers.NewUnkeyedHTTPTransport, "HTTP/1.1"},
		// A caller's client that speaks HTTP/2: the adapter still clears
		// GetBody, so the stream reset is not followed by a re-send.
		{"CallersHTTP2Client", providers.NewHTTPTransport, "HTTP/2.0"},
	}
	for _, tr := range transports {
		for _, m := range resetModes {
			t.Run(tr.name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				s := startResetServer(t, m.mode)
				transport := tr.new()
				transport.TLSClientConfig = s.ClientTLSConfig()
				defer transport.CloseIdleConnections()
				p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), HTTPClient: &http.Client{Timeout: 20 * time.Second, Transport: transport}})

				res, err := p.Perform(ctx, request(77, validPayload))
				if err == nil {
					t.Fatalf("Perform succeeded (%+v), want an error", res)
				}
				got := s.Deliveries()
				if len(got) != 1 {
					t.Fatalf("the server read %d emails, want 1", len(got))
				}
				if d := got[0]; d.Proto != tr.proto || d.Method != http.MethodPost || d.Path != "/v3/mail/send" {
					t.Fatalf("delivery = %s %s %s, want %s POST /v3/mail/send", d.Proto, d.Method, d.Path, tr.proto)
				}
				var mail struct {
					CustomArgs map[string]string `json:"custom_args"`
				}
				if err := json.Unmarshal(got[0].Body, &mail); err != nil || mail.CustomArgs[sendgridprovider.ArgIntentID] != "77" {
					t.Fatalf("delivered body %s (%v) is not intent 77's email", got[0].Body, err)
				}
				ae := providers.Classify(err)
				if ae.Outcome != providers.OutcomeAmbiguous || ae.DidNotAct || ae.HTTPStatus != 0 {
					t.Fatalf("classified %+v, want ambiguous, may have acted, no status", ae)
				}
			})
		}
	}
}

// The caller's redirect policy cannot make the adapter send an email again
// to another URL.
func TestPerformDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	s := startDouble(t, sendgriddouble.Config{})
	follow := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}
	redirect := newRedirector(t, s.URL())
	p := newProvider(t, sendgridprovider.Config{BaseURL: redirect, HTTPClient: follow})
	_, attemptErr := perform(t, p, request(5, validPayload))
	if attemptErr == nil || attemptErr.HTTPStatus != http.StatusTemporaryRedirect || attemptErr.Outcome != providers.OutcomeAmbiguous {
		t.Fatalf("Perform = %+v, want the 307 itself, ambiguous", attemptErr)
	}
	if n := len(s.Emails()); n != 0 {
		t.Fatalf("the redirect was followed: the double got %d emails", n)
	}
}

// newRedirector answers every request with a 307 to the same path on target.
func newRedirector(t *testing.T, target string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
