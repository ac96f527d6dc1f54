package webhookprovider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader is the request header that carries the signature of every
// delivery, in the form "t=<unix seconds>,v1=<hex HMAC-SHA256>". See Sign.
const SignatureHeader = "X-Outbox-Signature"

// DefaultTolerance is how far a signature's timestamp may be from the
// receiver's clock, in either direction, before Verify refuses it as a
// possible replay. It is Stripe's default.
const DefaultTolerance = 5 * time.Minute

// ErrInvalidSignature is wrapped by every error Verify returns. A receiver
// answers it with 401 and does not act.
var ErrInvalidSignature = errors.New("invalid webhook signature")

// The reasons a signature is refused. Each wraps ErrInvalidSignature.
var (
	// ErrMalformedSignature: the header is missing, or is not of the form
	// "t=<unix>,v1=<hex>".
	ErrMalformedSignature = fmt.Errorf("%w: header missing or malformed", ErrInvalidSignature)
	// ErrSignatureMismatch: no v1 value is the HMAC of this body under this
	// secret (the body was altered, or the secret is wrong).
	ErrSignatureMismatch = fmt.Errorf("%w: no signature matches the body", ErrInvalidSignature)
	// ErrSignatureExpired: the timestamp is further than the tolerance from
	// the receiver's clock (a replayed or badly delayed request).
	ErrSignatureExpired = fmt.Errorf("%w: timestamp outside the tolerance", ErrInvalidSignature)
)

// Sign returns the value of SignatureHeader for body sent at t under secret:
//
//	t=<t as Unix seconds>,v1=<lowercase hex of HMAC-SHA256(secret, "<t>.<body>")>
//
// This is Stripe's webhook signature scheme with our own header name: the
// timestamp is signed together with the exact bytes of the body, so neither
// can be changed, and a receiver that checks the timestamp against its clock
// (Verify) refuses old requests replayed by an attacker. The secret is used
// as its bytes, as given.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a delivery's SignatureHeader value against the raw request
// body, as a receiver must before acting on it: the header must carry a
// timestamp within tolerance of time.Now (tolerance <= 0 means
// DefaultTolerance) and at least one v1 signature equal to the HMAC-SHA256 of
// "<timestamp>.<body>" under secret. Several v1 values are allowed, so a
// sender may sign with an old and a new secret while rotating. Unknown
// schemes (v0=...) are ignored. The comparison is constant-time.
//
// It returns nil or an error wrapping ErrInvalidSignature (and one of
// ErrMalformedSignature, ErrSignatureMismatch, ErrSignatureExpired). Pass
// the body exactly as received, before any JSON decoding.
func Verify(secret, header string, body []byte, tolerance time.Duration) error {
	return VerifyAt(secret, header, body, tolerance, time.Now())
}

// VerifyAt is Verify with the receiver's clock given as now, for receivers
// with an injected clock and for tests.
func VerifyAt(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	ts, sigs, ok := parseSignature(header)
	if !ok {
		return ErrMalformedSignature
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrMalformedSignature
	}
	// Check the signature before the age: a forged header learns nothing
	// about the receiver's clock.
	want := mac(secret, ts, body)
	matched := false
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		if err == nil && hmac.Equal(got, want) {
			matched = true
		}
	}
	if !matched {
		return ErrSignatureMismatch
	}
	age := now.Sub(time.Unix(sec, 0))
	if age > tolerance || age < -tolerance {
		return ErrSignatureExpired
	}
	return nil
}

// parseSignature splits "t=123,v1=abc,v1=def" into the timestamp and the v1
// values. It fails without exactly one t and at least one v1.
func parseSignature(header string) (ts string, v1 []string, ok bool) {
	header = strings.TrimSpace(header)
	if header == "" {
		return "", nil, false
	}
	for _, part := range strings.Split(header, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found || v == "" {
			return "", nil, false
		}
		switch k {
		case "t":
			if ts != "" {
				return "", nil, false
			}
			ts = v
		case "v1":
			v1 = append(v1, v)
		}
	}
	return ts, v1, ts != "" && len(v1) > 0
}
