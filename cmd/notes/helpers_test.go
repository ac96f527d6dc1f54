package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
)

// brokerURL is the RabbitMQ tests use.
func brokerURL() string {
	if v := os.Getenv("TEST_RABBITMQ_URL"); v != "" {
		return v
	}
	return defaultAMQPURL
}

// testEnv is the environment the example sees in tests: the test server
// and broker, and never a real SendGrid.
func testEnv(name string) string {
	switch name {
	case "DATABASE_URL":
		return pgtest.ServerURL()
	case "AMQP_URL":
		return brokerURL()
	}
	return ""
}

// startApp runs the service in serve mode on a fresh pgtest database and
// an ephemeral port, until the test ends.
func startApp(t *testing.T) *app {
	t.Helper()
	_, dbURL := pgtest.NewDB(t)
	o, err := parseArgs([]string{"--serve", "--addr", "127.0.0.1:0", "--database-url", dbURL}, testEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	o.logLevel = slog.LevelDebug // shown if the test fails
	a, err := start(context.Background(), o, newLogger(o, logs), io.Discard)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if err := a.close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		if t.Failed() {
			t.Logf("service logs:\n%s", logs)
		}
	})
	return a
}

// call sends a request to the app and decodes the JSON answer into out
// (when not nil). It returns the status and the raw body.
func call(t *testing.T, a *app, method, path, body string, headers map[string]string, out any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, a.baseURL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 15 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s answered %d with %q: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode, string(raw)
}

func count(t *testing.T, a *app, query string, args ...any) int {
	t.Helper()
	var n int
	if err := a.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer collects output from concurrent goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
