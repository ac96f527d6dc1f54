package pgcluster

import (
	"context"
	"errors"
	"os"
	"testing"
)

// Cluster is a test's primary and its standbys, in a directory of their
// own, stopped and removed when the test ends.
type Cluster struct {
	t       testing.TB
	dir     string
	Primary *Server
}

// ForTest starts a primary for t with settings (see StartPrimary). Without
// PostgreSQL's server programs the test is skipped, or failed under
// CI=true.
func ForTest(t testing.TB, settings Settings) *Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgcluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The servers' user must reach the directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := StartPrimary(context.Background(), dir, "primary", settings)
	if errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v, and CI=true", err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &Cluster{t: t, dir: dir, Primary: p}
}

// Standby starts a streaming standby of the primary named name, streaming
// from primaryAddr (the primary's Addr, or a Gate's).
func (c *Cluster) Standby(name, primaryAddr string) *Server {
	c.t.Helper()
	s, err := c.Primary.StartStandby(context.Background(), c.dir, name, primaryAddr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(s.Stop)
	return s
}

// Gate relays to the primary (see Gate), cut when the test ends.
func (c *Cluster) Gate() *Gate {
	c.t.Helper()
	g, err := NewGate(c.Primary.Addr())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(g.Cut)
	return g
}
