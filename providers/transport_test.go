package providers_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/internal/resetserver"
)

const emailBody = `{"to":"a@example.com","subject":"one email"}`

var modes = []struct {
	name string
	mode resetserver.Mode
}{
	{"RefusedStream", resetserver.RefusedStream},
	{"GoAway", resetserver.GoAway},
}

func startResetServer(t *testing.T, cfg resetserver.Config) *resetserver.Server {
	t.Helper()
	s, err := resetserver.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// trusting returns tr with s's certificate trusted, keeping tr's protocols.
func trusting(tr *http.Transport, s *resetserver.Server) *http.Transport {
	tr.TLSClientConfig = s.ClientTLSConfig()
	return tr
}

// post sends emailBody once, as sendgrid-go and the webhook adapter do:
// through http.NewRequest, which sets GetBody.
func post(ctx context.Context, t *testing.T, c *http.Client, url string, header http.Header) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v3/mail/send", bytes.NewReader([]byte(emailBody)))
	if err != nil {
		t.Fatal(err)
	}
	if req.GetBody == nil {
		t.Fatal("http.NewRequest did not set GetBody; the test would prove nothing")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

func checkDeliveries(t *testing.T, s *resetserver.Server, want int, proto string) {
	t.Helper()
	got := s.Deliveries()
	if len(got) != want {
		t.Fatalf("the server read %d request bodies, want %d: %+v", len(got), want, got)
	}
	for i, d := range got {
		if string(d.Body) != emailBody || d.Proto != proto {
			t.Fatalf("delivery %d = %s %q, want %s %q", i+1, d.Proto, d.Body, proto, emailBody)
		}
	}
}

// The bug, shown with the transport keyed providers use: net/http's HTTP/2
// client sends one POST twice after a stream reset, and the caller sees a
// single 202. If this test fails, net/http stopped re-sending and the
// tests below prove less than they claim.
func TestHTTP2TransportResendsAfterAStreamReset(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s := startResetServer(t, resetserver.Config{Mode: m.mode})
			c := &http.Client{Transport: trusting(providers.NewHTTPTransport(), s)}
			defer c.CloseIdleConnections()
			resp, err := post(ctx, t, c, s.URL(), nil)
			if err != nil {
				t.Fatalf("POST: %v", err)
			}
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("status %d, want the 202 of the re-sent request", resp.StatusCode)
			}
			checkDeliveries(t, s, 2, "HTTP/2.0")
		})
	}
}

// The fix: through UnkeyedClient the request is delivered once and the
// caller gets an error that does not claim "never sent", whether the
// transport is NewUnkeyedHTTPTransport (HTTP/1.1, the connection is reset)
// or a caller's HTTP/2 transport (the stream is reset, GetBody is cleared).
func TestUnkeyedClientSendsOnceAfterAReset(t *testing.T) {
	t.Parallel()
	transports := []struct {
		name  string
		new   func() *http.Transport
		proto string
	}{
		{"UnkeyedTransport", providers.NewUnkeyedHTTPTransport, "HTTP/1.1"},
		{"CallersHTTP2Transport", providers.NewHTTPTransport, "HTTP/2.0"},
	}
	for _, tr := range transports {
		for _, m := range modes {
			t.Run(tr.name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				s := startResetServer(t, resetserver.Config{Mode: m.mode})
				c := providers.UnkeyedClient(&http.Client{Transport: trusting(tr.new(), s)})
				defer c.CloseIdleConnections()
				resp, err := post(ctx, t, c, s.URL(), nil)
				if err == nil {
					t.Fatalf("POST answered %d, want an error", resp.StatusCode)
				}
				checkDeliveries(t, s, 1, tr.proto)
				if providers.RequestNeverSent(err) {
					t.Fatalf("a request the server read is claimed never sent: %v", err)
				}
				ae := providers.ClassifyTransport(err, false)
				if ae.Outcome != providers.OutcomeAmbiguous || ae.DidNotAct {
					t.Fatalf("classified %+v, want ambiguous and may have acted", ae)
				}
			})
		}
	}
}

