package providers_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
)

func TestRequestNeverSent(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	urlErr := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://api.example.com/v3/mail/send", Err: err}
	}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"Nil", nil, false},

		// Proofs.
		{"NotSentError", &providers.NotSentError{Err: context.Canceled}, true},
		{"NotSentErrorInURLError", urlErr(&providers.NotSentError{Err: errors.New("tls: handshake failure")}), true},
		{"DialRefused", urlErr(dial), true},
		{"DialThroughAProxy", urlErr(&net.OpError{Op: "proxyconnect", Net: "tcp", Err: dial}), true},
		{"DNS", urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "api.example.com", IsNotFound: true}}), true},
		{"DNSAlone", &net.DNSError{Err: "server misbehaving", Name: "api.example.com"}, true},
		{"CertificateVerification", urlErr(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), true},
		{"UnknownAuthority", urlErr(x509.UnknownAuthorityError{}), true},
		{"Hostname", urlErr(x509.HostnameError{Host: "api.example.com", Certificate: &x509.Certificate{}}), true},
		{"CertificateInvalid", urlErr(x509.CertificateInvalidError{Reason: x509.Expired, Cert: &x509.Certificate{}}), true},

		// No proof: the request may have left.
		{"RecordHeaderError", urlErr(tls.RecordHeaderError{Msg: "received record with version 6172 when expecting version 303"}), false},
		{"RecordHeaderErrorWrapped", fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", tls.RecordHeaderError{Msg: "bad record"}), false},
		{"SchemeMismatch", urlErr(http.ErrSchemeMismatch), false},
		{"RemoteAlert", urlErr(&net.OpError{Op: "remote error", Err: errors.New("tls: bad record MAC")}), false},
		{"ReadReset", urlErr(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), false},
		{"WriteBrokenPipe", urlErr(&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), false},
		{"EOF", urlErr(io.EOF), false},
		{"UnexpectedEOF", urlErr(io.ErrUnexpectedEOF), false},
		{"DeadlineExceeded", urlErr(context.DeadlineExceeded), false},
		{"Canceled", urlErr(context.Canceled), false},
		{"HTTP2CannotRetry", urlErr(errors.New("http2: Transport: cannot retry err [stream error: stream ID 1; REFUSED_STREAM] after Request.Body was written; define Request.GetBody to avoid this error")), false},
		{"Other", errors.New("boom"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := providers.RequestNeverSent(c.err); got != c.want {
				t.Fatalf("RequestNeverSent(%v) = %t, want %t", c.err, got, c.want)
			}
			if c.err == nil {
				return
			}
			for _, keyed := range []bool{true, false} {
				ae := providers.ClassifyTransport(c.err, keyed)
				want := providers.OutcomeAmbiguous
				if c.want || keyed {
					want = providers.OutcomeRetry
				}
				if ae.Outcome != want || ae.DidNotAct != c.want || !errors.Is(ae, c.err) {
					t.Fatalf("keyed=%t: ClassifyTransport = %+v, want %s with DidNotAct %t", keyed, ae, want, c.want)
				}
				if ae.MayHaveActed() == c.want {
					t.Fatalf("keyed=%t: MayHaveActed = %t", keyed, ae.MayHaveActed())
				}
			}
		})
	}
}

// A real refused connection and a real failed handshake, through a plain
// client: the errors net/http returns carry their proof.
func TestRequestNeverSentFromRealErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &http.Client{Transport: providers.NewHTTPTransport()}
	_, err := post(ctx, t, c, "http://"+closedAddr(t), nil)
	var opErr *net.OpError
	if !errors.As(err, &opErr) || !providers.RequestNeverSent(err) {
		t.Fatalf("connection refused: RequestNeverSent(%v) = false", err)
	}
}
