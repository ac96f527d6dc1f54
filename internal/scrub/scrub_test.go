package scrub

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestErrKeepsTheChainAndDropsTheSecret(t *testing.T) {
	t.Parallel()
	err := Err(errors.Join(io.EOF, errors.New("auth failed for sk_live_123")), "sk_live_123", "")
	if strings.Contains(err.Error(), "sk_live_123") || !strings.Contains(err.Error(), Placeholder) {
		t.Fatalf("Err = %q", err)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatal("the chain was lost")
	}
	plain := errors.New("nothing secret")
	if Err(plain, "sk_live_123") != plain {
		t.Fatal("an error without secrets was wrapped")
	}
	if Err(nil, "x") != nil {
		t.Fatal("Err(nil) is not nil")
	}
}

func TestURLHelpers(t *testing.T) {
	t.Parallel()
	raw := "nats://alice:s3cr%2Ft@a.example:4222,nats://b.example:4222"
	if got := URL(raw); strings.Contains(got, "alice") || strings.Contains(got, "s3cr") || !strings.Contains(got, "b.example:4222") {
		t.Fatalf("URL = %q", got)
	}
	secrets := URLSecrets(raw)
	text := Text("dial nats://alice:s3cr/t@a.example and s3cr%2Ft", secrets...)
	if strings.Contains(text, "alice") || strings.Contains(text, "s3cr") {
		t.Fatalf("Text left a secret: %q", text)
	}
	if got := URL("%%%"); got != "[unparseable URL]" {
		t.Fatalf("URL(garbage) = %q", got)
	}
}
