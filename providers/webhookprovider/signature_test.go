package webhookprovider_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers/webhookprovider"
)

func TestSignatureVerification(t *testing.T) {
	t.Parallel()
	const secret = "whsec_signing_secret"
	body := []byte(`{"id":"k1","event":"note.created","data":{"n":1},"created_at":"2024-05-01T12:00:00Z"}`)
	sent := time.Unix(1714564800, 0)
	header := webhookprovider.Sign(secret, sent, body)

	if !strings.HasPrefix(header, "t=1714564800,v1=") || len(header) != len("t=1714564800,v1=")+64 {
		t.Fatalf("Sign = %q, want t=<unix>,v1=<64 hex digits>", header)
	}

	cases := []struct {
		name      string
		secret    string
		header    string
		body      []byte
		tolerance time.Duration
		now       time.Time
		want      error // nil, or the specific sentinel
	}{
		{name: "Valid", secret: secret, header: header, body: body, now: sent.Add(time.Minute)},
		{name: "ValidSlightlyAheadOfTheReceiverClock", secret: secret, header: header, body: body, now: sent.Add(-time.Minute)},
		{name: "ValidWithARotatedSecretAlongside", secret: secret, header: header + ",v1=" + strings.Repeat("ab", 32), body: body, now: sent},
		{name: "UnknownSchemeIgnored", secret: secret, header: "v0=deadbeef," + header, body: body, now: sent},
		{name: "TamperedBody", secret: secret, header: header, body: []byte(strings.Replace(string(body), `"n":1`, `"n":2`, 1)), now: sent, want: webhookprovider.ErrSignatureMismatch},
		{name: "WrongSecret", secret: "whsec_other", header: header, body: body, now: sent, want: webhookprovider.ErrSignatureMismatch},
		{name: "TamperedTimestamp", secret: secret, header: strings.Replace(header, "t=1714564800", "t=1714564801", 1), body: body, now: sent, want: webhookprovider.ErrSignatureMismatch},
		{name: "Stale", secret: secret, header: header, body: body, now: sent.Add(webhookprovider.DefaultTolerance + time.Second), want: webhookprovider.ErrSignatureExpired},
		{name: "FromTheFuture", secret: secret, header: header, body: body, now: sent.Add(-webhookprovider.DefaultTolerance - time.Second), want: webhookprovider.ErrSignatureExpired},
		{name: "StaleUnderACustomTolerance", secret: secret, header: header, body: body, tolerance: 10 * time.Second, now: sent.Add(11 * time.Second), want: webhookprovider.ErrSignatureExpired},
		{name: "Missing", secret: secret, header: "", body: body, now: sent, want: webhookprovider.ErrMalformedSignature},
		{name: "NoTimestamp", secret: secret, header: header[strings.Index(header, "v1="):], body: body, now: sent, want: webhookprovider.ErrMalformedSignature},
		{name: "NoV1", secret: secret, header: "t=1714564800", body: body, now: sent, want: webhookprovider.ErrMalformedSignature},
		{name: "TwoTimestamps", secret: secret, header: "t=1," + header, body: body, now: sent, want: webhookprovider.ErrMalformedSignature},
		{name: "NonNumericTimestamp", secret: secret, header: "t=yesterday,v1=00", body: body, now: sent, want: webhookprovider.ErrMalformedSignature},
		{name: "NotHex", secret: secret, header: "t=1714564800,v1=zz", body: body, now: sent, want: webhookprovider.ErrSignatureMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := webhookprovider.VerifyAt(tc.secret, tc.header, tc.body, tc.tolerance, tc.now)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("VerifyAt = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, webhookprovider.ErrInvalidSignature) {
				t.Fatalf("VerifyAt = %v, want %v wrapping ErrInvalidSignature", err, tc.want)
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("error %q contains the secret", err)
			}
		})
	}
}

func TestVerifyUsesTheWallClock(t *testing.T) {
	t.Parallel()
	body := []byte(`{}`)
	if err := webhookprovider.Verify("s", webhookprovider.Sign("s", time.Now(), body), body, 0); err != nil {
		t.Fatalf("fresh signature: %v", err)
	}
	old := webhookprovider.Sign("s", time.Now().Add(-time.Hour), body)
	if err := webhookprovider.Verify("s", old, body, 0); !errors.Is(err, webhookprovider.ErrSignatureExpired) {
		t.Fatalf("hour-old signature: %v, want ErrSignatureExpired", err)
	}
}