// net/http's HTTP/1 client replays a request it deems idempotent (a POST
// with an Idempotency-Key header, as a keyed webhook endpoint of an
// unkeyed webhook provider sends) when a reused keep-alive connection breaks
// after the request was written. UnkeyedClient stops that replay too.
func TestUnkeyedClientDoesNotReplayOnAKeepAliveConnection(t *testing.T) {
	t.Parallel()
	header := http.Header{"Idempotency-Key": {"k1"}}
	run := func(t *testing.T, c *http.Client, s *resetserver.Server) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		defer c.CloseIdleConnections()
		// The first request is answered and leaves its connection idle;
		// the second reuses it, is read, and the connection is reset.
		if _, err := post(ctx, t, c, s.URL(), header); err != nil {
			t.Fatalf("first POST: %v", err)
		}
		_, err := post(ctx, t, c, s.URL(), header)
		return err
	}
	secondOnly := func(n int) bool { return n == 2 }

	t.Run("PlainClientReplays", func(t *testing.T) {
		t.Parallel()
		s := startResetServer(t, resetserver.Config{Mode: resetserver.RefusedStream, Drop: secondOnly})
		if err := run(t, &http.Client{Transport: trusting(providers.NewUnkeyedHTTPTransport(), s)}, s); err != nil {
			t.Fatalf("second POST: %v (net/http did not replay it)", err)
		}
		checkDeliveries(t, s, 3, "HTTP/1.1")
	})
	t.Run("UnkeyedClientDoesNot", func(t *testing.T) {
		t.Parallel()
		s := startResetServer(t, resetserver.Config{Mode: resetserver.RefusedStream, Drop: secondOnly})
		err := run(t, providers.UnkeyedClient(&http.Client{Transport: trusting(providers.NewUnkeyedHTTPTransport(), s)}), s)
		if err == nil {
			t.Fatal("second POST succeeded, want an error")
		}
		checkDeliveries(t, s, 2, "HTTP/1.1")
		if ae := providers.ClassifyTransport(err, false); ae.Outcome != providers.OutcomeAmbiguous || ae.DidNotAct {
			t.Fatalf("classified %+v, want ambiguous", ae)
		}
	})
}

func TestUnkeyedClientProvesNeverSent(t *testing.T) {
	t.Parallel()

	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := post(ctx, t, providers.UnkeyedClient(nil), "http://"+closedAddr(t), nil)
		requireNotSent(t, err)
	})

	t.Run("ContextEndedBeforeTheCall", func(t *testing.T) {
		t.Parallel()
		srv := countingServer(t, false)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := post(ctx, t, providers.UnkeyedClient(nil), srv.srv.URL, nil)
		requireNotSent(t, err)
		if n := srv.count(); n != 0 {
			t.Fatalf("server saw %d requests", n)
		}
	})

	t.Run("TLSHandshakeWithAServerThatIsNotTLS", func(t *testing.T) {
		t.Parallel()
		// A plain HTTP server answers the ClientHello with "HTTP/1.1 400":
		// the handshake fails on a record header that is not TLS.
		srv := countingServer(t, false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := post(ctx, t, providers.UnkeyedClient(nil), "https://"+srv.srv.Listener.Addr().String(), nil)
		requireNotSent(t, err)
	})

	t.Run("UntrustedCertificate", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			t.Error("a request reached a server whose certificate is not trusted")
		}))
		t.Cleanup(srv.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := post(ctx, t, providers.UnkeyedClient(nil), srv.URL, nil)
		requireNotSent(t, err)
		// Without the wrapper, the certificate error is proof on its own.
		_, err = post(ctx, t, &http.Client{Transport: providers.NewHTTPTransport()}, srv.URL, nil)
		if !providers.RequestNeverSent(err) {
			t.Fatalf("certificate error not proof: %v", err)
		}
	})

	t.Run("NoProofFromAnUntracedTransport", func(t *testing.T) {
		t.Parallel()
		// A RoundTripper that is not *http.Transport may send without
		// calling GotConn, so its errors prove nothing.
		sent := false
		rt := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			sent = true
			return nil, errors.New("lost after sending")
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := post(ctx, t, providers.UnkeyedClient(&http.Client{Transport: rt}), "http://example.invalid", nil)
		if err == nil || !sent {
			t.Fatalf("err = %v, sent = %t", err, sent)
		}
		if providers.RequestNeverSent(err) {
			t.Fatalf("claimed never sent: %v", err)
		}
	})
}

// A TLS record error read on an established connection, after the request
// was written, is not proof that it never left, whether or not the call went
// through UnkeyedClient.
func TestRecordHeaderErrorAfterTheHandshakeIsNotNeverSent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	// httptest's certificate, and a client transport that trusts it.
	tlsSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsSrv.StartTLS()
	serverCfg := tlsSrv.TLS.Clone()
	clientTransport := tlsSrv.Client().Transport.(*http.Transport)
	tlsSrv.Close()

	requests := make(chan []byte, 4)
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer raw.Close()
				_ = raw.SetDeadline(time.Now().Add(20 * time.Second))
				c := tls.Server(raw, serverCfg)
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				body, _ := io.ReadAll(req.Body)
				requests <- body
				// Plain text where a TLS record is due: the client's next
				// read fails with a tls.RecordHeaderError. (net/http turns
				// one that starts with "HTTP/" into ErrSchemeMismatch.)
				reply := "garbage, not a TLS record\r\n"
				if req.Header.Get("X-Reply") == "http" {
					reply = "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"
				}
				_, _ = raw.Write([]byte(reply))
			}()
		}
	}()

	clients := map[string]*http.Client{
		"Plain":         {Transport: clientTransport.Clone()},
		"UnkeyedClient": providers.UnkeyedClient(&http.Client{Transport: clientTransport.Clone()}),
	}
	replies := map[string]struct {
		text string
		want func(error) bool
	}{
		"RecordHeaderError": {"garbage", func(err error) bool {
			var recordErr tls.RecordHeaderError
			return errors.As(err, &recordErr)
		}},
		"SchemeMismatch": {"http", func(err error) bool {
			return errors.Is(err, http.ErrSchemeMismatch)
		}},
	}
	for name, c := range clients {
		for replyName, reply := range replies {
			t.Run(name+"/"+replyName, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err := post(ctx, t, c, "https://"+ln.Addr().String(), http.Header{"X-Reply": {reply.text}})
				if !reply.want(err) {
					t.Fatalf("err = %v (%T), want a %s", err, err, replyName)
				}
				select {
				case body := <-requests:
					if string(body) != emailBody {
						t.Fatalf("server read %q", body)
					}
				case <-ctx.Done():
					t.Fatal("the server never read the request")
				}
				if providers.RequestNeverSent(err) {
					t.Fatalf("a request the server read is claimed never sent: %v", err)
				}
				if ae := providers.ClassifyTransport(err, false); ae.Outcome != providers.OutcomeAmbiguous || ae.DidNotAct {
					t.Fatalf("classified %+v, want ambiguous", ae)
				}
			})
		}
	}
}

