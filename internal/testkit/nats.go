package testkit

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultNATSURL is the NATS server tests use when NATS_URL is unset.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// NATSURL is the NATS server (with JetStream enabled) tests run against:
// NATS_URL, or DefaultNATSURL when that is unset or empty.
func NATSURL() string {
	if v := os.Getenv("NATS_URL"); v != "" {
		return v
	}
	return DefaultNATSURL
}

// NATS connects to NATSURL and returns the connection and its JetStream
// context; the connection is closed when the test ends.
func NATS(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	url := NATSURL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to NATS at %s (set NATS_URL): %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Stream creates a memory stream from cfg and deletes it when the test
// ends (a test may delete it earlier itself). Defaults: Name is
// "OUTBOX_TEST_<random>"; Subjects, unless cfg mirrors another stream, is
// "<prefix>.>" where prefix is "outboxtest.<random>". Storage is always
// memory. It returns the stream and prefix.
func Stream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, string) {
	t.Helper()
	suffix := Suffix()
	if cfg.Name == "" {
		cfg.Name = "OUTBOX_TEST_" + strings.ToUpper(suffix)
	}
	prefix := "outboxtest." + suffix
	if cfg.Mirror == nil && len(cfg.Subjects) == 0 {
		cfg.Subjects = []string{prefix + ".>"}
	}
	cfg.Storage = jetstream.MemoryStorage
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, cfg.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete stream %s: %v", cfg.Name, err)
		}
	})
	return stream, prefix
}
