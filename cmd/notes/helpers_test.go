package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// testEnv is the environment the example sees in tests: the test server
// and broker, and never a real SendGrid.
func testEnv(name string) string {
	switch name {
	case "DATABASE_URL":
		return pgtest.ServerURL()
	case "AMQP_URL":
		return testkit.RabbitURL()
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
	logs := &testkit.SyncBuffer{}
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
