package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/outboxkit/outbox/adminhttp"
)

// runHealthcheck asks the admin server of a running `outboxd run` for
// /healthz: a container health check for images without curl.
func runHealthcheck(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("healthcheck", "healthcheck [flags]", `
Asks the admin server of 'outboxd run' whether it is alive (GET /healthz,
which needs no token) and exits 0 when it answers 200 "ok", 1 otherwise,
with the reason on one line. Meant for container health checks, e.g. in
docker-compose.yml:

  healthcheck:
    test: ["CMD", "/usr/local/bin/outboxd", "healthcheck"]

It reads the same --admin-addr (OUTBOXD_ADMIN_ADDR) as 'outboxd run'; a
wildcard listen address (0.0.0.0:8080, [::]:8080, :8080) is reached on
loopback.`, env)
	addr := fs.String("admin-addr", adminhttp.DefaultAddr, "the admin server's address, as given to 'outboxd run --admin-addr'")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := parse(fs, args, env); err != nil {
		if errors.Is(err, errUsage) {
			// A health check knows only healthy (0) and unhealthy (1).
			return errors.New(err.Error())
		}
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", *timeout)
	}
	target, err := healthzURL(*addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	client := &http.Client{
		// The admin server is local: no proxy, no redirects.
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("unhealthy: %s did not answer within %s", target, *timeout)
		}
		return fmt.Errorf("unhealthy: %s: %v", target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("unhealthy: %s answered %s", target, resp.Status)
	}
	if string(body) != "ok\n" {
		return fmt.Errorf("unhealthy: %s answered 200 but not \"ok\": is another server listening there?", target)
	}
	fmt.Fprintf(env.Stdout, "healthy: %s answered ok\n", target)
	return nil
}

// healthzURL is the /healthz URL of an admin server listening on addr; a
// wildcard host is reached on loopback.
func healthzURL(addr string) (string, error) {
	if addr == "" {
		return "", errors.New("--admin-addr is empty: the admin server is disabled, so there is nothing to check")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--admin-addr %q is not host:port (e.g. 127.0.0.1:8080)", addr)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: "/healthz"}).String(), nil
}