func TestUnkeyedClient(t *testing.T) {
	t.Parallel()
	jar := http.CookieJar(nil)
	base := &http.Client{Timeout: 7 * time.Second, Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}
	c := providers.UnkeyedClient(base)
	if c == base || base.Transport != nil || base.CheckRedirect(nil, nil) != nil {
		t.Fatal("UnkeyedClient modified its argument")
	}
	if c.Timeout != 7*time.Second {
		t.Fatalf("Timeout = %s", c.Timeout)
	}
	if err := c.CheckRedirect(nil, nil); !errors.Is(err, http.ErrUseLastResponse) {
		t.Fatalf("CheckRedirect = %v, want ErrUseLastResponse", err)
	}
	if again := providers.UnkeyedClient(c); again.Transport != c.Transport {
		t.Fatal("UnkeyedClient wrapped its own transport twice")
	}

	// Redirects are answered as they are, never followed with the body.
	srv := countingServer(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := post(ctx, t, c, srv.srv.URL, nil)
	if err != nil || resp.StatusCode != http.StatusTemporaryRedirect || srv.count() != 1 {
		t.Fatalf("resp = %v, err = %v, requests = %d; want the 307 itself after one request", resp, err, srv.count())
	}
}

func TestNewUnkeyedHTTPTransportIsHTTP1Only(t *testing.T) {
	t.Parallel()
	tr := providers.NewUnkeyedHTTPTransport()
	if tr.ForceAttemptHTTP2 || tr.TLSNextProto == nil || len(tr.TLSNextProto) != 0 {
		t.Fatalf("ForceAttemptHTTP2 = %t, TLSNextProto = %v", tr.ForceAttemptHTTP2, tr.TLSNextProto)
	}
	if tr.Protocols == nil || !tr.Protocols.HTTP1() || tr.Protocols.HTTP2() || tr.Protocols.UnencryptedHTTP2() {
		t.Fatalf("Protocols = %v, want HTTP/1 only", tr.Protocols)
	}
	if tr.MaxIdleConnsPerHost != providers.DefaultMaxIdleConnsPerHost {
		t.Fatalf("MaxIdleConnsPerHost = %d", tr.MaxIdleConnsPerHost)
	}
	if keyed := providers.NewHTTPTransport(); !keyed.ForceAttemptHTTP2 {
		t.Fatal("NewHTTPTransport no longer attempts HTTP/2")
	}
}

// Against a TLS server configured for HTTP/2 and HTTP/1.1, the transport
// for providers without a key says in ALPN that it speaks HTTP/1.1 only: a
// client that offers no protocol can be answered in HTTP/2, which an
// HTTP/1-only transport reads as a malformed response.
func TestUnkeyedTransportNegotiatesHTTP1WithAnHTTP2Server(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}))
	srv.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
	srv.StartTLS()
	defer srv.Close()

	tr := providers.NewUnkeyedHTTPTransport()
	tr.TLSClientConfig.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	client := providers.UnkeyedClient(&http.Client{Transport: tr, Timeout: 10 * time.Second})
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "HTTP/1.1" {
		t.Fatalf("the server saw %q, want HTTP/1.1", body)
	}
}

func requireNotSent(t *testing.T, err error) {
	t.Helper()
	var notSent *providers.NotSentError
	if !errors.As(err, &notSent) {
		t.Fatalf("err = %v (%T), want a *NotSentError", err, err)
	}
	if !providers.RequestNeverSent(err) {
		t.Fatalf("RequestNeverSent(%v) = false", err)
	}
	for _, keyed := range []bool{true, false} {
		if ae := providers.ClassifyTransport(err, keyed); ae.Outcome != providers.OutcomeRetry || !ae.DidNotAct {
			t.Fatalf("keyed=%t: classified %+v, want retry and did not act", keyed, ae)
		}
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// closedAddr is a local address nobody listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

type counted struct {
	srv      *httptest.Server
	requests atomic.Int64
}

func (c *counted) count() int { return int(c.requests.Load()) }

// countingServer counts requests and answers 202, or 307 to itself with
// redirect.
func countingServer(t *testing.T, redirect bool) *counted {
	t.Helper()
	c := &counted{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		if redirect {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(c.srv.Close)
	return c
}
